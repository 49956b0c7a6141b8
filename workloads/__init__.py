"""tpuray.workloads: your PyTorch/XLA training function on TPUs through Ray Train, one worker per chip.

Public API: :class:`XlaChipConfig`, :func:`tpu_scaling_config`, :func:`optimizer_step`, :func:`chip` (the Ray
Train backend), :func:`should_checkpoint_now` (checkpoint when a node drains or the VMs' run time ends),
:func:`trials_at_once` (Ray Tune's ``max_concurrent_trials`` from the idle slices), :func:`emulate` (a local Ray
cluster emulating TPU slices on CPU), :func:`report_step_metrics` and :class:`GoodputRecorder` (training metrics and
goodput as Ray metrics). With :class:`XlaChipConfig`, Ray Train's portable API
(``ray.train.torch.get_device``/``prepare_model``/``prepare_data_loader``) works per chip
(:mod:`tpuray.workloads.portable`). Imports no Pulumi.
"""

from tpuray.workloads.backend import ChipInfo, XlaChipConfig, chip, mean_over_chips, optimizer_step, tpu_scaling_config
from tpuray.workloads.drain import CheckpointSignal, should_checkpoint_now
from tpuray.workloads.emulation import emulate
from tpuray.workloads.goodput import GoodputRecorder
from tpuray.workloads.training_metrics import report_step_metrics
from tpuray.workloads.tuning import trials_at_once

__all__ = [
    "CheckpointSignal",
    "ChipInfo",
    "GoodputRecorder",
    "XlaChipConfig",
    "chip",
    "emulate",
    "mean_over_chips",
    "optimizer_step",
    "report_step_metrics",
    "should_checkpoint_now",
    "tpu_scaling_config",
    "trials_at_once",
]
