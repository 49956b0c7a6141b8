"""TorchTPU's one process per device, on CPU: N processes over gloo run FSDP2, tensor-parallel or 2-D steps of a small
GPT (tpuray.workloads.sharding.fsdp2) and compare them with the unsharded step, save a sharded checkpoint, or load
one with another partition, in the order given: ``python fsdp2_sharded_step.py N OP ...``, each OP
``step:FSDP,TENSOR``, ``save:DIR`` or ``load:DIR`` (one set of processes for all: each costs seconds to start).
Rank 0 emits one JSON line per OP (tests/support/gloo_ranks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from tests.support.gloo_ranks import emit, spawn_ranks
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.gpt.model import GPT, next_token_loss

SHAPE = ModelShape(vocab_size=32, layers=1, d_model=16, heads=4, seq_len=8)
BATCH = 8


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(SHAPE)


def _tokens() -> torch.Tensor:
    return torch.randint(0, SHAPE.vocab_size, (BATCH, SHAPE.seq_len + 1), generator=torch.Generator().manual_seed(1))


def _reference() -> dict[str, torch.Tensor]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    next_token_loss(model, _tokens()).backward()  # type: ignore[no-untyped-call]
    opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _sharded(world: int, fsdp: int, tensor: int) -> tuple[GPT, torch.Tensor]:
    """The model sharded over the mesh, and this rank's part of the batch (its data-parallel rows)."""
    from tpuray.workloads.sharding.fsdp2 import device_mesh, shard_gpt
    from tpuray.workloads.sharding.mesh import mesh_plan

    mesh = device_mesh(mesh_plan(world, 1, fsdp, tensor), "cpu")
    model = _model()
    shard_gpt(model, mesh, fsdp, tensor)
    replicas = mesh["data"].size() * mesh["fsdp"].size()  # ranks with rows of their own
    index = mesh["data"].get_local_rank() * mesh["fsdp"].size() + mesh["fsdp"].get_local_rank()
    rows = BATCH // replicas
    return model, _tokens()[index * rows : (index + 1) * rows]


def _step(world: int, plan: str) -> None:
    from tpuray.workloads.sharding.fsdp2 import rank_bytes

    reference = _reference()
    fsdp, tensor = (int(x) for x in plan.split(","))
    result: dict[str, object] = {"fsdp": fsdp, "tensor": tensor, "world": world}
    model, tokens = _sharded(world, fsdp, tensor)
    opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    next_token_loss(model, tokens).backward()  # type: ignore[no-untyped-call]
    opt.step()
    params = dict(model.named_parameters())
    result["max_diff"] = max((_full(params[n]).detach() - reference[n]).abs().max().item() for n in reference)
    model, tokens = _sharded(world, fsdp, tensor)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    next_token_loss(model, tokens).backward()  # type: ignore[no-untyped-call]
    opt.step()
    state = [t for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    mine = rank_bytes([*model.parameters(), *grads, *state])
    every: list[object] = [None] * world
    dist.all_gather_object(every, mine)
    result["bytes_per_rank"] = sorted(set(every))  # type: ignore[type-var]
    result["state_tensors"] = len(state)
    if dist.get_rank() == 0:
        emit(result)


def _save(world: int, where: Path) -> None:
    from torch.distributed.checkpoint import state_dict_saver
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    model, tokens = _sharded(world, world, 1)
    torch.optim.SGD(model.parameters(), lr=0.5).zero_grad()
    next_token_loss(model, tokens).backward()  # type: ignore[no-untyped-call]
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    state_dict_saver.save(get_model_state_dict(model), checkpoint_id=str(where / "dcp"))
    full = {n: _full(p).detach() for n, p in model.named_parameters()}
    if dist.get_rank() == 0:
        torch.save(full, where / "expected.pt")


def _load(world: int, where: Path) -> None:
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    model, _ = _sharded(world, world, 1)
    state = get_model_state_dict(model)
    state_dict_loader.load(state, checkpoint_id=str(where / "dcp"))
    set_model_state_dict(model, state)
    expected = torch.load(where / "expected.pt")
    diff = max((_full(p).detach() - expected[n]).abs().max().item() for n, p in model.named_parameters())
    local = sorted({type(p).__name__ for p in model.parameters()})
    if dist.get_rank() == 0:
        emit({"world": world, "max_diff": diff, "parameter_types": local})


def _ops(rank: int, world: int, ops: list[str]) -> None:
    for op in ops:
        kind, _, arg = op.partition(":")
        if kind == "step":
            _step(world, arg)
        elif kind == "save":
            _save(world, Path(arg))
        elif kind == "load":
            _load(world, Path(arg))
        else:
            raise SystemExit(f"unknown op {op!r}: step:FSDP,TENSOR, save:DIR or load:DIR")


def main(argv: list[str]) -> None:
    spawn_ranks(_ops, int(argv[0]), argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
