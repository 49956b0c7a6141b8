"""Every environment variable a per-chip TPU worker gets, in one place. Pure functions, no torch, no Pulumi.

- PJRT (PyTorch/XLA, one process per chip): the variables torch_xla's own
  ``torch_xla._internal.tpu.configure_topology(local_rank, local_world_size, base_port)`` would set, computed
  from a :class:`~tpuray.components.catalog.topology.TpuSlice` instead of the GCE metadata server (GKE pods have
  none). Ray sets none of ``TPU_PROCESS_BOUNDS``, ``TPU_CHIPS_PER_PROCESS_BOUNDS``, ``TPU_PROCESS_ADDRESSES``,
  ``TPU_PROCESS_PORT`` and ``CLOUD_TPU_TASK_ID``.
- ``MEGASCALE_*`` across slices, from Ray's own ``ray.util.tpu.get_tpu_coordinator_env_vars``, with a
  ``MEGASCALE_PORT`` of its own for each process of a host (:func:`megascale_env`).
- ``TORCH_TPU_*`` for the torch_tpu runtime, one process per device, which Ray 2.60 leaves unset.
- What the GKE TPU webhook injects into a TPU pod that identifies the host (``TPU_NAME``, ``TPU_WORKER_ID``,
  ``TPU_WORKER_HOSTNAMES``), for the local emulation, plus the emulation's CPU settings. The webhook injects more
  (its full list: :mod:`tpuray.components.tpu_webhook`); the emulation gives ``TPU_DEVICE_PLUGIN_ADDR`` its own
  emulated plugin's address (:mod:`tpuray.workloads.emulation.cluster`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpuray.components.catalog.names import (
    EMULATED_SLICE_ENV,
    TPU_MEGASCALE_PORT,
    TPU_PROCESS_BASE_PORT,
    TPU_SLICEBUILDER_PORT,
)
from tpuray.components.catalog.runtime_ports import xla_megascale_port
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.catalog.topology import TpuSlice

__all__ = [
    "DEFAULT_BASE_PORT",
    "EMULATED_XLA_FLAGS",
    "LOCAL_WORKER_ENV",
    "MEGASCALE_PREFIX",
    "RAY_SUBHOST_VARS",
    "DeviceSeat",
    "bounds_size",
    "chip_env",
    "emulated_host_env",
    "host_major_seats",
    "hostnames_from_env",
    "megascale_env",
    "process_addresses",
    "process_bounds",
    "task_id",
    "torch_tpu_env",
    "torch_tpu_topology",
]

DEFAULT_BASE_PORT = TPU_PROCESS_BASE_PORT
"""torch_xla's default first TPU client port on each host; chip ``c`` listens on ``base_port + c``."""

MEGASCALE_PREFIX = "MEGASCALE_"
"""The multislice variables libtpu reads (``MEGASCALE_COORDINATOR_ADDRESS``, ``_NUM_SLICES``, ``_SLICE_ID``,
``_PORT``): a worker drops any it finds before its start sets the live group's (or none, on one slice)."""

RAY_SUBHOST_VARS = ("TPU_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS")
"""Variables Ray sets for a 1-chip actor (``1,1,1`` each: a standalone chip). They contradict the slice-wide
process bounds, so a per-chip worker removes them before the TPU runtime starts."""

EMULATED_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=0"
"""XLA flags of an emulated chip (https://github.com/openxla/xla/blob/main/xla/debug_options_flags.cc): one XLA
CPU thread per worker, as the emulated chips share the machine's few cores; and no LLVM optimisation, as an
emulated chip is there to show that the program runs and agrees across chips, not how fast. With torch_xla 2.9 on
a 2-core x86 machine, compiling the dev GPT's two step graphs took 8.8 CPU-s per worker at XLA's default (-O3)
and 2.4 s at -O0, while its steps went from 20 to 31 ms."""

LOCAL_WORKER_ENV = {
    "PJRT_DEVICE": "CPU",
    "XLA_FLAGS": EMULATED_XLA_FLAGS,
    "OMP_NUM_THREADS": "1",
    EMULATED_SLICE_ENV: "1",
}
"""What every emulated TPU host gives its processes: XLA on CPU, one thread each, unoptimised code, and the mark
of an emulated host (where TorchTPU runs its stand-in)."""


# ---- PJRT: one PyTorch/XLA process per chip ----------------------------------------------------------------


