"""The TorchTPU backend: ``torch_tpu`` through Ray Train's own TPU path (``ScalingConfig(use_tpu=True, ...)``).

Ray Train drives torch_tpu with the ``tpu_dist`` process group and ``torch.device("tpu")``, one process per
device as Ray's TorchTPU path expects (``ray.air._internal.device_manager.tpu``; ``_validate_tpu_resources``
warns for anything but ``{"TPU": 1}`` per worker), so the scaling config is the same one-worker-per-chip
:func:`~tpuray.workloads.tpu_scaling_config`. Ray 2.60 leaves ``TORCH_TPU_TOPOLOGY`` and
``TORCH_TPU_SLICEBUILDER_ADDRESSES`` unset: :class:`TorchTpuConfig`'s backend fills them in on every worker
(:func:`tpuray.workloads.worker_env.torch_tpu_env`) before Ray creates the process group.

torch_tpu is not on PyPI and there are no TPUs here: this path is tested for its configuration and env only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray.train.torch import TorchConfig

from tpuray.components.topology import TpuSlice
from tpuray.workloads import _ray_compat
from tpuray.workloads.worker_env import hostnames_from_env, torch_tpu_env

__all__ = ["TorchTpuConfig", "torch_tpu_trainer"]


def _fill_env(slice_spec: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """In a Ray Train worker: set the TORCH_TPU_* variables that are still unset; returns what it set."""
    env = os.environ if environ is None else environ
    wanted = torch_tpu_env(TpuSlice.parse(slice_spec), hostnames_from_env(env))
    missing = {k: v for k, v in wanted.items() if k not in env}
    if environ is None:
        os.environ.update(missing)
    return missing


class _TorchTpuBackend(_ray_compat.torch_backend_base()):  # type: ignore[misc]
    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        worker_group.execute(_fill_env, backend_config.slice_spec)  # before Ray creates the tpu_dist group
        super().on_start(worker_group, backend_config)


@dataclass
class TorchTpuConfig(TorchConfig):
    """A Ray Train ``TorchConfig`` (backend ``tpu_dist``) that fills in the TORCH_TPU_* env first."""

    backend: str = "tpu_dist"
    slice_spec: str = ""

    @property
    def backend_cls(self) -> type:
        return _TorchTpuBackend


def torch_tpu_trainer(job: Any, tpu_slice: TpuSlice, num_slices: int, run_config: Any) -> Any:
    """The GPT job on torch_tpu: same train function, checkpoints and failure handling as the xla backend."""
    from ray.train.torch import TorchTrainer

    from tpuray.workloads.backend import tpu_scaling_config
    from tpuray.workloads.gpt_loop import train_gpt

    return TorchTrainer(
        train_gpt,
        train_loop_config={"job": job, "runtime": "torch_tpu"},
        scaling_config=tpu_scaling_config(tpu_slice, num_slices=num_slices),
        torch_config=TorchTpuConfig(slice_spec=str(tpu_slice)),
        run_config=run_config,
    )
