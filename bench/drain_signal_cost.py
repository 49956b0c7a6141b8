"""What ``should_checkpoint_now`` costs a step: its agreement all-reduce vs the step's own gradient all-reduce.

``W`` bare processes join a gloo group (as on the emulated slice) and each times ``K`` calls of a
:class:`tpuray.workloads.signals.drain.CheckpointSignal` (the drain flag is a local read; the cost is the 2-float
all-reduce), then ``K`` all-reduces of the dev stack GPT's gradient (what ``optimizer_step`` averages every step).
Prints one JSON line: ``{"signal_ms", "grad_allreduce_ms", "ratio", ...}`` (median over ranks; the ratio is the
signal's share of the gradient average it rides next to).

    python bench/drain_signal_cost.py [--workers 8] [--steps 300] [--stack-file Pulumi.dev.yaml]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import time
from pathlib import Path
from statistics import median
from typing import Any

from figures import add_record_flag, emit

from tpuray.components.config import load_stack_file
from tpuray.workloads.gpt.metrics import ModelShape


def rank_main(rank: int, world: int, port: int, steps: int, grad_floats: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    from tpuray.workloads.signals.drain import CheckpointSignal

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

    def mean(values: Any) -> list[float]:
        t = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(t)
        out: list[float] = (t / world).tolist()
        return out

    signal = CheckpointSignal(draining=lambda: False, deadline=None, mean_over_ranks=mean)
    grad = torch.ones(grad_floats)
    for _ in range(10):  # warm-up: connections
        signal(0)
        dist.all_reduce(grad)
    dist.barrier()
    t = time.perf_counter()
    for step in range(steps):
        signal(step)
    signal_s = (time.perf_counter() - t) / steps
    dist.barrier()
    t = time.perf_counter()
    for _ in range(steps):
        dist.all_reduce(grad)
    grad_s = (time.perf_counter() - t) / steps
    dist.destroy_process_group()
    out.put((signal_s, grad_s))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--stack-file", type=Path, default=Path(__file__).resolve().parents[1] / "Pulumi.dev.yaml")
    add_record_flag(p)
    args = p.parse_args()
    m = load_stack_file(args.stack_file).workload
    shape = ModelShape(m.model.vocab_size, m.model.layers, m.model.d_model, m.model.heads, m.seq_len)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=rank_main, args=(r, args.workers, port, args.steps, shape.params, q))
        for r in range(args.workers)
    ]
    for proc in procs:
        proc.start()
    results = [q.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    signal_s = median(r[0] for r in results)
    grad_s = median(r[1] for r in results)
    emit(
        "drain_signal_cost",
        {
            "bench": "drain_signal_cost",
            "workers": args.workers,
            "steps": args.steps,
            "grad_floats": shape.params,
            "signal_ms": round(signal_s * 1e3, 4),
            "grad_allreduce_ms": round(grad_s * 1e3, 4),
            "ratio": round(signal_s / grad_s, 4),
        },
        record_it=args.record,
    )


if __name__ == "__main__":
    main()
