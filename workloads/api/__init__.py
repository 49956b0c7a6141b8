"""The user API: whole-slice scaling configs, the per-worker API every runtime binds, which runtime a process
runs, and the persistent compile cache.

Exports :func:`tpu_scaling_config`, :class:`Runtime`, :func:`runtime`, :func:`chip`, :class:`ChipInfo`,
:func:`optimizer_step`, :func:`mean_over_chips`, :func:`require_runtime` and :class:`RuntimeMismatch`.
"""

from tpuray.workloads.api.runtime import RuntimeMismatch, require_runtime
from tpuray.workloads.api.scaling import tpu_scaling_config
from tpuray.workloads.api.worker import ChipInfo, Runtime, chip, mean_over_chips, optimizer_step, runtime

__all__ = [
    "ChipInfo",
    "Runtime",
    "RuntimeMismatch",
    "chip",
    "mean_over_chips",
    "optimizer_step",
    "require_runtime",
    "runtime",
    "tpu_scaling_config",
]
