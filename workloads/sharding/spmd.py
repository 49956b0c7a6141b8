"""PyTorch/XLA SPMD on one host: one process drives every chip of its VM, and the compiler partitions the program
from the shardings of the parameters (https://docs.pytorch.org/xla/master/perf/spmd_basic.html).

:func:`spmd_mesh` turns SPMD on and sets the global mesh, which a user's own ``xs.mark_sharding`` calls and
torch_xla's FSDPv2 read (Hugging Face's ``Trainer`` replaces it with its own: train ``xla_fsdp_v2`` with
:class:`tpuray.workloads.sharding.hf.XlaFsdpV2Trainer`); :func:`shard_gpt` marks the entrypoint GPT's parameters
from the one table the config's HBM estimate reads (:data:`~tpuray.components.catalog.gpt_sharding.GPT_PARAMETERS`);
:data:`TENSOR_PARALLEL_SPECS` is that table as module-name patterns to partition specs for a user's own
Megatron-style layers; :func:`fsdp_v2` wraps a model in torch_xla's FSDPv2. torch_xla is imported inside the
functions, so this module imports without it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tpuray.components.catalog.gpt_sharding import GPT_PARAMETERS, parameter_rule
from tpuray.components.catalog.runtimes import XLA_SPMD
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.sharding.mesh import MeshPlan, rank_layout

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "TENSOR_PARALLEL_SPECS",
    "SpmdError",
    "check_spmd_slice",
    "fsdp_v2",
    "local_bytes",
    "partition_spec",
    "shard_by_patterns",
    "shard_gpt",
    "spmd_devices",
    "spmd_mesh",
    "spmd_scaling_config",
]

PartitionSpec = tuple[str | None, ...]


class SpmdError(RuntimeError):
    """An SPMD run that cannot run where it was asked to."""


def check_spmd_slice(tpu_slice: TpuSlice, num_slices: int = 1, pjrt_device: str | None = None) -> None:
    """Refuse, before any worker starts, an SPMD run over more than one host where only TPUs can run it.

    One SPMD program spans hosts through the TPU runtime's multi-controller PJRT client; on CPU, PJRT's SPMD is
    one process over its own virtual devices (``CPU_NUM_DEVICES``), so an emulated multi-host slice would run a
    separate mesh per host and train something else. ``pjrt_device`` is the run's PJRT device (``PJRT_DEVICE``
    when not given); unset is unknown, and unknown is refused too."""
    device = pjrt_device if pjrt_device is not None else os.environ.get("PJRT_DEVICE")
    hosts = tpu_slice.hosts * num_slices
    if hosts == 1 or device == "TPU":
        return
    said = f"PJRT_DEVICE={device}" if device else "PJRT_DEVICE unset (the device is unknown)"
    raise SpmdError(
        f"SPMD over {hosts} hosts ({num_slices} x {tpu_slice}) with {said}: only TPUs can run multi-host SPMD "
        "(torch_xla joins hosts into one SPMD program through the TPU runtime; on CPU each process is its own "
        "mesh). Emulate one host (a single-host slice, CPU_NUM_DEVICES chips), or run on the TPU slice"
    )


def spmd_scaling_config(
    topology: str | TpuSlice, *, num_slices: int = 1, pjrt_device: str | None = None, **kwargs: Any
) -> Any:
    """Ray Train's ``ScalingConfig`` for SPMD: one worker per TPU host holding all of its chips (SPMD drives a
    host's chips from one process), after :func:`check_spmd_slice` has refused what only TPUs can run."""
    from ray.train.v2.api.config import ScalingConfig

    s = TpuSlice.parse(topology) if isinstance(topology, str) else topology
    check_spmd_slice(s, num_slices, pjrt_device)
    return ScalingConfig(
        num_workers=XLA_SPMD.workers_per_slice(s) * num_slices,
        use_tpu=True,
        topology=s.topology,
        accelerator_type=s.ray_accelerator_type,
        resources_per_worker={"TPU": XLA_SPMD.tpu_resource_per_worker(s)},
        **kwargs,
    )


def spmd_devices(chips: int | None = None) -> int:
    """Give this SPMD worker one XLA device per chip of its host, before torch_xla initialises; returns the count.

    On a TPU the runtime finds the host's chips itself. On an emulated host (``PJRT_DEVICE=CPU``) PJRT's CPU client
    makes ``CPU_NUM_DEVICES`` virtual devices, read once when the client is created at the first device use
    (torch_xla 2.9 ``core/xla_env_vars.py``, ``csrc/runtime/pjrt_registry.cc``), so it is set here to ``chips``:
    by default the chips Ray gave this worker (:func:`spmd_scaling_config` asks for all of a host's). Call it
    first in the train function."""
    if chips is None:
        import ray

        chips = len(ray.get_runtime_context().get_accelerator_ids().get("TPU", []))
    if chips < 1:
        raise SpmdError("this worker holds no TPU chips: build its ScalingConfig with spmd_scaling_config")
    if os.environ.get("PJRT_DEVICE") == "CPU":
        already = os.environ.get("CPU_NUM_DEVICES")
        if already is not None and already != str(chips):
            raise SpmdError(f"CPU_NUM_DEVICES={already} is set, but this worker holds {chips} chips")
        os.environ["CPU_NUM_DEVICES"] = str(chips)
    return chips


