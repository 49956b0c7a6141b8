"""Ray per-chip training vs the same loop in bare processes: per-step time ratio and time to first step.

Both sides run :class:`tpuray.workloads.loop.ChipTrainer` with the same job (the dev stack's model and slice,
XLA on CPU, gloo gradient averaging), the same number of processes (one per emulated chip) and the same
chunking (``log_every`` steps per call). Prints one JSON line:
``{"ray_step_s", "bare_step_s", "ratio", "ray_time_to_first_step_s", "bare_time_to_first_step_s", ...}``.

    python bench/train_overhead.py [--rounds 8] [--log-every 10] [--stack-file Pulumi.dev.yaml]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from tpuray.components.config import load_stack_file
from tpuray.workloads.emulation import LOCAL_WORKER_ENV
from tpuray.workloads.job import JobSpec
from tpuray.workloads.metrics import ModelShape


def _bare_worker(spec: JobSpec, rank: int, world: int, port: int, conn: Any) -> None:
    os.environ.update(spec.extra_env)
    from tpuray.workloads.loop import ChipTrainer

    trainer = ChipTrainer(spec, rank, world, "127.0.0.1", port)
    conn.send(trainer.setup())
    while (msg := conn.recv()) is not None:
        conn.send(trainer.run(msg) if msg >= 0 else trainer.digest())
    trainer.close()


class BareGroup:
    """One process per chip without Ray, driven over pipes like the Ray group is driven over actor calls."""

    def __init__(self, spec: JobSpec) -> None:
        world = spec.tpu_slice.chips
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for r in range(world):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_bare_worker, args=(spec, r, world, port, child))
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)
        for c in self.pipes:
            c.recv()

    def call(self, until: int) -> list[Any]:
        for c in self.pipes:
            c.send(until)
        return [c.recv() for c in self.pipes]

    def close(self) -> None:
        for c in self.pipes:
            c.send(None)
        for p in self.procs:
            p.join(timeout=30)


def measure(spec: JobSpec, rounds: int) -> dict[str, Any]:
    """Both groups side by side; they take turns, ``log_every`` steps each, so both see the same machine load
    (on a shared 2-core machine the load drifts more than the overhead we measure)."""
    import ray

    from tpuray.workloads.emulation import EmulatedCluster
    from tpuray.workloads.group import WorkerGroup

    t0 = time.perf_counter()
    bare = BareGroup(spec)
    bare_first = bare.call(1)
    bare_ttfs = time.perf_counter() - t0
    t0 = time.perf_counter()
    with EmulatedCluster(spec.tpu_slice) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        group = WorkerGroup.create(spec.tpu_slice)
        group.call("setup", spec, group.master(), 0)
        group.call("run", 1)
        ray_ttfs = time.perf_counter() - t0
        step, pairs = 1, []
        for i in range(rounds + 1):
            until = step + spec.log_every
            b = max(r.step_time_s for r in bare.call(until))
            g = max(r.step_time_s for r in group.call("run", until))
            step = until
            if i:  # the first round compiles the steady-state graphs
                pairs.append((g, b))
        identical = {"ray": len(set(group.call("digest"))) == 1, "bare": len(set(bare.call(-1))) == 1}
        group.shutdown()
    bare.close()
    del bare_first
    ray_s = median(g for g, _ in pairs)
    bare_s = median(b for _, b in pairs)
    return {
        "ray_step_s": ray_s,
        "bare_step_s": bare_s,
        "ratio": ray_s / bare_s,
        "ratio_of_pairs_median": median(g / b for g, b in pairs),
        "ray_time_to_first_step_s": ray_ttfs,
        "bare_time_to_first_step_s": bare_ttfs,
        "params_identical": identical,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack-file", type=Path, default=Path("Pulumi.dev.yaml"))
    p.add_argument("--rounds", type=int, default=8, help="measured turns per side")
    p.add_argument("--log-every", type=int, default=10, help="steps per turn")
    args = p.parse_args()
    cfg = load_stack_file(args.stack_file)
    w = cfg.workload
    spec = JobSpec(
        slice_spec=str(cfg.workload_pool().tpu_slice),
        model=ModelShape(w.model.vocab_size, w.model.layers, w.model.d_model, w.model.heads, w.seq_len),
        steps=(args.rounds + 1) * args.log_every + 1,
        batch_size_per_chip=w.batch_size_per_chip,
        learning_rate=w.learning_rate,
        checkpoint_every=10**9,  # measure the loop, not the disk
        checkpoint_dir=None,
        collective="gloo",
        bf16=False,
        log_every=args.log_every,
        cpu_threads=1,
        extra_env=dict(LOCAL_WORKER_ENV),
    )
    result = measure(spec, args.rounds)
    print(
        json.dumps(
            {
                "event": "bench.train_overhead",
                "slice": spec.slice_spec,
                "processes": spec.tpu_slice.chips,
                "steps_per_turn": args.log_every,
                "rounds": args.rounds,
                **result,
                "target_ratio": 1.10,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
