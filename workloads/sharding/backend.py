"""A Ray Train backend for PyTorch/XLA SPMD: one worker per TPU host driving all of its chips.

Ray Train 2.60's own ``TorchConfig`` cannot start such a worker: with TPUs in the worker's resources its
``_TorchBackend.on_start`` picks the ``tpu_dist`` process group and calls ``get_device()``, which needs torch_tpu
(``ray/train/torch/config.py``; ``ray/air/_internal/device_manager/tpu.py`` raises "Using TPUTorchDeviceManager
but torch_tpu is not available"). :class:`SpmdConfig` names its own backend, which on every worker, before the
train function runs:

1. gives it one XLA device per chip of its host (:func:`~tpuray.workloads.sharding.spmd.spmd_devices`:
   ``CPU_NUM_DEVICES`` on the emulated host) and ``PJRT_DEVICE=TPU`` unless the host says otherwise;
2. joins a gloo process group of the hosts' workers (on CPU: SPMD's collectives run inside the one program), which
   ``torch.distributed.checkpoint`` coordinates through (:mod:`tpuray.workloads.sharding.checkpoint`), as
   torch_xla's SPMD checkpointing asks (https://docs.pytorch.org/xla/master/perf/spmd_distributed_checkpoint.html).

If that fails the backend shuts the worker group down before raising, so the slice's placement group is freed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ray.train.backend import Backend
from ray.train.torch import TorchConfig

from tpuray.workloads import _ray_compat
from tpuray.workloads.placement.probe import free_port
from tpuray.workloads.sharding.spmd import spmd_devices

__all__ = ["SpmdConfig"]


def _join(master: tuple[str, int], rank: int, world_size: int, timeout_s: float) -> None:
    import torch.distributed as dist

    spmd_devices()
    os.environ.setdefault("PJRT_DEVICE", "TPU")  # a TPU worker without it would train on the host CPU, silently
    if not dist.is_initialized():
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{master[0]}:{master[1]}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class _SpmdBackend(Backend):
    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        import ray

        with _ray_compat.released_on_failure(worker_group):
            n = len(worker_group)
            master = worker_group.execute_single(0, free_port)
            timeout = backend_config.timeout_s
            ray.get([worker_group.execute_single_async(i, _join, master, i, n, timeout) for i in range(n)])

    def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
        worker_group.execute(_leave)


@dataclass
class SpmdConfig(TorchConfig):
    """Ray Train config for PyTorch/XLA SPMD, one worker per TPU host: pass as ``TorchTrainer(torch_config=...)``
    with :func:`~tpuray.workloads.sharding.spmd.spmd_scaling_config`. ``timeout_s``: the gloo group's timeout."""

    backend: str = "gloo"

    @property
    def backend_cls(self) -> type[Backend]:
        return _SpmdBackend
