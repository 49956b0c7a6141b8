"""An elastic run through a lost slice on the emulated cluster: time to train on fewer slices, and back.

Two multi-host v5p 2x2x2 slices (8 emulated chips on two hosts each; GKE Multislice joins only multi-host slices,
so no single-host shape can stand in) train the built-in GPT elastically between one and two slices
(``tpu_scaling_config(num_slices=2, min_slices=1)``). Mid-run the bench takes both hosts of one slice away, as GKE
taking a preempted slice's VMs; Ray Train restarts the group on the slice that remains from the last checkpoint;
later the bench brings the hosts back and Ray Train grows the group again. It reads the run's event log:

* ``shrink_s``: from the slice's loss to the end of the first step on one slice;
* ``grow_s``: from the hosts' return to the end of the first step on two slices again;
* ``cold_start_s``, the baseline in the same run: from ``fit()`` to the end of the run's first step;
* ``shrink_ratio``, ``grow_ratio``: each over the baseline;
* ``loss_max_rel_diff``: the largest relative difference, over every step, between the run's losses and an unbroken
  two-slice run's on the same data (the global batch is kept, so they should agree within 1e-4).

``--backend torch_tpu`` runs TorchTPU's built-in sharded job instead (``gpt/fsdp2_loop.py``, one worker per device
on TorchTPU's CPU stand-in, FSDP2 over each slice's 8 devices, the data axis over the live slices: its DCP checkpoint
written on two slices restores on one and back), recorded as ``elastic_resize_torch_tpu``.

Heavy (16 worker processes): run it alone, under the machine's heavy lock::

    flock /tmp/heavy.lock python bench/elastic_resize.py [--steps 900] [--record]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from figures import add_record_flag, emit

from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.gpt.loop import GptJob, train_gpt
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.signals.goodput import EVENTS_FILE, read_events

SLICE = TpuSlice.parse("v5p:2x2x2")
SHAPE = ModelShape(vocab_size=64, layers=1, d_model=16, heads=2, seq_len=8)


def _job(run_dir: str, steps: int, every: int) -> GptJob:
    return GptJob(
        model=SHAPE,
        steps=steps,
        batch_size_per_chip=2,
        learning_rate=3e-3,
        checkpoint_every=every,
        slice_spec=str(SLICE),
        bf16=False,
        log_every=every,
        cpu_threads=1,
        run_dir=run_dir,
        run_name=Path(run_dir).name,
        elastic=(1, 2),
    )


def _fit(storage: str, name: str, steps: int, every: int, interval_s: float, backend: str) -> tuple[Any, float]:
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig

    from tpuray.workloads.gpt.fsdp2_loop import train_gpt_fsdp2
    from tpuray.workloads.launch import trainer

    job = _job(os.path.join(storage, name), steps, every)
    # Ray Train V2's RunConfig, which its TorchTrainer takes in 2.60 (its stub still names the V1 class)
    run_config: Any = RunConfig(
        name=name,
        storage_path=storage,
        checkpoint_config=CheckpointConfig(num_to_keep=2),
        failure_config=FailureConfig(max_failures=4, max_preemption_failures=4, controller_failure_limit=4),
    )
    # TorchTPU: the sharded job, FSDP over each slice's devices and the data axis over the live slices
    fn, config = (
        (train_gpt, {"job": job})
        if backend == "xla"
        else (train_gpt_fsdp2, {"job": job, "fsdp": SLICE.devices, "tensor": 1, "num_slices": 2})
    )
    fit = trainer(
        fn,
        config,
        SLICE,
        2,
        run_config,
        backend="xla" if backend == "xla" else "torch_tpu",
        min_slices=1,
        elastic_resize_monitor_interval_s=interval_s,
    )
    t0 = time.time()
    return fit.fit(), t0


def _events(run_dir: str) -> list[dict[str, Any]]:
    return read_events(Path(run_dir) / EVENTS_FILE)


def _first_step_after(events: list[dict[str, Any]], t: float, slices: int) -> float | None:
    """The end of the first step after ``t`` of an attempt on ``slices`` slices."""
    size = None
    for e in events:
        if e["e"] == "size":
            size = e["slices"]
        elif e["e"] == "step" and size == slices and e["t"] >= t:
            return float(e["t1"])
    return None


def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--steps", type=int, default=900, help="enough for the slice to return and the group to grow before the end"
    )
    p.add_argument("--every", type=int, default=10, help="checkpoint period in steps")
    p.add_argument("--monitor-s", type=float, default=3.0, help="elastic_resize_monitor_interval_s")
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument(
        "--backend",
        choices=("xla", "torch_tpu"),
        default="xla",
        help="torch_tpu: the sharded job on TorchTPU's stand-in, recorded as elastic_resize_torch_tpu",
    )
    add_record_flag(p)
    args = p.parse_args()

    import ray

    from tpuray.workloads import _ray_compat
    from tpuray.workloads.emulation.cluster import EmulatedCluster

    storage = tempfile.mkdtemp(prefix="tpuray-elastic-")
    with EmulatedCluster(SLICE, slices=2) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        _ray_compat.ready_train_autoscaling_coordinator()
        run_dir = os.path.join(storage, "elastic")
        marks: dict[str, float] = {}
        fitted: dict[str, Any] = {}

        def fit() -> None:  # in a thread: Ray adds a node only from the main thread, where the disruption runs
            try:
                fitted["result"], fitted["t0"] = _fit(
                    storage, "elastic", args.steps, args.every, args.monitor_s, args.backend
                )
            except BaseException as e:  # re-raised in the main thread
                fitted["error"] = e

        runner = threading.Thread(target=fit, daemon=True)
        runner.start()
        early = min(args.steps // 4, 3 * args.every)
        _wait(lambda: any(e["e"] == "step" and e["n"] >= early for e in _events(run_dir)), args.timeout_s, "steps")
        lost = cluster.slice_names()[1]
        specs = [cluster.take_host(cluster.host_node_id(lost, w)) for w in range(SLICE.hosts)]
        marks["loss"] = time.time()
        _wait(lambda: _first_step_after(_events(run_dir), marks["loss"], 1), args.timeout_s, "a step on 1 slice")
        cluster.bring_back(specs)  # the slice's VMs back together, as GKE recreates them
        marks["return"] = time.time()
        runner.join(timeout=args.timeout_s)
        if "error" in fitted:
            raise fitted["error"]
        if "result" not in fitted:
            raise TimeoutError(f"the elastic run did not end within {args.timeout_s:.0f} s")
        result, t0 = fitted["result"], fitted["t0"]
        if result.error is not None:
            raise result.error
        events = _events(run_dir)
        first = next(float(e["t1"]) for e in events if e["e"] == "step")
        shrink_at = _first_step_after(events, marks["loss"], 1)
        grow_at = _first_step_after(events, marks.get("return", float("inf")), 2)
        losses = list(result.metrics["losses"])

        unbroken, _ = _fit(storage, "unbroken", args.steps, args.every, args.monitor_s, args.backend)
        if unbroken.error is not None:
            raise unbroken.error
        reference = list(unbroken.metrics["losses"])
    cold = first - t0
    shrink = shrink_at - marks["loss"] if shrink_at is not None else None
    grow = grow_at - marks["return"] if grow_at is not None and "return" in marks else None
    resizes = [(e["from"], e["to"], e["step"]) for e in events if e["e"] == "resize"]
    emit(
        "elastic_resize" + ("" if args.backend == "xla" else f"_{args.backend}"),
        {
            "runtime": args.backend,
            "slice": str(SLICE),
            "slices": [1, 2],
            "steps": args.steps,
            "checkpoint_every": args.every,
            "elastic_resize_monitor_interval_s": args.monitor_s,
            "cold_start_s": round(cold, 2),
            "shrink_s": None if shrink is None else round(shrink, 2),
            "grow_s": None if grow is None else round(grow, 2),
            "shrink_ratio": None if shrink is None else round(shrink / cold, 3),
            "grow_ratio": None if grow is None else round(grow / cold, 3),
            "returned_after_loss_s": round(marks["return"] - marks["loss"], 2) if "return" in marks else None,
            "resizes": resizes,
            "loss_max_rel_diff": max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True)),
        },
        record_it=args.record,
    )


if __name__ == "__main__":
    main()
