"""Sharded vs unsharded step time and per-device bytes of the GPT on the emulated slice (PyTorch/XLA SPMD).

One process over ``--devices`` virtual CPU devices (``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES``, read once when
torch_xla initialises, so the measurement runs in a child process), each plan of ``--plans`` (``fsdp,tensor``;
``1,1`` is the unsharded step over the same mesh) trained with AdamW: ``--warmup`` steps that compile, then the
median of ``--steps`` timed steps, and the bytes each device holds of weights, gradients and AdamW's moments (from
the local shards) beside the config's estimate (``training_state_bytes_per_device``). A CPU shows that the
partition is right and what each device holds, not TPU step times: the step-time ratios here are the emulation's
(collectives are memory copies, every device shares the machine's cores). Prints one JSON line
``{"devices", "model", "plans": [{"fsdp", "tensor", "step_s", "step_ratio", "bytes_per_device", "estimate"}]}``.

    python bench/sharded_step.py [--devices 8] [--plans 1,1 8,1 2,4] [--steps 10] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from statistics import median
from typing import Any

from figures import add_record_flag, emit

SHAPE = {"vocab_size": 256, "layers": 2, "d_model": 64, "heads": 4, "seq_len": 64}
"""The dev stack's model (Pulumi.dev.yaml's workload defaults)."""
BATCH = 16


def _child(plans: list[str], warmup: int, steps: int) -> None:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla.distributed.spmd import xla_sharding as xs

    from tpuray.components.catalog.gpt_sharding import GptDims
    from tpuray.components.config.workload import training_state_bytes_per_device
    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.gpt.model import GPT, next_token_loss
    from tpuray.workloads.sharding import fsdp_v2, local_bytes, mesh_plan, shard_gpt, spmd_mesh

    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    shape = ModelShape(**SHAPE)
    dims = GptDims(shape.vocab_size, shape.seq_len, shape.d_model, shape.layers)
    gen = torch.Generator().manual_seed(0)
    out = []
    for text in plans:
        fsdp, tensor = (int(x) for x in text.split(","))
        mesh = spmd_mesh(mesh_plan(devices, 1, fsdp, tensor))
        torch.manual_seed(0)
        model = GPT(shape).to(torch_xla.device())
        shard_gpt(model, mesh, fsdp, tensor)
        wrapped = fsdp_v2(model, mesh) if fsdp > 1 else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        times = []
        for step in range(warmup + steps):
            tokens = torch.randint(0, shape.vocab_size, (BATCH, shape.seq_len + 1), generator=gen)
            tokens = tokens.to(torch_xla.device())
            xs.mark_sharding(tokens, mesh, (("data", "fsdp"), None))
            start = time.perf_counter()
            # set_to_none: zeroing the gradients in place left them replicated here, whole on every device
            # (fsdp 8: 663,168 bytes per device instead of 241,152, the gradients' 482,304 in full)
            opt.zero_grad(set_to_none=True)
            next_token_loss(wrapped, tokens).backward()  # type: ignore[no-untyped-call]
            opt.step()
            torch_xla.sync()
            xm.wait_device_ops()
            if step >= warmup:
                times.append(time.perf_counter() - start)
        state = [t for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")]
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        held = local_bytes([*model.parameters(), *grads, *state])
        out.append(
            {
                "fsdp": fsdp,
                "tensor": tensor,
                "step_s": round(median(times), 4),
                "bytes_per_device": sorted(set(held.values())),
                "estimate": training_state_bytes_per_device(dims, fsdp, tensor),
            }
        )
    print(json.dumps({"devices": devices, "model": SHAPE, "plans": out}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--plans", nargs="+", default=["1,1", "8,1", "2,4"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.child:
        _child(args.plans, args.warmup, args.steps)
        return
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(args.devices)}
    argv = [sys.executable, __file__, "--child", "--plans", *args.plans]
    argv += ["--warmup", str(args.warmup), "--steps", str(args.steps)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(proc.stderr[-4000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    base = next((p["step_s"] for p in result["plans"] if (p["fsdp"], p["tensor"]) == (1, 1)), None)
    for p in result["plans"]:
        p["step_ratio"] = round(p["step_s"] / base, 3) if base else None  # unknown without the 1,1 plan
    emit("sharded_step", result, record_it=args.record)


if __name__ == "__main__":
    main()
