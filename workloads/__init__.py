"""tpuray.workloads: your PyTorch training function on TPUs through Ray Train, one worker per runtime device (a chip
under PyTorch/XLA; under TorchTPU each device).

Public API: :class:`XlaChipConfig`, :func:`tpu_scaling_config`, :func:`optimizer_step`, :func:`mean_over_chips`,
:func:`chip` and its :class:`ChipInfo` (the Ray Train backend); :func:`runtime` and the :class:`Runtime` protocol both
backends bind in their workers; :func:`should_checkpoint_now` and :class:`CheckpointSignal` (checkpoint when a node
drains or the VMs' run time ends), :func:`trials_at_once` (Ray Tune's ``max_concurrent_trials`` from the idle slices),
:func:`emulate` (a local Ray cluster emulating TPU slices on CPU), :func:`report_step_metrics` and
:class:`GoodputRecorder` (training metrics and goodput as Ray metrics). With :class:`XlaChipConfig`, Ray Train's
portable API (``ray.train.torch.get_device``/``prepare_model``/``prepare_data_loader``) works per chip
(:mod:`tpuray.workloads.xla.portable`). Imports no Pulumi.
"""

from tpuray.workloads.api import ChipInfo, Runtime, chip, mean_over_chips, optimizer_step, runtime, tpu_scaling_config
from tpuray.workloads.emulation import emulate
from tpuray.workloads.signals import (
    CheckpointSignal,
    GoodputRecorder,
    report_step_metrics,
    should_checkpoint_now,
    trials_at_once,
)
from tpuray.workloads.xla import XlaChipConfig

__all__ = [
    "CheckpointSignal",
    "ChipInfo",
    "GoodputRecorder",
    "Runtime",
    "XlaChipConfig",
    "chip",
    "emulate",
    "mean_over_chips",
    "optimizer_step",
    "report_step_metrics",
    "runtime",
    "should_checkpoint_now",
    "tpu_scaling_config",
    "trials_at_once",
]
