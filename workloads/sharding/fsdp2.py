"""Upstream PyTorch's sharding, as TorchTPU runs it (one process per device: FSDP2 ``fully_shard``, DTensor tensor
parallelism, ``torch.distributed.checkpoint``); the same code runs over gloo on CPU processes, one per emulated
device, which is how the tests check it.

The partition of tpuray's GPT is the one table the config's HBM estimate reads
(:data:`~tpuray.components.catalog.gpt_sharding.GPT_PARAMETERS`): FSDP2 shards each parameter along the dimension
it names (``shard_placement_fn``), tensor parallelism is Megatron's columns and rows through DTensor's
``ColwiseParallel`` and ``RowwiseParallel``. On a TPU build the mesh with torch_tpu's own
``topology_aware_mesh(MeshPlan.shape, dcn_mesh_shape=MeshPlan.dcn_shape)``; elsewhere :func:`device_mesh` lays the
ranks out as :func:`~tpuray.workloads.sharding.mesh.rank_layout` does.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

from tpuray.components.catalog.gpt_sharding import parameter_rule
from tpuray.workloads.sharding.mesh import MeshPlan, rank_layout

__all__ = ["device_mesh", "rank_bytes", "shard_gpt"]


def device_mesh(plan: MeshPlan, device_type: str) -> DeviceMesh:
    """The ``(data, fsdp, tensor)`` ``DeviceMesh`` of ``plan`` with ranks in :func:`rank_layout` order (needs an
    initialised process group of ``plan.devices`` ranks)."""
    return DeviceMesh(device_type, torch.tensor(rank_layout(plan)), mesh_dim_names=plan.axis_names)


def _tensor_parallel(model: nn.Module, mesh: DeviceMesh) -> None:
    """Megatron's split of every block (https://arxiv.org/abs/1909.08053 section 3), as the sharding table says:
    ``qkv`` and ``fc`` by output row, ``proj`` and ``out`` by input column. The block's forward splits the fused
    ``qkv`` output into q, k and v along the feature dimension, so ``qkv``'s output is gathered (every rank then
    attends over all heads) and ``proj`` takes its own columns of that; the MLP runs on local shards only."""
    plan: dict[str, ParallelStyle] = {}
    for name, _ in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "qkv":
            plan[name] = ColwiseParallel(output_layouts=Replicate())
        elif leaf == "proj":
            plan[name] = RowwiseParallel(input_layouts=Replicate())
        elif leaf == "fc":
            plan[name] = ColwiseParallel()
        elif leaf == "out":
            plan[name] = RowwiseParallel()
    parallelize_module(model, mesh, plan)


def shard_gpt(model: nn.Module, mesh: DeviceMesh, fsdp: int, tensor: int) -> nn.Module:
    """Shard tpuray's GPT over ``mesh``: tensor parallel over its ``tensor`` axis, then FSDP2 over ``fsdp`` (with
    ``data`` beside it, HSDP: shards inside a group, replicas across groups, as across slices), each parameter along
    the dimensions the table names. Both at once is FSDP2's 2-D composition over DTensor
    (https://pytorch.org/tutorials/intermediate/TP_tutorial.html): a parameter the table leaves to ``tensor`` alone (a
    column-parallel bias, which both axes would split along one dimension) is left out of FSDP2 (``ignored_params``),
    and its gradient is averaged over the ``fsdp`` ranks by a hook, as FSDP2's reduce-scatter does for the rest."""
    data = mesh["data"].size()
    if tensor > 1:
        if data > 1:
            raise ValueError(
                f"tensor={tensor} with a data axis of {data}: this path averages gradients across replicas only "
                "through FSDP2 over fsdp; set fsdp so that fsdp x tensor fills the mesh, or use SPMD"
            )
        _tensor_parallel(model, mesh["tensor"])
        if fsdp == 1:
            return model
    names = {id(p): n for n, p in model.named_parameters()}
    placements = {id(p): parameter_rule(names[id(p)]).placement(fsdp, tensor) for p in model.parameters()}
    ignored = {p for p in model.parameters() if placements[id(p)].fsdp is None and placements[id(p)].tensor is not None}

    def placement(p: nn.Parameter) -> Shard:
        place = placements[id(p)]
        return Shard(place.fsdp if place.fsdp is not None else 0)

    fsdp_mesh = mesh["data", "fsdp"] if data > 1 else mesh["fsdp"]
    for block in getattr(model, "blocks", []):
        fully_shard(block, mesh=fsdp_mesh, shard_placement_fn=placement, ignored_params=ignored)
    fully_shard(model, mesh=fsdp_mesh, shard_placement_fn=placement, ignored_params=ignored)
    group = mesh["fsdp"].get_group()
    for p in ignored:
        p.register_post_accumulate_grad_hook(lambda q: _average_over(q, group, fsdp))  # type: ignore[no-untyped-call]
    return model


def _average_over(p: torch.Tensor, group: ProcessGroup, size: int) -> None:
    """The mean of ``p``'s gradient over ``group`` (the ``fsdp`` ranks, each with rows of its own), in place."""
    import torch.distributed as dist

    grad = p.grad
    if grad is None:
        return
    local = grad.to_local() if isinstance(grad, DTensor) else grad
    dist.all_reduce(local, group=group)
    local.div_(size)


def rank_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes this rank holds of ``tensors``: a DTensor's local shard, a plain tensor whole."""
    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total
