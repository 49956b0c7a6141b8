"""PyTorch/XLA's :class:`~tpuray.workloads.api.worker.Runtime`: one process per chip, XLA collectives on TPUs and
gloo on CPU copies in the emulation (an XLA all-reduce across CPU processes silently returns the local value, and
gloo cannot read XLA tensors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuray.workloads.api.worker import ChipInfo
from tpuray.workloads.xla import portable

if TYPE_CHECKING:
    import torch

__all__ = ["XlaRuntime"]


@dataclass(frozen=True)
class XlaRuntime:
    """The runtime of one PyTorch/XLA worker, from its chip."""

    info: ChipInfo
    name: str = "xla"
    autocast_device: str = "xla"

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def device(self) -> torch.device:
        return self.info.device

    @property
    def first_on_host(self) -> bool:
        return self.info.chip == 0

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.world_size > 1:
            if self.info.collective == "xla":
                import torch_xla.core.xla_model as xm

                xm.reduce_gradients(optimizer)
            else:
                params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
                portable.gloo_average(params, self.world_size)
        optimizer.step()

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        import torch

        # a copy even where the values are float64 on the CPU already (then .to and .cpu return them): the gloo
        # all-reduce below sums in place, which would overwrite the caller's tensor
        local = values.detach().to(torch.float64).cpu().clone()
        if self.world_size == 1:
            return local
        if self.info.collective == "xla":
            import torch_xla.core.xla_model as xm

            summed = xm.all_reduce(xm.REDUCE_SUM, values.detach().to(self.device))
            assert isinstance(summed, torch.Tensor)
            return summed.cpu().to(torch.float64) / self.world_size
        import torch.distributed as dist

        dist.all_reduce(local)
        return local / self.world_size

    def sync(self) -> None:
        import torch_xla

        torch_xla.sync()
