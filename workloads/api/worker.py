"""The per-worker API: what a train function asks of the TPU runtime it runs on, whichever backend set it up.

A runtime's Ray Train backend binds one :class:`Runtime` in each worker process before the train function runs:
PyTorch/XLA's :class:`~tpuray.workloads.XlaChipConfig` (one worker per chip, :mod:`tpuray.workloads.xla.runtime`),
TorchTPU's env callback (one worker per device, :mod:`tpuray.workloads.torch_tpu.runtime`). The train function then
calls :func:`optimizer_step` and :func:`mean_over_chips`, or :func:`runtime` for the rest, with no backend named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["ChipInfo", "Collective", "Runtime", "bind", "chip", "mean_over_chips", "optimizer_step", "runtime"]

Collective = Literal["xla", "gloo", "tpu_dist"]


class Runtime(Protocol):
    """One worker's view of its TPU runtime: its rank among all workers, its device, and the two collectives a
    data-parallel loop needs."""

    @property
    def name(self) -> str:
        """The runtime's row in :mod:`tpuray.components.catalog.runtimes` (``xla``, ``torch_tpu``)."""
        ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def autocast_device(self) -> str:
        """The device type ``torch.autocast`` takes for this runtime."""
        ...

    @property
    def first_on_host(self) -> bool:
        """True on one worker per host: the one that watches its Ray node's drain state."""
        ...

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Average gradients over all workers, then ``optimizer.step()``."""
        ...

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise mean of ``values`` over all workers, as float64 on the CPU."""
        ...

    def sync(self) -> None:
        """Run what the runtime has traced so far (a no-op on eager runtimes)."""
        ...


@dataclass(frozen=True)
class ChipInfo:
    """Where this PyTorch/XLA worker's chip sits in the job; :func:`chip` returns it inside the train function.

    It describes the live worker group: an elastic job (``tpu_scaling_config(min_slices=...)``) restarts its group
    at each resize and the backend binds a new one, so ``num_slices`` and ``world_size`` are the slices training
    now (the mesh over them: :func:`tpuray.workloads.sharding.mesh.live_mesh`)."""

    rank: int
    """The XLA rank: ``slice_index * chips_per_slice + CLOUD_TPU_TASK_ID``; also the process-group rank."""
    world_size: int
    """Chips in the job (all slices)."""
    chip: int
    """The chip's index on its host (``TPU_VISIBLE_CHIPS``)."""
    worker_id: int
    """The host's index within its slice (``TPU_WORKER_ID``)."""
    slice_index: int
    num_slices: int
    slice_name: str
    collective: Collective
    """``xla`` on TPUs; ``gloo`` on the emulated slice."""

    @property
    def chips_per_slice(self) -> int:
        """Chips of one slice: the job's chips over its live slices."""
        return self.world_size // self.num_slices

    @property
    def device(self) -> torch.device:
        """This worker's XLA device (its chip)."""
        import torch_xla

        dev: torch.device = torch_xla.device()
        return dev


_BOUND: tuple[Runtime, ChipInfo | None] | None = None


def bind(bound: Runtime | None, chip_info: ChipInfo | None = None) -> None:
    """Called by a runtime's backend in each worker process: the runtime this worker's train function uses (and,
    on PyTorch/XLA, its chip); ``None`` when the worker group shuts down."""
    global _BOUND
    _BOUND = None if bound is None else (bound, chip_info)


def runtime() -> Runtime:
    """This worker's runtime; only inside a train function run by one of tpuray's backends."""
    if _BOUND is None:
        raise RuntimeError(
            "no TPU runtime is bound in this process: call this inside a TorchTrainer train function run with "
            "torch_config=XlaChipConfig() (PyTorch/XLA), or on a TorchTPU stack, whose env callback binds it"
        )
    return _BOUND[0]


def chip() -> ChipInfo:
    """This worker's chip, rank and slice; only inside a train function run with ``XlaChipConfig``."""
    if _BOUND is None or _BOUND[1] is None:
        raise RuntimeError(
            "chip() is only available inside a TorchTrainer train function run with torch_config=XlaChipConfig()"
        )
    return _BOUND[1]


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """Average gradients over all workers, then ``optimizer.step()`` (like ``torch_xla``'s ``xm.optimizer_step``).

    On TPUs the average is the runtime's all-reduce; on the emulated slice it goes through gloo with CPU copies (an
    XLA all-reduce across CPU processes silently returns the local value, and gloo cannot read XLA tensors).
    """
    runtime().optimizer_step(optimizer)


def mean_over_chips(values: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of ``values`` over all workers, on the CPU (for metrics such as the loss)."""
    return runtime().mean(values)
