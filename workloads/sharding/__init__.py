"""Sharded training over a slice's mesh, for models larger than one chip (docs/sharding.md).

Exports the pure mesh (:class:`MeshPlan`, :func:`mesh_plan`, :func:`rank_layout`, :func:`live_mesh`: ``data``, ``fsdp``,
``tensor``, the slices on the outer data axis); PyTorch/XLA SPMD on one host (:func:`spmd_mesh`, :func:`shard_gpt`,
:func:`fsdp_v2`, :func:`spmd_devices`, :data:`TENSOR_PARALLEL_SPECS`, :func:`shard_by_patterns`, :func:`local_bytes`,
:func:`spmd_scaling_config`, :func:`check_spmd_slice`); the refusal of Ray's ``prepare_model(parallel_strategy="fsdp")``
(:func:`check_parallel_strategy`); their errors, :class:`MeshError` and :class:`SpmdError`. Apart, for what they
import: :mod:`.fsdp2` (TorchTPU's FSDP2 and tensor parallelism, ``torch.distributed``), :mod:`.checkpoint` (SPMD's
sharded checkpoints), :mod:`.hf` (Hugging Face's ``Trainer`` with ``xla_fsdp_v2`` on that mesh, transformers) and
:mod:`.backend` (SPMD's Ray Train backend, one worker per host: ``SpmdConfig``, Ray Train). torch_xla is imported only
when an SPMD function runs.
"""

from tpuray.workloads.sharding.mesh import MeshError, MeshPlan, live_mesh, mesh_plan, rank_layout
from tpuray.workloads.sharding.prepare import check_parallel_strategy
from tpuray.workloads.sharding.spmd import (
    TENSOR_PARALLEL_SPECS,
    SpmdError,
    check_spmd_slice,
    fsdp_v2,
    local_bytes,
    shard_by_patterns,
    shard_gpt,
    spmd_devices,
    spmd_mesh,
    spmd_scaling_config,
)

__all__ = [
    "TENSOR_PARALLEL_SPECS",
    "MeshError",
    "MeshPlan",
    "SpmdError",
    "check_parallel_strategy",
    "check_spmd_slice",
    "fsdp_v2",
    "live_mesh",
    "local_bytes",
    "mesh_plan",
    "rank_layout",
    "shard_by_patterns",
    "shard_gpt",
    "spmd_devices",
    "spmd_mesh",
    "spmd_scaling_config",
]
