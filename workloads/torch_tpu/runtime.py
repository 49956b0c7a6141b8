"""TorchTPU's :class:`~tpuray.workloads.api.worker.Runtime`: one process per runtime device on Ray's ``tpu_dist``
process group, eager, so ``sync`` does nothing. It reads rank and world from ``torch.distributed`` when asked: the
env callback binds it before Ray's backend creates the process group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["TorchTpuRuntime"]


@dataclass(frozen=True)
class TorchTpuRuntime:
    """The runtime of one TorchTPU worker."""

    first_on_host: bool
    name: str = "torch_tpu"

    @property
    def rank(self) -> int:
        import torch.distributed as dist

        return int(dist.get_rank())

    @property
    def world_size(self) -> int:
        import torch.distributed as dist

        return int(dist.get_world_size())

    @property
    def device(self) -> torch.device:
        """Ray's answer for this worker (``ray.train.torch.get_device()``): ``tpu`` under torch_tpu, the CPU on the
        emulated slice's stand-in."""
        import ray.train.torch

        device: torch.device = ray.train.torch.get_device()
        return device

    @property
    def autocast_device(self) -> str:
        return self.device.type

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        import torch.distributed as dist

        world = self.world_size
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world
        optimizer.step()

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        import torch
        import torch.distributed as dist

        t = values.detach().clone()
        dist.all_reduce(t)
        return (t / self.world_size).cpu().to(torch.float64)

    def sync(self) -> None:
        return None
