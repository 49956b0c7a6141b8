"""The one probe: run on each Ray Train worker before its runtime starts, it reports where Ray put the worker as a
:class:`~tpuray.workloads.placement.seats.Seat`, for every runtime's backend."""

from __future__ import annotations

import os
import socket

from tpuray.components.catalog.names import EMULATED_SLICE_ENV, RAY_SLICE_NAME_LABEL, RAY_WORKER_ID_LABEL
from tpuray.components.catalog.runtimes import RuntimeBackend
from tpuray.workloads.api.runtime import require_runtime
from tpuray.workloads.placement.seats import PlacementError, Seat
from tpuray.workloads.placement.worker_env import hostnames_from_env

__all__ = ["free_port", "probe"]


def probe(index: int, runtime: RuntimeBackend, *, whole_host: bool = False) -> Seat:
    """Where this worker runs: its node's slice and host, its chip (``xla``: exactly one), its node's IP and the
    webhook's hostnames. Checks first that this process's image runs ``runtime`` (a worker image of the other
    runtime fails here, naming the image target to use).

    ``whole_host``: an SPMD worker, which holds all of its host's chips (one process drives them, as
    :func:`~tpuray.workloads.sharding.spmd.spmd_devices` counts them); its seat's ``chip`` is -1, and its chips are
    the ``TPU`` accelerator ids Ray gave it."""
    import ray

    require_runtime(runtime, emulated=bool(os.environ.get(EMULATED_SLICE_ENV)))
    ctx = ray.get_runtime_context()
    labels = {str(k): str(v) for k, v in ctx.get_node_labels().items()}
    chips = ctx.get_accelerator_ids().get("TPU", [])
    if runtime == "xla" and not whole_host and len(chips) != 1:
        raise PlacementError(f"a per-chip worker must hold exactly one TPU chip, got {chips}")
    return Seat(
        actor_index=index,
        slice_index=0,  # set by the driver once it knows every worker's slice
        slice_name=str(labels.get(RAY_SLICE_NAME_LABEL) or os.environ.get("TPU_NAME") or ctx.get_node_id()),
        worker_id=int(labels.get(RAY_WORKER_ID_LABEL, os.environ.get("TPU_WORKER_ID", "0"))),
        chip=int(chips[0]) if runtime == "xla" and not whole_host else -1,
        address=str(ray.util.get_node_ip_address()),  # type: ignore[no-untyped-call]
        hostnames=tuple(hostnames_from_env(os.environ)),
        labels=labels,
    )


def free_port() -> tuple[str, int]:
    """Run on a worker: its node's IP and a TCP port free there, for a process group's rendezvous (the backends
    ask the first worker for it)."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        return str(ray.util.get_node_ip_address()), int(s.getsockname()[1])  # type: ignore[no-untyped-call]
