"""One chip's worker of a serving replica: a Ray actor on one bundle of its replica's slice placement group that
takes its chip as a PyTorch/XLA training worker does (the same probe, PJRT env and runtime binding as
``XlaChipConfig``: :func:`tpuray.workloads.placement.probe.probe`,
:func:`tpuray.workloads.xla.backend.apply_assignment`), holds the model on the chip's XLA device, and answers its
share of each request."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import ray

from tpuray.workloads.placement.probe import probe
from tpuray.workloads.placement.seats import ChipAssignment, Seat

if TYPE_CHECKING:
    import torch

__all__ = ["ChipPlace", "ChipWorker", "ModelFactory"]

ModelFactory = Callable[[Mapping[str, Any]], "torch.nn.Module"]
"""Builds the model from the deployment's ``user_config`` (a module-level function, so Ray pickles it by name)."""

WATCH_GROUP = "watch"
"""The concurrency group of :meth:`ChipWorker.watch`, which blocks for the worker's life; its other methods run
one at a time in Ray's default group (one XLA device, one caller)."""


@dataclass(frozen=True)
class ChipPlace:
    """Where a worker's process really runs, as it reports it: what a response carries for each chip."""

    rank: int
    slice_name: str
    worker_id: int
    chip: int
    node_id: str
    pid: int
    device: str


class ChipWorker:
    """The actor class (made remote by :mod:`tpuray.workloads.serving.replica`, one per bundle)."""

    def __init__(self, index: int) -> None:
        self._index = index
        self._stop = threading.Event()
        self._model: Any = None
        self._place: ChipPlace | None = None

    def seat(self) -> Seat:
        """Where Ray put this worker: its node's slice, host and chip (exactly one)."""
        return probe(self._index, "xla")

    def start(self, assignment: ChipAssignment) -> ChipPlace:
        """Take the chip: its PJRT env and runtime, before anything starts the XLA runtime."""
        from tpuray.workloads.api.worker import chip
        from tpuray.workloads.xla.backend import apply_assignment

        apply_assignment(assignment)
        self._place = ChipPlace(
            rank=assignment.rank,
            slice_name=assignment.slice_name,
            worker_id=assignment.worker_id,
            chip=assignment.chip,
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            device=str(chip().device),
        )
        return self._place

    def load(self, factory: ModelFactory, config: Mapping[str, Any]) -> None:
        """Build the model from ``config`` and put it on the chip (a ``user_config`` change calls this again)."""
        import torch

        from tpuray.workloads.api.worker import chip

        model = factory(config)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: the factory must return a torch.nn.Module, got {type(model).__name__}")
        self._model = model.to(chip().device).eval()

    def infer(self, rows: list[list[float]]) -> tuple[list[list[float]], dict[str, Any]]:
        """The model's output for this chip's rows, computed on the chip, and where it was computed."""
        import torch
        import torch_xla

        from tpuray.workloads.api.worker import chip

        if self._model is None or self._place is None:
            raise RuntimeError("this chip's worker has no model yet: the replica loads it before it takes requests")
        with torch.no_grad():
            out = self._model(torch.tensor(rows, dtype=torch.float32).to(chip().device))
            torch_xla.sync()
            result = out.cpu().tolist()
        return result, asdict(self._place)

    def ping(self) -> int:
        """For the replica's health check: this process answers."""
        return os.getpid()

    @ray.method(concurrency_group=WATCH_GROUP)
    def watch(self) -> None:
        """Returns when :meth:`stop` is called; a replica waits on it, so the worker's death fails it at once."""
        self._stop.wait()

    def stop(self) -> None:
        self._stop.set()