def process_bounds(tpu_slice: TpuSlice) -> str:
    """``TPU_PROCESS_BOUNDS`` for one process per chip: host bounds x chips-per-host bounds, element-wise.

    That product is the slice's chip grid, so the bounds announce exactly one process per chip, the number of
    addresses :func:`process_addresses` lists. On tpu7x a chip holds two TensorCores, each its own PJRT device
    (https://docs.cloud.google.com/tpu/docs/tpu7x); torch_xla 2.9's ``configure_topology`` still starts one
    process per chip (``num_local_processes`` counts PCI chips, ``TPU_VISIBLE_CHIPS`` masks whole chips) but
    appends ``,2`` to these bounds, which announces twice the processes it lists addresses for. A per-chip
    worker here owns both devices of its chip, so the bounds stay the chip grid. Not verified on tpu7x
    hardware (none here).
    """
    hb, cb = tpu_slice.host_bounds, tpu_slice.chips_per_host_bounds
    return ",".join(str(h * c) for h, c in zip(hb, cb, strict=True))


def _worker_addresses(hostnames: Sequence[str]) -> list[str]:
    # torch_xla's get_worker_ips(): a single (or empty) host list means "this host" -> 'localhost'.
    return list(hostnames) if len(hostnames) > 1 else ["localhost"]


def process_addresses(tpu_slice: TpuSlice, hostnames: Sequence[str], base_port: int = DEFAULT_BASE_PORT) -> str:
    """``TPU_PROCESS_ADDRESSES``: every ``host:port`` of the slice, hosts in worker-id order, chips in order."""
    ports = range(base_port, base_port + tpu_slice.chips_per_host)
    return ",".join(",".join(f"{ip}:{port}" for port in ports) for ip in _worker_addresses(hostnames))


def task_id(tpu_slice: TpuSlice, worker_id: int, chip: int) -> int:
    """``CLOUD_TPU_TASK_ID``: the process index in the slice, ``worker_id * chips_per_host + chip``."""
    return worker_id * tpu_slice.chips_per_host + chip


def chip_env(
    tpu_slice: TpuSlice,
    worker_id: int,
    chip: int,
    hostnames: Sequence[str],
    base_port: int = DEFAULT_BASE_PORT,
) -> dict[str, str]:
    """The PJRT variables of the process that drives ``chip`` on host ``worker_id`` of ``tpu_slice``.

    ``hostnames`` are the slice's hosts in worker-id order (``TPU_WORKER_HOSTNAMES`` from the GKE TPU webhook,
    or the hosts' addresses); for a single-host slice they may be empty. Ports are TCP ports.
    Raises ``ValueError`` for a host or chip outside the slice, or a host list of the wrong length.
    """
    if not 0 <= worker_id < tpu_slice.hosts:
        raise ValueError(f"worker_id {worker_id} is outside {tpu_slice} (hosts 0..{tpu_slice.hosts - 1})")
    if not 0 <= chip < tpu_slice.chips_per_host:
        raise ValueError(f"chip {chip} is outside a {tpu_slice.chips_per_host}-chip host of {tpu_slice}")
    if tpu_slice.multi_host and len(hostnames) != tpu_slice.hosts:
        raise ValueError(
            f"{tpu_slice} has {tpu_slice.hosts} hosts but {len(hostnames)} hostnames were given: {list(hostnames)}"
        )
    if not tpu_slice.multi_host and len(hostnames) > 1:
        raise ValueError(f"{tpu_slice} is single-host but {len(hostnames)} hostnames were given")
    if not 0 < base_port <= 65535 - tpu_slice.chips_per_host:
        raise ValueError(
            f"base_port {base_port}: must be 1..{65535 - tpu_slice.chips_per_host}, so that the ports of a "
            f"{tpu_slice.chips_per_host}-chip host fit below 65536"
        )
    return {
        "TPU_VISIBLE_CHIPS": str(chip),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": process_bounds(tpu_slice),
        "TPU_PROCESS_ADDRESSES": process_addresses(tpu_slice, hostnames, base_port),
        "TPU_PROCESS_PORT": str(base_port + chip),
        "CLOUD_TPU_TASK_ID": str(task_id(tpu_slice, worker_id, chip)),
    }


def hostnames_from_env(env: Mapping[str, str]) -> list[str]:
    """``TPU_WORKER_HOSTNAMES`` (set by the GKE TPU webhook on multi-host pods) as a list; empty if unset."""
    raw = env.get("TPU_WORKER_HOSTNAMES", "").strip()
    return [h.strip() for h in raw.split(",") if h.strip()] if raw else []


# ---- Multislice ---------------------------------------------------------------------------------------------


def megascale_env(
    coordinator_host: str, num_slices: int, slice_index: int, chip: int = 0, port: int = TPU_MEGASCALE_PORT
) -> dict[str, str]:
    """``MEGASCALE_*`` of the process that drives ``chip`` of its host on slice ``slice_index`` of ``num_slices``;
    empty for one slice. ``coordinator_host`` is host 0 of slice 0, whose chip-0 process coordinates.

    Ray's own helper (``ray.util.tpu.get_tpu_coordinator_env_vars``) with the coordinator's port in its address, and
    each process's own ``MEGASCALE_PORT`` (``port + chip``), as Ray 2.60 does for TorchTPU
    (``ray/train/torch/config.py``: ``build_address(master_addr, coordinator_port)``, then
    ``_set_tpu_multislice_env_vars`` "to prevent port bind collisions when multiple workers share a single TPU
    host"). The address carries the port because libtpu "otherwise appends each process's own MEGASCALE_PORT"
    (torch_tpu 0.2.0 ``_internal/distributed/device_mesh.py``), which is only the coordinator's on chip 0.
    """
    if num_slices <= 1:
        return {}
    from ray.util.tpu import get_tpu_coordinator_env_vars  # pure helper; imported lazily (Ray is heavy)

    coordinator = f"{coordinator_host}:{xla_megascale_port(0, port)}"
    env = get_tpu_coordinator_env_vars(coordinator, num_slices, slice_index, str(xla_megascale_port(0, port)))
    out = {str(k): str(v) for k, v in env.items()}
    out["MEGASCALE_PORT"] = str(xla_megascale_port(chip, port))
    return out


# ---- torch_tpu ----------------------------------------------------------------------------------------------


def torch_tpu_topology(tpu_slice: TpuSlice) -> str:
    """``TORCH_TPU_TOPOLOGY``: the whole slice's chip grid padded to three dims (``4x4`` -> ``4,4,1``), with the
    devices per chip appended where a chip has two (tpu7x ``2x2x1`` -> ``2,2,1,2``), as torch_tpu 0.2.0 writes a
    host's own (``_internal/utils/hardware.py``, ``_V7_TOPOLOGY``). On multi-host "only a topology supplied from
    the outside describes the whole slice" (``set_tpu_launch_env``), so this one is always supplied.

    Ray releases after 2.60 ship this as ``ray._private.accelerators.tpu.normalize_torchtpu_topology``; it is
    called when present, and this same form is written otherwise (Ray 2.60 has no such helper).
    """
    from tpuray.workloads._ray_compat import normalize_torchtpu_topology

    ray_form = normalize_torchtpu_topology(tpu_slice.topology, tpu_slice.pod_type)
    if ray_form is not None:  # pragma: no cover - not in Ray 2.60
        return ray_form
    dims = ",".join(map(str, tpu_slice.dims))
    return dims + (f",{tpu_slice.spec.devices_per_chip}" if tpu_slice.spec.devices_per_chip > 1 else "")


@dataclass(frozen=True)
class DeviceSeat:
    """Where one TorchTPU process (one rank) runs: its host and its device on that host."""

    host: str
    """The host's address as the other hosts reach it (a pod IP, or a ``TPU_WORKER_HOSTNAMES`` entry)."""
    worker_id: int
    """The host's index in its slice (``TPU_WORKER_ID``, the ``ray.io/tpu-worker-id`` node label)."""
    device: int
    """The process's device on its host, 0 .. devices per host - 1 (Ray's ``LOCAL_RANK`` on that host)."""


def host_major_seats(tpu_slice: TpuSlice, hostnames: Sequence[str]) -> list[DeviceSeat]:
    """The slice's seats in torch_tpu's own launcher order: hosts as listed (worker-id order), then devices
    (``for host in hosts for i in range(devices_per_host)``, ``build_slicebuilder_addresses``). A single host is
    ``localhost``."""
    hosts = list(hostnames) if tpu_slice.multi_host else ["localhost"]
    if len(hosts) != tpu_slice.hosts:
        raise ValueError(f"{tpu_slice} has {tpu_slice.hosts} hosts but {len(hosts)} hostnames were given")
    per_host = RUNTIMES["torch_tpu"].devices_per_host(tpu_slice)
    return [DeviceSeat(h, w, d) for w, h in enumerate(hosts) for d in range(per_host)]


