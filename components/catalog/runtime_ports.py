"""The TCP ports a host's training processes listen on, per runtime: the port functions the runtime rows of
:mod:`tpuray.components.catalog.runtimes` name, which the NetworkPolicy, the worker containers' ports and the worker
env (``tpuray.workloads.placement.worker_env``) all read.

Pure Python, no Pulumi. Each range is derived from the number of processes on a host (the runtime row's workers
per host): one port per process, processes numbered from 0 on each host. No two processes of a host share a
port: each binds its own, the multislice (MEGASCALE) port included
(:data:`~tpuray.components.catalog.names.TPU_MEGASCALE_PORT`).

- TorchTPU (``torch_tpu``): one process per runtime device (two per chip on tpu7x). Each device's slice builder
  listens on its entry of ``TORCH_TPU_SLICEBUILDER_ADDRESSES``, ``host:base + i`` for the ``i``-th device of a host
  (torch_tpu 0.2.0 ``_internal/distributed/distributed.py``, ``build_slicebuilder_addresses``), and torch_tpu
  derives ``TPU_PROCESS_ADDRESSES`` and ``TPU_PROCESS_PORT`` from that list itself, overwriting what the KubeRay TPU
  webhook injected (``InitializeDistributedEnvironment`` in its C++ glue sets them with ``setenv``, overwriting);
  torch_tpu's own launcher counts from 8070, tpuray from 8471
  (:data:`~tpuray.components.catalog.names.TPU_SLICEBUILDER_PORT`). Across slices torch_tpu also overwrites the
  ``MEGASCALE_PORT`` Ray 2.60 set (``8081 + LOCAL_RANK``) with ``8080 + 2 * LOCAL_RANK`` and adds
  ``MEGASCALE_DEBUG_PORT = 8081 + 2 * LOCAL_RANK``
  (:data:`~tpuray.components.catalog.names.TORCH_TPU_MEGASCALE_BASE_PORT`): two ports per device from 8080.
- PyTorch/XLA (``xla``): one process per chip on ``TPU_PROCESS_PORT = 8476 + chip`` (torch_xla 2.9
  ``_internal/tpu.py``, ``configure_topology``), 8471 (the runtime's default process port), and one multislice port
  per chip, ``MEGASCALE_PORT = 8081 + chip``, as Ray 2.60 numbers TorchTPU's per worker and the KubeRay TPU webhook
  1.3.1 per TPU container; a shared port would leave every process of a host but one unable to bind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpuray.components.catalog.names import (
    TORCH_TPU_MEGASCALE_BASE_PORT,
    TPU_MEGASCALE_PORT,
    TPU_PROCESS_BASE_PORT,
    TPU_SLICEBUILDER_PORT,
)

__all__ = [
    "TORCH_TPU_HANDSHAKE_PORT",
    "PortRange",
    "torch_tpu_coordinator_port",
    "torch_tpu_megascale_ports",
    "torch_tpu_ports",
    "xla_megascale_port",
    "xla_ports",
]


@dataclass(frozen=True)
class PortRange:
    """TCP ports ``first..last`` (inclusive) that one kind of runtime listener takes on every host."""

    name: str
    first: int
    last: int
    between: Literal["hosts", "slices"]
    """``hosts``: reached from the other hosts of the slice; ``slices``: from the hosts of the other slices."""

    @property
    def ports(self) -> range:
        return range(self.first, self.last + 1)


def xla_megascale_port(chip: int, base: int = TPU_MEGASCALE_PORT) -> int:
    """``MEGASCALE_PORT`` of the PyTorch/XLA process that drives ``chip`` of its host: ``base + chip``."""
    if chip < 0:
        raise ValueError(f"chip {chip}: chips are numbered from 0 on each host")
    return base + chip


def torch_tpu_megascale_ports(local_rank: int) -> tuple[int, int]:
    """``(MEGASCALE_PORT, MEGASCALE_DEBUG_PORT)`` torch_tpu 0.2.0 gives the multislice process of ``local_rank``:
    ``8080 + 2 * local_rank`` and the next port (:data:`~tpuray.components.catalog.names.TORCH_TPU_MEGASCALE_BASE_PORT`
    holds the source)."""
    if local_rank < 0:
        raise ValueError(f"local rank {local_rank}: local ranks are numbered from 0 on each host")
    port = TORCH_TPU_MEGASCALE_BASE_PORT + 2 * local_rank
    return port, port + 1


def torch_tpu_coordinator_port() -> int:
    """The port the MegaScale coordinator of a multislice TorchTPU job listens on: local rank 0's ``MEGASCALE_PORT``
    after torch_tpu 0.2.0's overwrite, 8080.

    libtpu runs the coordinator in one task of the job, on that task's own MegaScale port ("This task is the
    coordinator", libtpu 0.0.52), and a ``MEGASCALE_COORDINATOR_ADDRESS`` without a port gets "each process's own
    MEGASCALE_PORT" appended, so torch_tpu's hint is ``<MASTER_ADDR>:8080`` (``_internal/distributed/
    device_mesh.py``). ``MASTER_ADDR`` is rank 0's host, where rank 0 is local rank 0, and ``AssignMegascalePorts``
    gives local rank ``i`` ``MEGASCALE_PORT = 8080 + 2 * i`` (:func:`torch_tpu_megascale_ports`): so 8080. Ray 2.60's
    8081 (``DEFAULT_MEGASCALE_PORT``) is, after that overwrite, rank 0's ``MEGASCALE_DEBUG_PORT``."""
    return torch_tpu_megascale_ports(0)[0]


TORCH_TPU_HANDSHAKE_PORT = 36423
"""The split compiler's handshake server, on the coordinator rank (torch_tpu 0.2.0 ``_internal/distributed/
handshake.py``: ``_DEFAULT_HANDSHAKE_PORT``, read from ``TORCH_TPU_INTERNAL_HANDSHAKE_PORT``)."""


def _processes(n: int) -> int:
    if n < 1:
        raise ValueError(f"{n} processes per host: a host runs at least one")
    return n


def torch_tpu_ports(processes: int) -> tuple[PortRange, ...]:
    """The ranges TorchTPU's ``processes`` per host (one per device) listen on.

    >>> [(r.name, r.first, r.last) for r in torch_tpu_ports(8)]
    [('tpu-slicebuilder', 8471, 8478), ('tpu-megascale', 8080, 8095)]
    """
    n = _processes(processes)
    return (
        PortRange("tpu-slicebuilder", TPU_SLICEBUILDER_PORT, TPU_SLICEBUILDER_PORT + n - 1, "hosts"),
        PortRange("tpu-megascale", torch_tpu_megascale_ports(0)[0], torch_tpu_megascale_ports(n - 1)[1], "slices"),
    )


def xla_ports(processes: int) -> tuple[PortRange, ...]:
    """The ranges PyTorch/XLA's ``processes`` per host (one per chip) listen on.

    >>> [(r.name, r.first, r.last) for r in xla_ports(4)]
    [('tpu-slicebuilder', 8471, 8471), ('tpu-process', 8476, 8479), ('tpu-megascale', 8081, 8084)]
    """
    n = _processes(processes)
    return (
        PortRange("tpu-slicebuilder", TPU_SLICEBUILDER_PORT, TPU_SLICEBUILDER_PORT, "hosts"),
        PortRange("tpu-process", TPU_PROCESS_BASE_PORT, TPU_PROCESS_BASE_PORT + n - 1, "hosts"),
        PortRange("tpu-megascale", xla_megascale_port(0), xla_megascale_port(n - 1), "slices"),
    )
