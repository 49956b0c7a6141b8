"""``torch.tpu.distributed.topology_aware_mesh`` on the TorchTPU stand-in: the rank layout torch_tpu 0.2.0 gives.

torch_tpu gathers each rank's PJRT device (its chip's coordinates and its slice) and lays the mesh out with its copy
of JAX's ``mesh_utils`` (``torch_tpu/_internal/distributed/device_mesh.py`` and ``device_utils.py``): on the small
slices that have no wraparound (no torus) a per-generation handler orders the chips in a ring
(``_v5e_create_device_mesh``, ``_v5p_create_device_mesh``), and across slices ``create_hybrid_device_mesh`` puts one
block per slice along the axis that crosses slices (the outermost non-trivial one unless ``dcn_mesh_shape`` says
otherwise). The stand-in has no PJRT devices, so each rank reports the chip it emulates (its host's place in the
slice and its device on the host, as torch_tpu numbers hosts: x fastest, then y, then z) and the same handlers run
on those coordinates. Shapes no handler covers (larger slices, where torch_tpu's N-D torus assignment runs) are laid
out in coordinate order, which only a TPU's links would tell apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.topology import TpuSlice

__all__ = ["ChipSeat", "chip_coords", "layout", "set_seat", "topology_aware_mesh"]

# torch_tpu 0.2.0 device_utils.py: the ring orders of its small-slice handlers, over chips sorted z, y, x
_TRAY_2x2_RING_ORDER = (0, 1, 3, 2)
_TRAY_4x4_RING_ORDER = (0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4)
_V5E_TRAY_RING_ORDER = (0, 1, 2, 3, 7, 6, 5, 4)
_V5E_TRAY_IOTA_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_V5P_2x2x2_ORDER = (0, 1, 3, 2, 6, 7, 5, 4)


@dataclass(frozen=True)
class ChipSeat:
    """The chip one rank emulates: its slice's shape, the slice's index in the job, its host and its device there."""

    slice_spec: str
    slice_id: int
    host: int
    device: int


_SEAT: ChipSeat | None = None


def set_seat(tpu_slice: TpuSlice, host: int, device: int) -> None:
    """Record this worker's emulated chip (the env callback does, before the train function runs)."""
    global _SEAT
    _SEAT = ChipSeat(str(tpu_slice), 0, host, device)


def chip_coords(tpu_slice: TpuSlice, host: int, device: int) -> tuple[int, int, int]:
    """The coordinates of ``device`` on ``host`` in the slice's chip grid (hosts and chips x fastest)."""
    hx, hy, _ = tpu_slice.host_bounds
    cx, cy, _ = tpu_slice.chips_per_host_bounds
    chip = device // tpu_slice.spec.devices_per_chip
    return (
        (host % hx) * cx + chip % cx,
        (host // hx % hy) * cy + chip // cx % cy,
        (host // (hx * hy)) * tpu_slice.chips_per_host_bounds[2] + chip // (cx * cy),
    )


def _slice_layout(tpu_slice: TpuSlice, seats: Sequence[tuple[int, ChipSeat]], shape: Sequence[int]) -> Any:
    import numpy as np

    ordered = sorted(seats, key=lambda rs: tuple(reversed(chip_coords(tpu_slice, rs[1].host, rs[1].device))))
    ranks = np.asarray([r for r, _ in ordered], dtype=np.int64)
    bx, by, bz = tpu_slice.dims
    n = len(ranks)
    order: tuple[int, ...] | None = None
    if tpu_slice.generation == "v5e":
        if (bx, by, bz) == (2, 2, 1) and n == 4:
            order = _TRAY_2x2_RING_ORDER
        elif n == 8:
            order = _V5E_TRAY_IOTA_ORDER if (bx, by, bz) == (2, 2, 2) else _V5E_TRAY_RING_ORDER
        elif (bx, by, bz) == (4, 4, 1) and n == 16 and max(shape) == n:
            order = _TRAY_4x4_RING_ORDER
    elif tpu_slice.generation == "v5p" and (bx, by, bz) == (2, 2, 2) and n == 8:
        order = _V5P_2x2x2_ORDER
    if order is not None:
        ranks = ranks[np.asarray(order)]
    return ranks.reshape(tuple(shape))


def layout(seats: Sequence[ChipSeat], mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int] | None = None) -> Any:
    """The rank layout (a numpy int64 array of ``mesh_shape``) of ranks ``0..len(seats)-1`` seated at ``seats``."""
    import numpy as np

    shape = tuple(int(m) for m in mesh_shape)
    if math.prod(shape) != len(seats):
        raise ValueError(
            f"mesh_shape={shape} has {math.prod(shape)} elements but the job has {len(seats)} devices; mesh_shape "
            "describes the full mesh"
        )
    slices = sorted({s.slice_id for s in seats})
    if dcn_mesh_shape is None:
        if len(slices) == 1:
            dcn = tuple(1 for _ in shape)
        else:
            axis = next((i for i, e in enumerate(shape) if e > 1), None)
            if axis is None or shape[axis] % len(slices):
                raise ValueError(
                    f"Cannot spread mesh_shape={shape} over {len(slices)} slices along its outermost non-trivial "
                    "axis; reshape the mesh or pass dcn_mesh_shape"
                )
            dcn = tuple(len(slices) if i == axis else 1 for i in range(len(shape)))
    else:
        dcn = tuple(int(d) for d in dcn_mesh_shape)
    if len(dcn) != len(shape) or math.prod(dcn) != len(slices) or any(m % d for m, d in zip(shape, dcn, strict=True)):
        raise ValueError(f"dcn_mesh_shape={dcn} must divide mesh_shape={shape} and hold the job's {len(slices)} slices")
    per_slice = tuple(m // d for m, d in zip(shape, dcn, strict=True))
    blocks = []
    for sid in slices:
        members = [(r, s) for r, s in enumerate(seats) if s.slice_id == sid]
        blocks.append(_slice_layout(TpuSlice.parse(members[0][1].slice_spec), members, per_slice))
    grid = np.arange(len(slices)).reshape(dcn)
    return np.block(np.vectorize(lambda i: blocks[i], otypes=[object])(grid).tolist())


def topology_aware_mesh(
    device_type: str,
    mesh_shape: Sequence[int],
    *,
    dcn_mesh_shape: Sequence[int] | None = None,
    allow_split_physical_axes: bool = False,
    contiguous_submeshes: bool = False,
) -> Any:
    """torch_tpu's ``topology_aware_mesh`` on the stand-in: an int64 tensor of global ranks shaped ``mesh_shape``,
    the same on every rank (a collective: every rank calls it)."""
    import os

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("PyTorch distributed process group must be initialized before calling topology_aware_mesh.")
    if _SEAT is None:
        raise RuntimeError("this worker's emulated chip is unknown: the TorchTPU env callback did not run here")
    mine = ChipSeat(_SEAT.slice_spec, int(os.environ.get("MEGASCALE_SLICE_ID", "0")), _SEAT.host, _SEAT.device)
    seats: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(seats, mine)
    return torch.from_numpy(layout(seats, mesh_shape, dcn_mesh_shape))
