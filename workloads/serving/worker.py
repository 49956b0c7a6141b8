"""One host's worker of a serving replica: a Ray actor on one bundle of its replica's slice placement group that
holds every chip of its host and drives them from one process with PyTorch/XLA SPMD, as a training SPMD worker
does (:mod:`tpuray.workloads.sharding.backend`: :func:`~tpuray.workloads.sharding.spmd.spmd_devices` before
torch_xla initialises, then :func:`~tpuray.workloads.sharding.spmd.spmd_mesh` over the host's devices). The
model's weights are replicated on every device; each request's batch is sharded along the mesh's ``data`` axis, so
every chip computes its share of the rows in one program.

On a multi-host slice each host's worker runs a program of its own over its host's devices and its share of the
rows (multi-host SPMD runs only on TPUs: :func:`~tpuray.workloads.sharding.spmd.check_spmd_slice`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import ray

from tpuray.workloads.placement.probe import probe
from tpuray.workloads.placement.seats import Seat
from tpuray.workloads.serving.plan import chip_seats

if TYPE_CHECKING:
    import torch

__all__ = [
    "WATCH_GROUP",
    "HostPlace",
    "HostWorker",
    "ModelFactory",
]

ModelFactory = Callable[[Mapping[str, Any]], "torch.nn.Module"]
"""Builds the model from the deployment's ``user_config`` (a module-level function, so Ray pickles it by name)."""

WATCH_GROUP = "watch"
"""The concurrency group of :meth:`HostWorker.watch`, which blocks for the worker's life; its other methods run
one at a time in Ray's default group (one SPMD program, one caller)."""


@dataclass(frozen=True)
class HostPlace:
    """Where a host worker's process really runs and what it drives, as it reports it: what a response carries
    for each host."""

    worker_id: int
    slice_name: str
    node_id: str
    pid: int
    chips: tuple[int, ...]
    """The ``TPU`` accelerator ids Ray gave the worker: all of its host's chips."""
    devices: int
    """The XLA devices its SPMD program runs over (``global_runtime_device_count``): one per chip."""
    device_type: str


class HostWorker:
    """The actor class (made remote by :mod:`tpuray.workloads.serving.replica`, one per host bundle)."""

    def __init__(self, index: int) -> None:
        self._index = index
        self._stop = threading.Event()
        self._model: Any = None
        self._mesh: Any = None
        self._place: HostPlace | None = None

    def seats(self) -> list[Seat]:
        """Where Ray put this worker, one seat per chip it holds (the replica checks them before :meth:`start`)."""
        chips = ray.get_runtime_context().get_accelerator_ids().get("TPU", [])
        return chip_seats(probe(self._index, "xla", whole_host=True), [int(c) for c in chips])

    def start(self) -> HostPlace:
        """One XLA device per chip of the host (before torch_xla initialises), SPMD on, the 1-D ``data`` mesh."""
        from tpuray.workloads.sharding.spmd import spmd_devices

        chips = spmd_devices()  # CPU_NUM_DEVICES on the emulated host, as the training SPMD backend sets it
        # a TPU host without it would run on its CPU, silently (the training SPMD backend sets it so too)
        os.environ.setdefault("PJRT_DEVICE", "TPU")

        import torch_xla.runtime as xr

        from tpuray.workloads.sharding.mesh import mesh_plan
        from tpuray.workloads.sharding.spmd import spmd_mesh

        self._mesh = spmd_mesh(mesh_plan(chips))  # (data=chips, fsdp=1, tensor=1); refuses a device count != chips
        seat = probe(self._index, "xla", whole_host=True)
        self._place = HostPlace(
            worker_id=seat.worker_id,
            slice_name=seat.slice_name,
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            chips=tuple(int(c) for c in ray.get_runtime_context().get_accelerator_ids().get("TPU", [])),
            devices=int(xr.global_runtime_device_count()),
            device_type=str(xr.device_type()),
        )
        return self._place

    def load(self, factory: ModelFactory, config: Mapping[str, Any]) -> int:
        """Build the model from ``config`` and put it on the host's devices, replicated (an unmarked tensor is
        replicated under SPMD); a ``user_config`` change calls this again on the same process. Returns the pid."""
        import torch
        import torch_xla

        model = factory(config)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: the factory must return a torch.nn.Module, got {type(model).__name__}")
        self._model = model.to(torch_xla.device()).eval()
        return os.getpid()

    def infer(self, rows: list[list[float]]) -> tuple[list[list[float]], dict[str, Any]]:
        """The model's output for this host's rows, computed by one SPMD program with the batch sharded over the
        host's devices, and where: the host's report and ``shard_bytes``, the bytes of the output each device
        holds (each holds its rows' share, not the whole output)."""
        import torch
        import torch_xla
        from torch_xla.distributed.spmd import xla_sharding as xs

        from tpuray.workloads.sharding.spmd import local_bytes

        if self._model is None or self._place is None:
            raise RuntimeError("this host's worker has no model yet: the replica loads it before it takes requests")
        n, devices = len(rows), self._place.devices
        # whole rows per device: pad with copies of the last row, dropped from the answer
        padded = rows + [rows[-1]] * (-n % devices)
        with torch.no_grad():
            batch = torch.tensor(padded, dtype=torch.float32).to(torch_xla.device())
            xs.mark_sharding(batch, self._mesh, ("data", None))
            out = self._model(batch)
            torch_xla.sync()
            result = out.cpu()[:n].tolist()
            shards = local_bytes([out])  # after the transfer: sync() returns with the computation still in flight
        return result, {**asdict(self._place), "shard_bytes": shards}

    def ping(self) -> int:
        """For the replica's health check: this process answers."""
        return os.getpid()

    @ray.method(concurrency_group=WATCH_GROUP)
    def watch(self) -> None:
        """Returns when :meth:`stop` is called; a replica waits on it, so the worker's death fails it at once."""
        self._stop.wait()

    def stop(self) -> None:
        self._stop.set()