def spmd_mesh(plan: MeshPlan) -> Any:
    """Turn SPMD on and set the global ``(data, fsdp, tensor)`` mesh; returns the ``xs.Mesh``.

    On TPUs the mesh is torch_xla's ``HybridMesh`` (its devices ordered for the ICI torus from their physical
    coordinates, slices on the outer data axis); elsewhere the devices in id order (:func:`rank_layout`)."""
    import numpy as np
    import torch_xla.runtime as xr
    from torch_xla.distributed.spmd import xla_sharding as xs

    xr.use_spmd()
    count = xr.global_runtime_device_count()
    if count != plan.devices:
        raise SpmdError(
            f"the mesh {plan.shape} needs {plan.devices} devices, this process sees {count}: build the plan from "
            "the slice it runs on (mesh_plan(devices_per_slice, num_slices, fsdp, tensor))"
        )
    mesh: xs.Mesh
    if xr.device_type() == "TPU":
        mesh = xs.HybridMesh(ici_mesh_shape=plan.ici_shape, dcn_mesh_shape=plan.dcn_shape, axis_names=plan.axis_names)
    else:
        mesh = xs.Mesh(np.array(rank_layout(plan)).ravel(), plan.shape, plan.axis_names)
    xs.set_global_mesh(mesh)
    return mesh


def partition_spec(name: str, ndim: int, fsdp: int, tensor: int) -> PartitionSpec:
    """The partition spec of GPT parameter ``name``: the mesh axis splitting each dimension, or None."""
    place = parameter_rule(name).placement(fsdp, tensor)
    spec: list[str | None] = [None] * ndim
    if place.fsdp is not None:
        spec[place.fsdp] = "fsdp"
    if place.tensor is not None:
        spec[place.tensor] = "tensor"
    return tuple(spec)


TENSOR_PARALLEL_SPECS: tuple[tuple[str, PartitionSpec], ...] = tuple(
    (r.pattern, tuple("tensor" if i == r.tensor_dim else None for i in range(len(r.shape))))
    for r in GPT_PARAMETERS
    if r.tensor_dim is not None
)
"""Module-name patterns to the partition specs of Megatron-style tensor parallelism: the ``qkv`` and ``fc``
weights and biases split by output row (``("tensor", None)``: an ``nn.Linear`` weight is ``[out, in]``),
``proj`` and ``out`` by input column (``(None, "tensor")``); give your own pattern table of the same form to
:func:`shard_by_patterns`."""


def shard_by_patterns(model: nn.Module, mesh: Any, specs: Iterable[tuple[str, PartitionSpec]]) -> list[str]:
    """``xs.mark_sharding`` every parameter whose name fully matches a pattern of ``specs`` with its spec; the
    others stay as they are. Returns the names it marked."""
    from torch_xla.distributed.spmd import xla_sharding as xs

    table = list(specs)
    marked = []
    for name, p in model.named_parameters():
        spec = next((s for pattern, s in table if re.fullmatch(pattern, name)), None)
        if spec is not None:
            xs.mark_sharding(p, mesh, spec)
            marked.append(name)
    return marked


def shard_gpt(model: nn.Module, mesh: Any, fsdp: int, tensor: int) -> None:
    """Mark every parameter of tpuray's GPT (already on the XLA device) as the sharding table says; a parameter
    the table does not know is an error, never left replicated by accident."""
    from torch_xla.distributed.spmd import xla_sharding as xs

    for name, p in model.named_parameters():
        xs.mark_sharding(p, mesh, partition_spec(name, p.dim(), fsdp, tensor))


def fsdp_v2(model: nn.Module, mesh: Any | None = None) -> nn.Module:
    """``model`` wrapped in torch_xla's FSDPv2 (``SpmdFullyShardedDataParallel``) over the global mesh's
    ``fsdp`` axis: each parameter not yet marked sharded along its largest dimension, the output along the batch.
    Parameters :func:`shard_gpt` or :func:`shard_by_patterns` marked keep their sharding (FSDPv2 skips them)."""
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

    wrapped: nn.Module = SpmdFullyShardedDataParallel(model, mesh=mesh)
    return wrapped


def local_bytes(tensors: Iterable[torch.Tensor]) -> dict[str, int]:
    """Bytes each device holds of ``tensors``, summed from their local shards (``_get_local_shards``): what a
    device's HBM holds of them, padding included."""
    import torch_xla

    out: dict[str, int] = {}
    xlac: Any = torch_xla._XLAC  # type: ignore[attr-defined]
    for shards in xlac._get_local_shards(list(tensors)):
        for shard, device in shards:
            out[device] = out.get(device, 0) + shard.numel() * shard.element_size()
    return out
