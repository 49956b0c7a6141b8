"""Ray Train per-chip path vs the same loop in bare processes; and Ray Train's portable API vs ``optimizer_step``.

Both sides run the same train loop (the dev stack's GPT, XLA on CPU, one process per emulated chip) with the same
gradient average (``tpuray.workloads.optimizer_step`` over gloo). The Ray side is ``TorchTrainer`` +
``XlaChipConfig`` + ``tpu_scaling_config`` on the emulated slice (cluster already running, as on GKE); the bare
side is the same number of ``multiprocessing`` processes given the same chip assignment by hand. Bare runs before
and after the Ray runs, so drifting machine load shows up on both sides. A second Ray run trains the same model
with the same loop through Ray Train's portable API (``prepare_model`` + ``prepare_data_loader`` + a plain
``optimizer.step()``); only the calls of the API under test differ (:func:`loop`).
The time to the first step is broken down per side: until the worker process exists (placement and worker start
on Ray; spawn on bare), until the loop starts (imports, Ray worker setup, backend setup), and the first step
(the first compile). Prints one JSON line: ``{"step_time_ratio", "time_to_first_step_ratio",
"portable_step_time_ratio", "compiles", "graphs_per_step", "breakdown", ...}`` (targets: <= 1.10, <= 1.3, <= 1.10,
equal compiles; ``compiles_by_step`` has each chip's count after each step). ``graphs_per_step`` counts the
graphs each step ran after the warm-up (torch_xla's ``ExecuteTime``): how often the step's graph was cut.

    python bench/train_overhead.py [--steps 60] [--stack-file Pulumi.dev.yaml]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from figures import add_record_flag, emit

from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import load_stack_file
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.placement.worker_env import LOCAL_WORKER_ENV

WARMUP = 5  # steps that compile graphs; not in the step time


def _process_started() -> float:
    """When this process started (epoch seconds), from ``/proc`` (Linux; 10 ms resolution)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(
        float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _compiles() -> int:
    import torch_xla.debug.metrics as met

    return int((met.metric_data("CompileTime") or [0])[0])  # type: ignore[no-untyped-call]


def _executions() -> int:
    """Graphs run so far (torch_xla's ``ExecuteTime`` count): per step, how often the step's graph was cut."""
    import torch_xla.debug.metrics as met

    return int((met.metric_data("ExecuteTime") or [0])[0])  # type: ignore[no-untyped-call]


def loop(shape: ModelShape, batch: int, steps: int, portable: bool = False) -> dict[str, Any]:
    """The measured loop, the same on both paths except for the API under test: with ``portable``, Ray Train's
    portable API (``prepare_model``, ``prepare_data_loader``, a plain ``optimizer.step()``; no tpuray or XLA
    call); else tpuray's XLA-aware verbs (``chip()``'s device, ``optimizer_step``, ``torch_xla.sync()``), which
    need ``chip()`` (set by the backend, or by hand in a bare process)."""
    loop_start = time.time()
    import numpy as np
    import torch
    import torch_xla

    from tpuray.workloads.gpt.data import SyntheticTokens
    from tpuray.workloads.gpt.model import GPT, next_token_loss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = SyntheticTokens(shape.vocab_size)
    if portable:
        import ray.train
        import ray.train.torch
        from torch.utils.data import DataLoader, TensorDataset

        world = ray.train.get_context().get_world_size()
        rank = ray.train.get_context().get_world_rank()
        model = ray.train.torch.prepare_model(GPT(shape))
        tokens = np.concatenate([data.batch(i, 0, 1, batch, shape.seq_len) for i in range(steps * world)])
        loader = DataLoader(TensorDataset(torch.from_numpy(tokens)), batch_size=batch)
        batches: Any = (x for (x,) in ray.train.torch.prepare_data_loader(loader))
    else:
        from tpuray.workloads import chip, optimizer_step

        c = chip()
        rank = c.rank
        model = GPT(shape).to(c.device)
        batches = (
            torch.from_numpy(data.batch(step, c.rank, c.world_size, batch, shape.seq_len)).to(c.device)
            for step in range(steps)
        )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times, compiles_by_step, first_done, ran = [], [], 0.0, 0
    t = time.perf_counter()
    for step, x in enumerate(batches):
        if step == WARMUP:
            ran = _executions()
        loss = next_token_loss(model, x)
        loss.backward()  # type: ignore[no-untyped-call]
        if portable:
            opt.step()  # DDP averaged the gradients; the loader cuts the graph at the next batch
        else:
            optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        if not portable:
            torch_xla.sync()
        float(loss.detach())  # wait for the device each step: a fair per-step time on both sides
        times.append(time.perf_counter() - t)
        compiles_by_step.append(_compiles())
        if step == 0:
            first_done = time.time()
        t = time.perf_counter()
    return {
        "step_s": median(times[WARMUP:]),
        "first_done": first_done,
        "rank": rank,
        "process_start": _process_started(),
        "loop_start": loop_start,
        "compiles": _compiles(),
        "compiles_by_step": compiles_by_step,
        "graphs_per_step": (_executions() - ran) / (steps - WARMUP),
    }


def _ray_train_fn(config: dict[str, Any]) -> None:
    import ray.train

    out = loop(config["shape"], config["batch"], config["steps"], config["portable"])
    ray.train.report(out)
    Path(config["out"], f"{out['rank']}.json").write_text(json.dumps(out))


def _bare_worker(assignment: Any, master: tuple[str, int], shape: ModelShape, batch: int, steps: int, q: Any) -> None:
    os.environ.update(LOCAL_WORKER_ENV)
    from tpuray.workloads.xla.backend import apply_assignment, join_process_group

    apply_assignment(assignment)  # the same chip assignment and process group the backend sets up
    join_process_group(master, 120.0)
    q.put(loop(shape, batch, steps))


def bare(tpu_slice: TpuSlice, shape: ModelShape, batch: int, steps: int) -> dict[str, Any]:
    from tpuray.workloads.placement.seats import Seat, assign_chips

    seats = [
        Seat(i, 0, "bare", 0, c, "127.0.0.1") for i, c in enumerate(range(tpu_slice.chips))
    ]  # single-host slice: one host
    assignments = assign_chips(tpu_slice, 1, seats)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    t0 = time.time()
    procs = [
        ctx.Process(target=_bare_worker, args=(a, ("127.0.0.1", port), shape, batch, steps, q)) for a in assignments
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return summarise(results, t0)


def summarise(results: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """Slowest chip's step time; time to first step and its breakdown, from the call that started the run."""
    return {
        "step_s": max(r["step_s"] for r in results),
        "first_step_s": max(r["first_done"] for r in results) - t0,
        "breakdown_s": {
            "until_process": max(r["process_start"] for r in results) - t0,
            "process_to_loop": max(r["loop_start"] - r["process_start"] for r in results),
            "first_step": max(r["first_done"] - r["loop_start"] for r in results),
        },
        "compiles": max(r["compiles"] for r in results),
        "compiles_by_step": {r["rank"]: r["compiles_by_step"] for r in results},
        "graphs_per_step": max(r["graphs_per_step"] for r in results),
    }


def with_ray(tpu_slice: TpuSlice, shape: ModelShape, batch: int, steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    import ray
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    from tpuray.workloads import XlaChipConfig, emulate, tpu_scaling_config
    from tpuray.workloads.emulation.cluster import RAY_METRICS_INTERVAL_S

    runs = []
    # Ray's default metrics interval, as on GKE: emulate()'s 1 s (for tests that scrape a short run) costs the
    # four emulated chips' two cores about 3% of their step time
    with emulate(tpu_slice, metrics_interval_s=RAY_METRICS_INTERVAL_S) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        for portable in (False, True):
            with tempfile.TemporaryDirectory() as out:
                t0 = time.time()
                TorchTrainer(
                    _ray_train_fn,
                    train_loop_config={
                        "shape": shape,
                        "batch": batch,
                        "steps": steps,
                        "out": out,
                        "portable": portable,
                    },
                    scaling_config=tpu_scaling_config(tpu_slice),
                    torch_config=XlaChipConfig(),
                    run_config=RunConfig(storage_path=out, name="bench"),
                ).fit()
                runs.append(summarise([json.loads(p.read_text()) for p in Path(out).glob("*.json")], t0))
    return runs[0], runs[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack-file", type=Path, default=Path("Pulumi.dev.yaml"))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ray-only", action="store_true", help="only the two Ray runs: portable vs optimizer_step")
    add_record_flag(p)
    args = p.parse_args()
    cfg = load_stack_file(args.stack_file)
    w = cfg.workload
    tpu_slice = cfg.workload_pool().tpu_slice
    shape = ModelShape(w.model.vocab_size, w.model.layers, w.model.d_model, w.model.heads, w.seq_len)
    os.environ.update(LOCAL_WORKER_ENV)
    if args.ray_only:
        r, portable = with_ray(tpu_slice, shape, w.batch_size_per_chip, args.steps)
        emit(
            "train_overhead_portable",
            {
                "event": "bench.train_overhead.portable",
                "steps": args.steps,
                "ray_step_s": r["step_s"],
                "portable_step_s": portable["step_s"],
                "portable_step_time_ratio": portable["step_s"] / r["step_s"],
                "compiles": {"optimizer_step": r["compiles"], "portable": portable["compiles"]},
                "compiles_by_step": {
                    "optimizer_step": r["compiles_by_step"],
                    "portable": portable["compiles_by_step"],
                },
                "graphs_per_step": {
                    "optimizer_step": r["graphs_per_step"],
                    "portable": portable["graphs_per_step"],
                },
                "breakdown_s": {"ray": r["breakdown_s"], "portable": portable["breakdown_s"]},
            },
            record_it=args.record,
        )
        return 0
    b1 = bare(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    r, portable = with_ray(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    b2 = bare(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    bare_step, bare_first = (b1["step_s"] + b2["step_s"]) / 2, (b1["first_step_s"] + b2["first_step_s"]) / 2
    emit(
        "train_overhead",
        {
            "event": "bench.train_overhead",
            "slice": str(tpu_slice),
            "processes": tpu_slice.chips,
            "steps": args.steps,
            "ray_step_s": r["step_s"],
            "bare_step_s": bare_step,
            "step_time_ratio": r["step_s"] / bare_step,
            "ray_time_to_first_step_s": r["first_step_s"],
            "bare_time_to_first_step_s": bare_first,
            "time_to_first_step_ratio": r["first_step_s"] / bare_first,
            "portable_step_s": portable["step_s"],
            "portable_step_time_ratio": portable["step_s"] / r["step_s"],
            "compiles": {"optimizer_step": r["compiles"], "portable": portable["compiles"]},
            "graphs_per_step": {"optimizer_step": r["graphs_per_step"], "portable": portable["graphs_per_step"]},
            "breakdown_s": {
                "ray": r["breakdown_s"],
                "portable": portable["breakdown_s"],
                "bare": [b1["breakdown_s"], b2["breakdown_s"]],
            },
            "bare_runs": [[b1["step_s"], b1["first_step_s"]], [b2["step_s"], b2["first_step_s"]]],
            "target_step_time_ratio": 1.10,
            "target_time_to_first_step_ratio": 1.3,
            "target_portable_step_time_ratio": 1.10,
        },
        record_it=args.record,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
