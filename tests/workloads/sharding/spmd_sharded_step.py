"""Run in a subprocess with ``PJRT_DEVICE=CPU`` and ``CPU_NUM_DEVICES=N`` (torch_xla reads both when it first
initialises): for each plan given as ``fsdp,tensor``, one SGD step of a small GPT sharded over the N virtual devices
against the same step unsharded in plain torch, and the bytes each device holds of the parameters, their gradients
and AdamW's moments after an AdamW step. Prints one JSON line per plan."""

from __future__ import annotations

import json
import sys

import torch

from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.gpt.model import GPT

SHAPE = ModelShape(vocab_size=32, layers=1, d_model=16, heads=4, seq_len=8)


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(SHAPE)


def _tokens() -> torch.Tensor:
    return torch.randint(0, SHAPE.vocab_size, (8, SHAPE.seq_len + 1), generator=torch.Generator().manual_seed(1))


def _reference() -> dict[str, torch.Tensor]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.loss(_tokens()).backward()  # type: ignore[no-untyped-call]
    opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def main(plans: list[str]) -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla.distributed.spmd import xla_sharding as xs

    from tpuray.workloads.sharding.mesh import mesh_plan
    from tpuray.workloads.sharding.spmd import fsdp_v2, local_bytes, shard_gpt, spmd_mesh

    xr.use_spmd()
    devices = xr.global_runtime_device_count()  # before any backward: autograd sizes its device queues once
    reference = _reference()
    for text in plans:
        fsdp, tensor = (int(x) for x in text.split(","))
        mesh = spmd_mesh(mesh_plan(devices, 1, fsdp, tensor))
        results: dict[str, object] = {"fsdp": fsdp, "tensor": tensor, "devices": xr.global_runtime_device_count()}
        for opt_name in ("sgd", "adamw"):
            model = _model().to(torch_xla.device())
            shard_gpt(model, mesh, fsdp, tensor)
            wrapped = fsdp_v2(model, mesh) if fsdp > 1 else model
            opt: torch.optim.Optimizer = (
                torch.optim.SGD(model.parameters(), lr=0.5)
                if opt_name == "sgd"
                else torch.optim.AdamW(model.parameters(), lr=1e-3)
            )
            tokens = _tokens().to(torch_xla.device())
            xs.mark_sharding(tokens, mesh, (("data", "fsdp"), None))
            from tpuray.workloads.gpt.model import next_token_loss

            next_token_loss(wrapped, tokens).backward()  # type: ignore[no-untyped-call]
            opt.step()
            torch_xla.sync()
            xm.wait_device_ops()  # the local shards are read from finished buffers
            params = dict(model.named_parameters())
            if opt_name == "sgd":
                results["max_diff"] = max(
                    (params[n].detach().cpu() - reference[n]).abs().max().item() for n in reference
                )
            else:
                state = [t for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")]
                grads = [p.grad for p in params.values() if p.grad is not None]
                held = local_bytes([*params.values(), *grads, *state])
                results["bytes_per_device"] = sorted(set(held.values()))
                results["state_tensors"] = len(state)
                results["param_bytes_per_device"] = sorted(set(local_bytes(params.values()).values()))
        print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
