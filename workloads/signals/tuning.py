"""Ray Tune across TPU slices: one ``TorchTrainer`` per trial, each trial on whole slices of its own.

Each trial's trainer reserves whole slices (:func:`~tpuray.workloads.tpu_scaling_config`), so a trial waits until
its slices are free; :func:`trials_at_once` is the ``max_concurrent_trials`` that keeps Tune from starting trials
that would only wait (and time out in Ray Train's worker-group start, then retry). A failed or stopped trial's
trainer ends, and its controller's placement group goes with it, freeing the slice for the next trial.
"""

from __future__ import annotations

from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.seats import PlacementError

__all__ = ["trials_at_once"]


def trials_at_once(topology: str | TpuSlice, *, num_slices: int = 1) -> int:
    """How many trials of ``num_slices`` whole ``topology`` slices each can run at once on the connected cluster:
    its idle slices of that shape (``ray.util.tpu.get_num_ready_tpu_slices``) divided by ``num_slices``.

    Pass it as ``TuneConfig(max_concurrent_trials=...)``. Raises :class:`PlacementError` when not even one trial
    fits (Tune would otherwise wait for slices that are not there).
    """
    from ray.util.tpu import get_num_ready_tpu_slices

    s = TpuSlice.parse(topology) if isinstance(topology, str) else topology
    if not isinstance(num_slices, int) or num_slices < 1:
        raise PlacementError(f"num_slices must be a whole number of slices >= 1, got {num_slices!r}")
    free = int(get_num_ready_tpu_slices(s.topology, s.ray_accelerator_type))
    if free < num_slices:
        raise PlacementError(
            f"a trial needs {num_slices} idle {s} slice(s) ({s.pod_type}) but the cluster has {free}; "
            "start the slices (or wait for running jobs) before tuning"
        )
    return free // num_slices
