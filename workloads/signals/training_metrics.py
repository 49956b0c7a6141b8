"""A train function's figures as Ray metrics, so they land in the same Prometheus as Ray's own.

:func:`report_step_metrics` sets ``ray.util.metrics`` gauges; Ray's metrics agent on the worker's node serves
them on the node's metrics export port as ``ray_<name>`` (names in :mod:`tpuray.components.catalog.metric_names`).
Gauges, not counters: a restarted worker sets the run's totals again (from the goodput log) instead of counting from 0.
Call it from one rank (rank 0): every rank runs the same steps.
"""

from __future__ import annotations

from typing import Any

from tpuray.components.catalog import metric_names as mn
from tpuray.workloads.signals.goodput import Goodput

__all__ = ["report_step_metrics", "xla_compiles"]

_GAUGES: dict[str, Any] = {}

_HELP = {
    mn.TRAIN_STEP_TIME: "Median wall time of an optimizer step (seconds)",
    mn.TRAIN_TOKENS_PER_CHIP: "Training tokens per second per chip",
    mn.TRAIN_MFU: "Model FLOPs utilisation against the catalog's peak bf16 FLOP/s (0-1; real chips only)",
    mn.TRAIN_COMPILES: "XLA graph compilations on the reporting worker",
    mn.TRAIN_CHECKPOINT_SAVE: "Seconds blocked saving checkpoints",
    mn.TRAIN_CHECKPOINT_RESTORE: "Seconds blocked restoring checkpoints",
    mn.TRAIN_RESTARTS: "Times the run resumed after its workers restarted",
    mn.TRAIN_GOODPUT: "Productive training time over elapsed time (0-1)",
    mn.TRAIN_BADPUT: "Unproductive seconds by ml-goodput-measurement bucket",
    mn.TRAIN_PRODUCTIVE: "Productive training seconds",
    mn.TRAIN_ELAPSED: "Elapsed seconds since the run's first start",
    mn.TRAIN_TIME_TO_FIRST_STEP: "Seconds from the run's latest start until its first step ended",
    mn.TRAIN_LIVE_SLICES: "Slices an elastic run trains on now (each change is a resize)",
}


def _gauge(name: str) -> Any:
    if name not in _GAUGES:
        from ray.util.metrics import Gauge

        keys = (*mn.TRAIN_TAG_KEYS, mn.TRAIN_BUCKET_TAG) if name == mn.TRAIN_BADPUT else mn.TRAIN_TAG_KEYS
        _GAUGES[name] = Gauge(name, description=_HELP[name], tag_keys=keys)
    return _GAUGES[name]


def xla_compiles() -> int | None:
    """XLA compilations so far in this process (torch_xla's ``CompileTime`` metric), or None without torch_xla."""
    try:
        import torch_xla.debug.metrics as met
    except ImportError:
        return None
    data = met.metric_data("CompileTime")  # type: ignore[no-untyped-call]
    return int(data[0]) if data else 0


def report_step_metrics(
    run: str,
    tpu_slice: str,
    *,
    step_time_s: float | None = None,
    tokens_per_s_per_chip: float | None = None,
    mfu: float | None = None,
    compiles: int | None = None,
    goodput: Goodput | None = None,
    live_slices: int | None = None,
) -> dict[str, float]:
    """Set the run's gauges; returns what was set (name -> value; badput as ``name{bucket}``).

    ``run`` and ``tpu_slice`` become the ``run`` and ``tpu_slice`` tags. ``mfu`` only where it means something
    (real chips): None exports nothing. ``goodput`` (:meth:`GoodputRecorder.goodput`) gives goodput, badput by
    bucket, productive and elapsed seconds, restarts and checkpoint save/restore seconds. ``live_slices``: an elastic
    run's live slices (None for a fixed-size run: nothing exported).
    """
    tags = {mn.TRAIN_RUN_TAG: run, mn.TRAIN_SLICE_TAG: tpu_slice}
    values: dict[str, float | None] = {
        mn.TRAIN_STEP_TIME: step_time_s,
        mn.TRAIN_TOKENS_PER_CHIP: tokens_per_s_per_chip,
        mn.TRAIN_MFU: mfu,
        mn.TRAIN_COMPILES: float(compiles) if compiles is not None else None,
        mn.TRAIN_LIVE_SLICES: float(live_slices) if live_slices is not None else None,
    }
    if goodput is not None:
        values |= {
            mn.TRAIN_GOODPUT: goodput.goodput,
            mn.TRAIN_PRODUCTIVE: goodput.productive_s,
            mn.TRAIN_ELAPSED: goodput.elapsed_s,
            mn.TRAIN_RESTARTS: float(goodput.restarts),
            mn.TRAIN_CHECKPOINT_SAVE: goodput.badput_s[mn.BADPUT_CHECKPOINT_SAVE],
            mn.TRAIN_CHECKPOINT_RESTORE: goodput.badput_s[mn.BADPUT_CHECKPOINT_RESTORE],
            mn.TRAIN_TIME_TO_FIRST_STEP: goodput.time_to_first_step_s,
        }
    done: dict[str, float] = {}
    for name, value in values.items():
        if value is not None:
            _gauge(name).set(float(value), tags=tags)
            done[name] = float(value)
    if goodput is not None:
        for bucket, seconds in goodput.badput_s.items():
            _gauge(mn.TRAIN_BADPUT).set(seconds, tags={**tags, mn.TRAIN_BUCKET_TAG: bucket})
            done[f"{mn.TRAIN_BADPUT}{{{bucket}}}"] = seconds
    return done
