"""What a run tells and is told: drain and end-of-run-time checkpoint signals (:mod:`.drain`), goodput
(:mod:`.goodput`), training metrics as Ray metrics (:mod:`.training_metrics`), and Ray Tune's concurrency from the
idle slices (:mod:`.tuning`).

Exports :class:`CheckpointSignal`, :func:`should_checkpoint_now`, :class:`GoodputRecorder`,
:func:`report_step_metrics` and :func:`trials_at_once`.
"""

from tpuray.workloads.signals.drain import CheckpointSignal, should_checkpoint_now
from tpuray.workloads.signals.goodput import GoodputRecorder
from tpuray.workloads.signals.training_metrics import report_step_metrics
from tpuray.workloads.signals.tuning import trials_at_once

__all__ = ["CheckpointSignal", "GoodputRecorder", "report_step_metrics", "should_checkpoint_now", "trials_at_once"]
