"""Run in a subprocess with ``PJRT_DEVICE=CPU`` and ``CPU_NUM_DEVICES=4``: train a small GPT two AdamW steps sharded
``fsdp=2 x tensor=2`` (its embeddings, biases and LayerNorms split on one axis, replicated on the other), save it
with :func:`~tpuray.workloads.sharding.checkpoint.save_sharded`, then restore it into a fresh model (another seed)
sharded ``fsdp=4`` with ``load_sharded``. Prints one JSON line: the largest difference of the restored parameters
and AdamW moments from the saved ones, the restored step, the bytes each device holds of the restored parameters
and moments, and how many of the model's tensors torch_xla's own ``SPMDSavePlanner`` writes."""

from __future__ import annotations

import json
import sys

import torch

from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.gpt.model import GPT, next_token_loss

SHAPE = ModelShape(vocab_size=32, layers=1, d_model=16, heads=4, seq_len=8)


def main(where: str) -> None:
    import torch_xla
    import torch_xla.runtime as xr

    from tpuray.workloads.sharding.checkpoint import load_sharded, save_sharded
    from tpuray.workloads.sharding.mesh import mesh_plan
    from tpuray.workloads.sharding.spmd import local_bytes, shard_gpt, spmd_mesh

    xr.use_spmd()
    devices = xr.global_runtime_device_count()

    def sharded(seed: int, fsdp: int, tensor: int) -> tuple[GPT, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = GPT(SHAPE).to(torch_xla.device())
        shard_gpt(model, spmd_mesh(mesh_plan(devices, 1, fsdp, tensor)), fsdp, tensor)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def moments(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]

    model, opt = sharded(0, 2, 2)
    for step in range(2):
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, SHAPE.vocab_size, (8, SHAPE.seq_len + 1), generator=g)
        next_token_loss(model, tokens.to(torch_xla.device())).backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()
    save_sharded(where, model, opt, step=2)
    saved = [t.detach().cpu() for t in [*model.parameters(), *moments(opt)]]

    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save
    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    upstream = SPMDSavePlanner()  # type: ignore[no-untyped-call]
    plain = save({"model": model.state_dict()}, storage_writer=FileSystemWriter(where + "-plain"), planner=upstream)

    restored, ropt = sharded(1, 4, 1)
    step = load_sharded(where, restored, ropt)
    got = [t.detach().cpu() for t in [*restored.parameters(), *moments(ropt)]]
    params = local_bytes(list(restored.parameters()))
    print(
        json.dumps(
            {
                "step": step,
                "tensors": len(got),
                "max_diff": max((a - b).abs().max().item() for a, b in zip(saved, got, strict=True)),
                "param_bytes_per_device": sorted(set(params.values())),
                "moment_bytes_per_device": sorted(set(local_bytes(moments(ropt)).values())),
                "grads": sum(p.grad is not None for p in restored.parameters()),
                "plain_planner_tensors": len(plain.state_dict_metadata),
                "adam_steps": sorted({float(s["step"]) for s in ropt.state.values()}),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1])
