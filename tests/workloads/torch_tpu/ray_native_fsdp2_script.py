"""An FSDP2 training script written against Ray 2.60's own TorchTPU API, as Ray's FSDP2 guide writes it for GPUs
with its ``ScalingConfig`` and device lines changed: nothing of tpuray in it.

``python ray_native_fsdp2_script.py OUT TOPOLOGY ACCELERATOR NUM_WORKERS [RESTORE]``: one FSDP2 step over
``NUM_WORKERS`` devices (one worker each, whole slices of ``TOPOLOGY``), then a DCP checkpoint of the sharded
model in ``OUT/ckpt-<world>``; with ``RESTORE`` (another run's checkpoint), that checkpoint is loaded into this
run's shards first. Each rank writes what it saw to ``OUT/rank-<world>-<rank>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

TORCH_TPU_ENV = ("TORCH_TPU_", "MEGASCALE_", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "RANK", "WORLD_SIZE", "NNODES")


def build_model() -> Any:
    import torch

    torch.manual_seed(0)  # the same weights on every rank, as a fresh model is
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))


def _full(state: dict[str, Any]) -> dict[str, Any]:
    """Every entry of a sharded state dict, whole, on the CPU (a collective: every rank calls it)."""
    from torch.distributed.tensor import DTensor

    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).cpu() for k, v in state.items()}


def train_fn(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = ray.train.torch.get_device()  # torch.device("tpu") under torch_tpu
    rank, world = dist.get_rank(), dist.get_world_size()
    # torch_tpu's rank layout for the slice (and across slices), recorded. FSDP2 runs over the ranks in order: a
    # DeviceMesh whose ranks are not ascending makes DCP save FSDP2's shards at the wrong offsets (FSDP2 shards by
    # the process group's rank, which new_group sorts, and DTensor places by mesh coordinate; torch 2.9 and 2.13)
    layout = torch.tpu.distributed.topology_aware_mesh(device.type, (world,))  # type: ignore[attr-defined]
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("fsdp",))
    model = build_model().to(device)
    reference = build_model().to(device)  # the same model, unsharded: what one device would compute
    fully_shard(model, mesh=mesh)
    if config.get("restore"):
        state = get_model_state_dict(model)
        state_dict_loader.load(state, checkpoint_id=config["restore"])
        set_model_state_dict(model, state)
        restored = _full(get_model_state_dict(model))
        saved = torch.load(Path(config["restore"]) / "full.pt", weights_only=True)
        restore_diff = max(float((restored[k] - saved[k]).abs().max()) for k in saved)
        reference.load_state_dict(saved)
    # one step: every rank its share of one global batch; FSDP2 averages the shards' gradients over the ranks
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4 * world, 16, generator=gen), torch.randn(4 * world, 16, generator=gen)
    mine = slice(4 * rank, 4 * (rank + 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(x[mine].to(device)), y[mine].to(device)).backward()  # type: ignore[no-untyped-call]
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(reference(x.to(device)), y.to(device)).backward()  # type: ignore[no-untyped-call]
    ref_opt.step()
    sharded = _full(get_model_state_dict(model))
    step_diff = max(float((sharded[k] - v.cpu()).abs().max()) for k, v in reference.state_dict().items())
    held = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    ckpt = Path(config["out"]) / f"ckpt-{world}"
    state_dict_saver.save(get_model_state_dict(model), checkpoint_id=str(ckpt))
    if rank == 0:
        torch.save(sharded, ckpt / "full.pt")
    seen = {
        "rank": rank,
        "world": world,
        "device": str(device),
        "step_diff": step_diff,
        "held": held,
        "total": total,
        "restore_diff": restore_diff if config.get("restore") else None,
        "layout": layout.tolist(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(TORCH_TPU_ENV)},
    }
    (Path(config["out"]) / f"rank-{world}-{rank}.json").write_text(json.dumps(seen))
    ray.train.report({"step_diff": step_diff})


def main(argv: list[str]) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out, topology, accelerator, num_workers, *restore = argv
    # ray.train's names are Ray Train V2's classes at run time (Ray 2.60); mypy resolves them to V1's, hence the ignore
    scaling = ScalingConfig(  # type: ignore[call-arg]
        num_workers=int(num_workers),
        use_tpu=True,
        topology=topology,
        accelerator_type=accelerator,
        resources_per_worker={"TPU": 1},
    )
    trainer = TorchTrainer(
        train_fn,
        train_loop_config={"out": out, "restore": restore[0] if restore else None},
        scaling_config=scaling,
        run_config=RunConfig(storage_path=str(Path(out) / "ray"), name="fsdp2"),
    )
    print(trainer.fit().metrics)


if __name__ == "__main__":
    main(sys.argv[1:])
