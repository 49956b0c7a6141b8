"""The TPU runtimes tpuray runs PyTorch with, one row each: what to install, which image to build, how many Ray
workers a host runs and what each asks of Ray, the process group, the compile cache and the ports. The config, the
planner, the doctor, the generated docs and the workloads' runtime check all read these rows.

Pure Python, no Pulumi. PyTorch/XLA (``torch_xla`` 2.9, torch 2.9) and TorchTPU (``torch_tpu`` 0.2, torch 2.11 to
2.15) cannot share one environment (each wheel pins its torch), so each has its own extra and worker image target
(``workloads/Dockerfile``), and its image tag says which it holds.

A row's process model is its ``worker_per``: one Ray worker per runtime device (PyTorch/XLA's per-chip processes,
TorchTPU's per-device ones) or one per host driving all its chips: :data:`XLA_SPMD`, PyTorch/XLA's second process
model (``tpuray.workloads.sharding.spmd``, sharded training and serving), the ``xla`` row with one worker per host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from tpuray.components.catalog.runtime_ports import TORCH_TPU_HANDSHAKE_PORT, PortRange, torch_tpu_ports, xla_ports
from tpuray.components.catalog.topology import TpuSlice

__all__ = [
    "BACKENDS",
    "RUNTIMES",
    "TORCH_TPU_LIBTPU",
    "TORCH_TPU_TORCH",
    "TORCH_TPU_VERSIONS",
    "XLA_SPMD",
    "Runtime",
    "RuntimeBackend",
    "runtime_for_tag",
    "runtime_ports",
    "union_ports",
]

RuntimeBackend = Literal["xla", "torch_tpu"]

TORCH_TPU_VERSIONS = ">=0.2,<0.3"
"""The torch_tpu releases tpuray's TorchTPU path was read from (0.2.0's Python sources)."""
TORCH_TPU_TORCH = ">=2.11.0,<=2.15.0"
"""The torch releases torch_tpu 0.2.0 loads with (its wheel's ``Requires-Dist: torch>=2.11.0,<=2.15.0``)."""
TORCH_TPU_LIBTPU = ">=0.0.50"
"""The libtpu torch_tpu 0.2.0 requires (``Requires-Dist: libtpu>=0.0.50``)."""


@dataclass(frozen=True)
class Runtime:
    """One TPU runtime as tpuray runs it."""

    name: RuntimeBackend
    """``workload.backend``'s value."""
    package: str
    """The Python package that is the runtime (imported by the workers; the other runtime's must not be)."""
    extra: str
    """tpuray's pip extra that installs it."""
    image_target: str
    """The ``workloads/Dockerfile`` target that builds its worker image."""
    tag_suffix: str
    """How its worker images' tags end, so that a reference alone says which runtime it holds."""
    splits_chips: bool
    """A chip of two devices (tpu7x) is two runtime devices: TorchTPU runs a PJRT device per TensorCore, PyTorch/XLA
    one per chip."""
    worker_per: Literal["device", "host"]
    """One Ray worker (process) per runtime device, or one per host with all its chips (SPMD)."""
    process_group: str
    """The ``torch.distributed`` backend its workers join."""
    emulated_process_group: str
    """The process group on the emulated slice (CPU workers)."""
    compile_cache: str
    """Where its persistent compile cache is set (``tpuray.workloads.api.compile_cache`` sets it before the first
    compile)."""
    port_ranges: Callable[[int], tuple[PortRange, ...]]
    """Its listeners on one host, given the processes on the host."""
    single_listeners: tuple[tuple[str, int], ...] = ()
    """Its listeners of one port each, opened by one process of a job (beside the per-process ranges)."""

    def devices_per_chip(self, s: TpuSlice) -> int:
        """Runtime devices on one chip of ``s``: the mesh devices a chip holds."""
        return s.spec.devices_per_chip if self.splits_chips else 1

    def devices_per_host(self, s: TpuSlice) -> int:
        return s.chips_per_host * self.devices_per_chip(s)

    def workers_per_host(self, s: TpuSlice) -> int:
        """Ray workers (processes) on one host of ``s``."""
        return self.devices_per_host(s) if self.worker_per == "device" else 1

    def workers_per_slice(self, s: TpuSlice) -> int:
        return self.workers_per_host(s) * s.hosts

    def ray_tpu_per_chip(self, s: TpuSlice) -> int:
        """The ``TPU`` resources Ray counts per chip (``RAY_TPU_RESOURCE_PER_CHIP``, 1 unless set): one per runtime
        device, so that ``{"TPU": 1}`` is one device's worker (``ray/_private/accelerators/tpu.py``, Ray 2.60)."""
        return self.devices_per_chip(s)

    def ray_tpu_per_host(self, s: TpuSlice) -> int:
        """The ``TPU`` resources Ray advertises on one host of ``s`` (Kueue quota, ``google.com/tpu`` and cost stay
        in chips)."""
        return s.chips_per_host * self.ray_tpu_per_chip(s)

    def tpu_resource_per_worker(self, s: TpuSlice) -> int:
        """The ``TPU`` resource one worker asks Ray for: a host's share per worker."""
        return self.ray_tpu_per_host(s) // self.workers_per_host(s)

    def ports(self, s: TpuSlice) -> tuple[PortRange, ...]:
        """The ranges the processes of one host of ``s`` listen on."""
        return self.port_ranges(self.workers_per_host(s))


RUNTIMES: dict[RuntimeBackend, Runtime] = {
    "xla": Runtime(
        name="xla",
        package="torch_xla",
        extra="workload",
        image_target="worker-xla",
        tag_suffix="-xla",
        splits_chips=False,
        worker_per="device",
        # torch_xla's "xla" backend (torch_xla.distributed.xla_backend); gloo where the slice is emulated on CPUs
        process_group="xla",
        emulated_process_group="gloo",
        # torch_xla 2.9 torch_xla/runtime.py: sets XLA_PERSISTENT_CACHE_PATH
        compile_cache="torch_xla.runtime.initialize_cache",
        port_ranges=xla_ports,
    ),
    "torch_tpu": Runtime(
        name="torch_tpu",
        package="torch_tpu",
        extra="torch-tpu",
        image_target="worker-torch-tpu",
        tag_suffix="-torch-tpu",
        splits_chips=True,
        worker_per="device",
        # Ray 2.60's TorchTrainer switches to it on TPU workers when the config names no backend
        process_group="tpu_dist",
        # the emulated slice's stand-in registers tpu_dist as gloo (tpuray.workloads.emulation.torch_tpu_standin)
        emulated_process_group="gloo",
        # read by torch_tpu 0.2.0's C++ glue (tier3_compilation_cache.cc), a gs:// root
        compile_cache="TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT",
        port_ranges=torch_tpu_ports,
        # the split compiler's handshake server on the coordinator rank (torch_tpu 0.2.0
        # _internal/distributed/handshake.py, _DEFAULT_HANDSHAKE_PORT, TORCH_TPU_INTERNAL_HANDSHAKE_PORT)
        single_listeners=(("split-compile handshake", TORCH_TPU_HANDSHAKE_PORT),),
    ),
}
BACKENDS: tuple[RuntimeBackend, ...] = tuple(RUNTIMES)

XLA_SPMD: Runtime = replace(RUNTIMES["xla"], worker_per="host")
"""PyTorch/XLA under SPMD: the same runtime and ``workload.backend`` (``xla``), one Ray worker per host holding all
of its chips, since one process drives a host's chips (https://docs.pytorch.org/xla/master/perf/spmd_basic.html)."""


def runtime_for_tag(tag: str | None) -> RuntimeBackend | None:
    """The runtime a worker image's tag names (``0.1.0-torch-tpu`` -> ``torch_tpu``), or None when it names none."""
    return next((r.name for r in RUNTIMES.values() if (tag or "").endswith(r.tag_suffix)), None)


def runtime_ports(tpu_slice: TpuSlice, backend: RuntimeBackend) -> tuple[PortRange, ...]:
    """The ranges the processes of one host of ``tpu_slice`` listen on under ``backend``.

    >>> [(r.name, r.first, r.last) for r in runtime_ports(TpuSlice.parse("tpu7x:2x2x2"), "torch_tpu")]
    [('tpu-slicebuilder', 8471, 8478), ('tpu-megascale', 8080, 8095)]
    >>> [(r.name, r.first, r.last) for r in runtime_ports(TpuSlice.parse("v5p:2x2x2"), "xla")]
    [('tpu-slicebuilder', 8471, 8471), ('tpu-process', 8476, 8479), ('tpu-megascale', 8081, 8084)]
    """
    if backend not in RUNTIMES:
        raise ValueError(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
    return RUNTIMES[backend].ports(tpu_slice)


def union_ports(slices: Iterable[TpuSlice], backend: RuntimeBackend) -> list[tuple[int, int]]:
    """Every port any of ``slices`` listens on under ``backend``, as sorted, merged ``(first, last)`` ranges: the
    per-process ranges and the row's single listeners.

    >>> union_ports([TpuSlice.parse("tpu7x:2x2x2")], "torch_tpu")
    [(8080, 8095), (8471, 8478), (36423, 36423)]
    """
    single = {(port, port) for _, port in RUNTIMES[backend].single_listeners}
    spans = sorted({(r.first, r.last) for s in slices for r in runtime_ports(s, backend)} | single)
    merged: list[tuple[int, int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged
