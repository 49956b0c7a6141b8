"""The PJRT per-chip environment of one PyTorch/XLA process on a TPU slice.

Pure functions, no torch: they compute the variables torch_xla's own
``torch_xla._internal.tpu.configure_topology(local_rank, local_world_size, base_port)`` would set for one
process per chip, from a :class:`~tpuray.components.topology.TpuSlice` instead of the GCE metadata server
(which GKE pods do not have). Ray sets none of ``TPU_PROCESS_BOUNDS``, ``TPU_CHIPS_PER_PROCESS_BOUNDS``,
``TPU_PROCESS_ADDRESSES``, ``TPU_PROCESS_PORT`` and ``CLOUD_TPU_TASK_ID``, so each Ray worker applies these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpuray.components.topology import TpuSlice

__all__ = [
    "DEFAULT_BASE_PORT",
    "RAY_SUBHOST_VARS",
    "chip_env",
    "hostnames_from_env",
    "process_bounds",
    "process_endpoints",
    "task_id",
]

DEFAULT_BASE_PORT = 8476
"""torch_xla's default first TPU client port on each host; chip ``c`` listens on ``base_port + c``."""

RAY_SUBHOST_VARS = ("TPU_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS")
"""Variables Ray sets for a 1-chip actor (``1,1,1`` each: a standalone chip). They contradict the slice-wide
process bounds, so a per-chip worker removes them before the TPU runtime starts."""


def process_bounds(tpu_slice: TpuSlice) -> str:
    """``TPU_PROCESS_BOUNDS`` for one process per chip: host bounds x chips-per-host bounds, element-wise.

    That product is the slice's topology padded to three dimensions. torch_xla appends ``,2`` on TPU v7
    (two PJRT devices per chip); the catalog records that as ``Generation.devices_per_chip``.
    """
    hb, cb = tpu_slice.host_bounds, tpu_slice.chips_per_host_bounds
    bounds = ",".join(str(h * c) for h, c in zip(hb, cb, strict=True))
    if tpu_slice.spec.devices_per_chip == 2:
        bounds += ",2"
    return bounds


def _worker_addresses(hostnames: Sequence[str]) -> list[str]:
    # torch_xla's get_worker_ips(): a single (or empty) host list means "this host" -> 'localhost'.
    return list(hostnames) if len(hostnames) > 1 else ["localhost"]


def process_endpoints(tpu_slice: TpuSlice, hostnames: Sequence[str], base_port: int = DEFAULT_BASE_PORT) -> str:
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
        raise ValueError(f"base_port {base_port} leaves no room for {tpu_slice.chips_per_host} ports")
    return {
        "TPU_VISIBLE_CHIPS": str(chip),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": process_bounds(tpu_slice),
        "TPU_PROCESS_ADDRESSES": process_endpoints(tpu_slice, hostnames, base_port),
        "TPU_PROCESS_PORT": str(base_port + chip),
        "CLOUD_TPU_TASK_ID": str(task_id(tpu_slice, worker_id, chip)),
    }


def hostnames_from_env(env: Mapping[str, str]) -> list[str]:
    """``TPU_WORKER_HOSTNAMES`` (set by the GKE TPU webhook on multi-host pods) as a list; empty if unset."""
    raw = env.get("TPU_WORKER_HOSTNAMES", "").strip()
    return [h.strip() for h in raw.split(",") if h.strip()] if raw else []
