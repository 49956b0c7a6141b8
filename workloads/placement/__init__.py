"""Placement: which worker is which rank on which chip of which slice (:mod:`.seats`, pure), every variable a worker
gets for it (:mod:`.worker_env`, pure: PJRT, ``MEGASCALE_*``, ``TORCH_TPU_*``, the emulated webhook env), and the one
probe every backend runs on its workers to learn where Ray placed them (:mod:`.probe`, which calls Ray).

Exports :class:`Seat`, :class:`ChipAssignment`, :class:`PlacementError`, :func:`assign_chips`,
:func:`cluster_slices` and :class:`SliceInfo`.
"""

from tpuray.workloads.placement.seats import (
    ChipAssignment,
    PlacementError,
    Seat,
    SliceInfo,
    assign_chips,
    cluster_slices,
)

__all__ = ["ChipAssignment", "PlacementError", "Seat", "SliceInfo", "assign_chips", "cluster_slices"]
