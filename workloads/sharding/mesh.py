"""The device mesh of a sharded job, from the slice and ``workload.parallelism``: pure Python, no torch.

Axes (:data:`~tpuray.components.catalog.gpt_sharding.AXES`) are ordered by increasing network intensity, the
convention of both runtimes' mesh builders: ``data`` outermost, then ``fsdp``, then ``tensor`` (torch_xla 2.9
``HybridMesh``: "ordered by increasing network-intensity e.g. [replica, data, model]"; torch_tpu 0.2.0
``_internal/distributed/device_mesh.py``: "the highest-traffic axis last"). The slices of a multislice job split
the outermost non-trivial axis, which for these shapes is ``data`` (HSDP: every FSDP and tensor group stays in one
slice, on ICI; only the data-parallel gradient reduction crosses DCN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpuray.components.catalog.gpt_sharding import AXES

__all__ = ["MeshError", "MeshPlan", "dcn_mesh_shape", "live_mesh", "mesh_plan", "rank_layout"]


class MeshError(ValueError):
    """A mesh the devices cannot form; the message names the parameter and the valid form."""


@dataclass(frozen=True)
class MeshPlan:
    """The mesh over every device of the job: ``shape`` (``data``, ``fsdp``, ``tensor``), of which ``dcn_shape``
    spans the slices and ``ici_shape`` (their elementwise quotient) one slice."""

    shape: tuple[int, int, int]
    dcn_shape: tuple[int, int, int]
    axis_names: tuple[str, str, str] = AXES

    @property
    def ici_shape(self) -> tuple[int, int, int]:
        s, d = self.shape, self.dcn_shape
        return (s[0] // d[0], s[1] // d[1], s[2] // d[2])

    @property
    def devices(self) -> int:
        return math.prod(self.shape)

    @property
    def slices(self) -> int:
        return math.prod(self.dcn_shape)


def dcn_mesh_shape(shape: tuple[int, ...], num_slices: int) -> tuple[int, ...]:
    """The split across ``num_slices`` slices: all of it on the outermost axis longer than 1, as torch_tpu's
    ``_infer_dcn_mesh_shape`` (0.2.0 ``_internal/distributed/device_mesh.py``) picks, which refuses to fall back
    to an inner axis rather than put shard groups on DCN."""
    if num_slices == 1:
        return tuple(1 for _ in shape)
    axis = next((i for i, n in enumerate(shape) if n > 1), None)
    if axis is None or shape[axis] % num_slices:
        raise MeshError(
            f"num_slices={num_slices}: the outermost axis longer than 1 of the mesh {shape} must be divisible by "
            "the slice count (the slices split the data axis); valid: a data axis that is a multiple of it"
        )
    return tuple(num_slices if i == axis else 1 for i in range(len(shape)))


def mesh_plan(devices_per_slice: int, num_slices: int = 1, fsdp: int = 1, tensor: int = 1) -> MeshPlan:
    """The ``(data, fsdp, tensor)`` mesh of ``num_slices`` slices of ``devices_per_slice`` devices each (chips
    under PyTorch/XLA, PJRT devices under TorchTPU): ``data`` takes what ``fsdp * tensor`` leaves of a slice,
    times the slices."""
    for name, value in (("devices_per_slice", devices_per_slice), ("num_slices", num_slices)):
        if value < 1:
            raise MeshError(f"{name}={value}: valid: a whole number >= 1")
    for name, value in (("fsdp", fsdp), ("tensor", tensor)):
        if value < 1:
            raise MeshError(f"workload.parallelism.{name}={value}: valid: a whole number >= 1")
    if devices_per_slice % (fsdp * tensor):
        raise MeshError(
            f"workload.parallelism: fsdp x tensor = {fsdp} x {tensor} does not divide the {devices_per_slice} "
            "devices of a slice; valid: a divisor of it (the data axis takes the rest)"
        )
    shape = (devices_per_slice // (fsdp * tensor) * num_slices, fsdp, tensor)
    dcn = dcn_mesh_shape(shape, num_slices)
    return MeshPlan(shape=shape, dcn_shape=(dcn[0], dcn[1], dcn[2]))


def live_mesh(fsdp: int = 1, tensor: int = 1) -> MeshPlan:
    """The mesh of the live worker group, inside a train function run with ``XlaChipConfig``: its slices now
    (after an elastic resize the data axis is the one that shrank or grew; FSDP and tensor groups stay in a slice)."""
    from tpuray.workloads.api.worker import chip

    info = chip()
    return mesh_plan(info.chips_per_slice, info.num_slices, fsdp, tensor)


def rank_layout(plan: MeshPlan) -> list[list[list[int]]]:
    """The global rank (device id) at each mesh coordinate, slices in ``slice_index`` order and each slice's
    devices in id order: the block composition of torch_tpu's ``create_hybrid_device_mesh`` (0.2.0
    ``_internal/distributed/device_utils.py``, from JAX's ``mesh_utils``) over per-slice meshes made by
    ``create_device_mesh``'s non-TPU branch (the devices reshaped in order), which is what the emulated slice and
    ``torch_xla``'s ``Mesh`` over CPU devices run. On a TPU, ``topology_aware_mesh`` reorders each slice's
    devices for its ICI torus from their physical coordinates (ring orders, axis assignment), which no CPU shows:
    pass it :attr:`MeshPlan.shape` and :attr:`MeshPlan.dcn_shape` there."""
    ici = plan.ici_shape
    per_slice = math.prod(ici)
    out: list[list[list[int]]] = []
    for a in range(plan.shape[0]):
        plane: list[list[int]] = []
        for b in range(plan.shape[1]):
            row: list[int] = []
            for c in range(plan.shape[2]):
                block = (a // ici[0], b // ici[1], c // ici[2])  # which slice's block the coordinate is in
                dcn = plan.dcn_shape
                slice_index = (block[0] * dcn[1] + block[1]) * dcn[2] + block[2]
                local = ((a % ici[0]) * ici[1] + (b % ici[1])) * ici[2] + (c % ici[2])
                row.append(slice_index * per_slice + local)
            plane.append(row)
        out.append(plane)
    return out