def torch_tpu_env(
    tpu_slice: TpuSlice, seats: Sequence[DeviceSeat], port: int = TPU_SLICEBUILDER_PORT
) -> dict[str, str]:
    """The TorchTPU variables every rank of one slice shares, ``seats`` in the ranks' order within the slice.

    ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` has one ``host:port`` per rank, the same list on every rank, entry ``r``
    the address rank ``r`` listens on: its host, at ``port`` + its device (torch_tpu 0.2.0
    ``_internal/distributed/distributed.py``). torch_tpu's own launcher lists hosts then devices
    (:func:`host_major_seats`); Ray 2.60 orders a slice's ranks by the worker actors' creation only
    (``WorkerGroup._sort_workers_by_tpu_pod_name`` sorts by ``TPU_NAME``, the same on every host of a slice), so
    the list follows the ranks: only then is ``address[RANK]`` on the rank's own host. ``TORCH_TPU_TOPOLOGY`` is
    :func:`torch_tpu_topology`; ``TORCH_TPU_DEVICES_PER_HOST``, ``TORCH_TPU_BASE_PORT`` and ``NNODES`` are what
    ``set_tpu_launch_env`` would read or derive from the same facts.

    Raises ``ValueError`` when the seats are not one per device of the slice.
    """
    per_host = RUNTIMES["torch_tpu"].devices_per_host(tpu_slice)
    if len(seats) != per_host * tpu_slice.hosts:
        raise ValueError(f"{tpu_slice} has {per_host * tpu_slice.hosts} devices but {len(seats)} ranks were given")
    want = {(w, d) for w in range(tpu_slice.hosts) for d in range(per_host)}
    have = {(s.worker_id, s.device) for s in seats}
    if have != want:
        raise ValueError(
            f"the ranks of a {tpu_slice} slice must hold each (host, device) once, hosts 0..{tpu_slice.hosts - 1} "
            f"and devices 0..{per_host - 1}; missing {sorted(want - have)[:4]}, extra {sorted(have - want)[:4]}"
        )
    if not 0 < port <= 65536 - per_host:
        raise ValueError(f"port {port}: must be 1..{65536 - per_host}, so that {per_host} devices' ports fit")
    host_of = {s.worker_id: s.host for s in seats}
    if any(host_of[s.worker_id] != s.host for s in seats) or len(set(host_of.values())) != len(host_of):
        raise ValueError(f"each host of the slice needs one address of its own: {sorted(host_of.items())}")
    return {
        "TORCH_TPU_TOPOLOGY": torch_tpu_topology(tpu_slice),
        "TORCH_TPU_SLICEBUILDER_ADDRESSES": ",".join(f"{s.host}:{port + s.device}" for s in seats),
        "TORCH_TPU_DEVICES_PER_HOST": str(per_host),
        "TORCH_TPU_BASE_PORT": str(port),
        "NNODES": str(tpu_slice.hosts),
    }


# ---- the emulated GKE TPU pod --------------------------------------------------------------------------------


def emulated_host_env(tpu_slice: TpuSlice, slice_name: str, worker_id: int) -> dict[str, str]:
    """What a process on host ``worker_id`` of an emulated slice sees: the GKE TPU webhook's pod variables
    (``TPU_NAME``, ``TPU_WORKER_ID``, and ``TPU_WORKER_HOSTNAMES`` on multi-host slices, named like the
    webhook's ``<slice>-<host>`` headless-service names) and :data:`LOCAL_WORKER_ENV`."""
    env = {"TPU_NAME": slice_name, "TPU_WORKER_ID": str(worker_id), **LOCAL_WORKER_ENV}
    if tpu_slice.multi_host:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(f"{slice_name}-{w}.local" for w in range(tpu_slice.hosts))
    return env


def bounds_size(bounds: str) -> int:
    """How many processes a ``TPU_PROCESS_BOUNDS`` value announces."""
    return math.prod(int(b) for b in bounds.split(","))
