"""Ray Train per-chip path vs the same loop in bare processes: step time ratio and time to first step.

Both sides run the same train loop (the dev stack's GPT, XLA on CPU, one process per emulated chip) with the same
gradient average (``tpuray.workloads.optimizer_step`` over gloo). The Ray side is ``TorchTrainer`` +
``XlaChipConfig`` + ``tpu_scaling_config`` on the emulated slice (cluster already running, as on GKE); the bare
side is the same number of ``multiprocessing`` processes given the same chip assignment by hand. Bare runs before
and after the Ray run, so drifting machine load shows up on both sides. Prints one JSON line:
``{"step_time_ratio", "time_to_first_step_ratio", ...}`` (targets: <= 1.10 and <= 1.3).

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

from tpuray.components.config import load_stack_file
from tpuray.components.topology import TpuSlice
from tpuray.workloads.metrics import ModelShape
from tpuray.workloads.worker_env import LOCAL_WORKER_ENV

WARMUP = 5  # steps that compile graphs; not in the step time


def loop(shape: ModelShape, batch: int, steps: int) -> dict[str, Any]:
    """The measured loop; needs ``tpuray.workloads.chip()`` (set by the backend, or by hand in a bare process)."""
    import torch
    import torch_xla

    from tpuray.workloads import chip, optimizer_step
    from tpuray.workloads.data import SyntheticTokens
    from tpuray.workloads.model import GPT

    torch.set_num_threads(1)
    c = chip()
    torch.manual_seed(0)
    model = GPT(shape).to(c.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = SyntheticTokens(shape.vocab_size)
    times, first_done = [], 0.0
    for step in range(steps):
        t = time.perf_counter()
        x = torch.from_numpy(data.batch(step, c.rank, c.world_size, batch, shape.seq_len)).to(c.device)
        loss = model.loss(x)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        torch_xla.sync()
        float(loss.detach())  # wait for the device each step: a fair per-step time on both sides
        times.append(time.perf_counter() - t)
        if step == 0:
            first_done = time.time()
    return {"step_s": median(times[WARMUP:]), "first_done": first_done, "rank": c.rank}


def _ray_train_fn(config: dict[str, Any]) -> None:
    import ray.train

    out = loop(config["shape"], config["batch"], config["steps"])
    ray.train.report(out)
    Path(config["out"], f"{out['rank']}.json").write_text(json.dumps(out))


def _bare_worker(assignment: Any, master: tuple[str, int], shape: ModelShape, batch: int, steps: int, q: Any) -> None:
    os.environ.update(LOCAL_WORKER_ENV)
    from tpuray.workloads.backend import _apply, _join

    _apply(assignment)  # the same chip assignment and process group the backend sets up
    _join(master, 120.0)
    q.put(loop(shape, batch, steps))


def bare(tpu_slice: TpuSlice, shape: ModelShape, batch: int, steps: int) -> tuple[float, float]:
    from tpuray.workloads.placement import Seat, assign_chips

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
    return max(r["step_s"] for r in results), max(r["first_done"] for r in results) - t0


def with_ray(tpu_slice: TpuSlice, shape: ModelShape, batch: int, steps: int) -> tuple[float, float]:
    import ray
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    from tpuray.workloads import XlaChipConfig, emulate, tpu_scaling_config

    with emulate(tpu_slice) as cluster, tempfile.TemporaryDirectory() as out:
        ray.init(address=cluster.address, log_to_driver=False)
        t0 = time.time()
        TorchTrainer(
            _ray_train_fn,
            train_loop_config={"shape": shape, "batch": batch, "steps": steps, "out": out},
            scaling_config=tpu_scaling_config(tpu_slice),
            torch_config=XlaChipConfig(),
            run_config=RunConfig(storage_path=out, name="bench"),
        ).fit()
        results = [json.loads(p.read_text()) for p in Path(out).glob("*.json")]
    return max(r["step_s"] for r in results), max(r["first_done"] for r in results) - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack-file", type=Path, default=Path("Pulumi.dev.yaml"))
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    cfg = load_stack_file(args.stack_file)
    w = cfg.workload
    tpu_slice = cfg.workload_pool().tpu_slice
    shape = ModelShape(w.model.vocab_size, w.model.layers, w.model.d_model, w.model.heads, w.seq_len)
    os.environ.update(LOCAL_WORKER_ENV)
    b1 = bare(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    r = with_ray(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    b2 = bare(tpu_slice, shape, w.batch_size_per_chip, args.steps)
    bare_step, bare_first = (b1[0] + b2[0]) / 2, (b1[1] + b2[1]) / 2
    print(
        json.dumps(
            {
                "event": "bench.train_overhead",
                "slice": str(tpu_slice),
                "processes": tpu_slice.chips,
                "steps": args.steps,
                "ray_step_s": r[0],
                "bare_step_s": bare_step,
                "step_time_ratio": r[0] / bare_step,
                "ray_time_to_first_step_s": r[1],
                "bare_time_to_first_step_s": bare_first,
                "time_to_first_step_ratio": r[1] / bare_first,
                "bare_runs": [b1, b2],
                "target_step_time_ratio": 1.10,
                "target_time_to_first_step_ratio": 1.3,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
