"""Whether the Ray pods a stack plans fit the nodes they are planned onto, before any cloud call.

The head runs on the system pool (``cluster.systemMachineType``), each TPU worker on a host of its pool. A pod asks
for its containers' requests plus the sidecars KubeRay and GKE add (``catalog.machine_types``), and the scheduler
puts it only on a node whose allocatable holds them (kube-scheduler's NodeResourcesFit filter,
kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go); tpuray also leaves
:data:`~tpuray.components.catalog.machine_types.DAEMONSET_HEADROOM` for GKE's own DaemonSets. ``review.pod_fit``
checks the same on the planned manifests; these rules name the config fields to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from tpuray.components.catalog.machine_shapes import machine_type_problem
from tpuray.components.catalog.machine_types import (
    DAEMONSET_HEADROOM,
    GCSFUSE_METADATA_PREFETCH_REQUESTS,
    GCSFUSE_SIDECAR_REQUESTS,
    KUBERAY_AUTOSCALER_REQUESTS,
    Allocatable,
    allocatable,
)
from tpuray.components.catalog.quantity import parse_quantity
from tpuray.components.config.base import Problem

if TYPE_CHECKING:
    from tpuray.components.config.cluster import ClusterConfig
    from tpuray.components.config.ray import RayConfig
    from tpuray.components.config.slice_pool import SlicePoolConfig
    from tpuray.components.config.startup import FuseMountConfig, StartupConfig

__all__ = ["PodOnNode", "file_cache_problems", "head_fit_problems", "head_on_node", "workers_on_nodes"]

_MIB = Decimal(1024 * 1024)


@dataclass(frozen=True)
class PodOnNode:
    """One planned Ray pod, what it requests and the node it is planned onto."""

    pod: str
    """``the Ray head`` or ``a worker of pool <name>``."""
    requests: Allocatable
    machine_type: str
    machine_field: str
    """The config field that chooses the machine type."""
    node: Allocatable | None
    """What the node offers the pod: its allocatable less the DaemonSet headroom; None: unknown machine type."""

    @property
    def memory_room_mib(self) -> int | None:
        return None if self.node is None else self.node.memory_mib - self.requests.memory_mib


def _requests(cpu: str, memory: str, extras: list[Allocatable], tpu: int = 0) -> Allocatable:
    total = Allocatable(
        int((parse_quantity(cpu) * 1000).to_integral_value(rounding="ROUND_CEILING")),
        int((parse_quantity(memory) / _MIB).to_integral_value(rounding="ROUND_CEILING")),
        tpu,
    )
    for e in extras:
        total = total.plus(e)
    return total


def _sidecars(startup: StartupConfig | None) -> list[Allocatable]:
    """The GCS FUSE sidecar (the checkpoint bucket is mounted in every Ray pod) and its metadata prefetch helper."""
    out = [GCSFUSE_SIDECAR_REQUESTS]
    mounts: list[FuseMountConfig] = [] if startup is None else [startup.checkpoint_mount]
    if startup is not None and startup.data_mount is not None:
        mounts.append(startup.data_mount)
    if any(m.metadata_prefetch for m in mounts):
        out.append(GCSFUSE_METADATA_PREFETCH_REQUESTS)
    return out


def _node(machine_type: str, *, image_streaming: bool = False) -> Allocatable | None:
    a = allocatable(machine_type, image_streaming=image_streaming)
    return None if a is None else a.minus(DAEMONSET_HEADROOM)


def head_on_node(
    ray: RayConfig, cluster: ClusterConfig, pools: list[SlicePoolConfig], startup: StartupConfig | None
) -> PodOnNode:
    """The head pod on a system node: the head container, KubeRay's autoscaler where a pool of the shared cluster
    scales (``planning.kuberay.ray_cluster_spec``), the GCS FUSE sidecars."""
    extras = _sidecars(startup)
    if any(p.capacity.in_shared_cluster and p.min_slices < p.slices for p in pools):
        extras.append(KUBERAY_AUTOSCALER_REQUESTS)
    return PodOnNode(
        pod="the Ray head",
        requests=_requests(ray.head_cpu, ray.head_memory, extras),
        machine_type=cluster.system_machine_type,
        machine_field="cluster.systemMachineType",
        node=_node(cluster.system_machine_type),
    )


def workers_on_nodes(
    ray: RayConfig, pools: list[tuple[int, SlicePoolConfig]], startup: StartupConfig | None
) -> list[PodOnNode]:
    """Each pool's worker pod on one of its TPU hosts (the image streaming reservation where the pools stream)."""
    streaming = startup is not None and startup.images.streaming
    out = []
    for i, p in pools:
        s = p.tpu_slice
        out.append(
            PodOnNode(
                pod=f"a worker of pool {p.name}",
                requests=_requests(ray.worker_cpu, ray.worker_memory, _sidecars(startup), s.chips_per_host),
                machine_type=s.machine_type,
                machine_field=f"slicePools[{i}].machineType",
                node=_node(s.machine_type, image_streaming=streaming),
            )
        )
    return out


def _unknown(p: PodOnNode) -> Problem:
    return Problem(
        p.machine_field,
        f"tpuray does not know its vCPUs and memory, so it cannot check that {p.pod} fits: "
        f"{machine_type_problem(p.machine_type)}",
    )


def head_fit_problems(
    ray: RayConfig, cluster: ClusterConfig, pools: list[SlicePoolConfig], startup: StartupConfig | None
) -> list[Problem]:
    """The head's requests against what a system node offers, naming ``ray.headCpu`` / ``ray.headMemory``."""
    head = head_on_node(ray, cluster, pools, startup)
    if head.node is None:
        return [_unknown(head)]
    found = []
    extra = head.requests.minus(_requests(ray.head_cpu, ray.head_memory, []))
    why = (
        f"{cluster.system_machine_type} (cluster.systemMachineType) offers pods {head.node.cpu_millicores}m CPU and "
        f"{head.node.memory_mib}Mi after GKE's reservations and {DAEMONSET_HEADROOM.cpu_millicores}m, "
        f"{DAEMONSET_HEADROOM.memory_mib}Mi kept for its DaemonSets, and the head pod's sidecars ask "
        f"{extra.cpu_millicores}m, {extra.memory_mib}Mi of it"
    )
    room_cpu = head.node.cpu_millicores - extra.cpu_millicores
    room_mem = head.node.memory_mib - extra.memory_mib
    if head.requests.cpu_millicores > head.node.cpu_millicores:
        found.append(
            Problem(
                "ray.headCpu",
                f"{ray.head_cpu} does not fit a system node, and the head would never schedule: {why}; set at most "
                f"{room_cpu}m, or a larger cluster.systemMachineType",
            )
        )
    if head.requests.memory_mib > head.node.memory_mib:
        found.append(
            Problem(
                "ray.headMemory",
                f"{ray.head_memory} does not fit a system node, and the head would never schedule: {why}; set at "
                f"most {room_mem}Mi, or a larger cluster.systemMachineType",
            )
        )
    return found


def _capacity_mib(capacity: str) -> int | None:
    """A ``fileCacheCapacity`` in MiB; None for -1 (unlimited)."""
    if capacity == "-1":
        return None
    return int(capacity[:-2]) * {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}[capacity[-2:]]


def file_cache_problems(
    ray: RayConfig, cluster: ClusterConfig, pools: list[tuple[int, SlicePoolConfig]], startup: StartupConfig
) -> list[Problem]:
    """A file cache in memory (a tmpfs emptyDir, charged to the pod's memory) fits what its node offers beyond the
    pod's own requests, on the head's node and on every pool's hosts: the cache is in every Ray pod
    (``planning.startup.startup_pod_pieces``)."""
    mounts: list[tuple[str, FuseMountConfig]] = [("startup.checkpointMount", startup.checkpoint_mount)]
    if startup.data_mount is not None:
        mounts.append(("startup.dataMount", startup.data_mount))
    pods = [head_on_node(ray, cluster, [p for _, p in pools], startup), *workers_on_nodes(ray, pools, startup)]
    found = []
    for where, m in mounts:
        if m.file_cache_medium != "memory" or m.file_cache_capacity is None:
            continue
        cap = _capacity_mib(m.file_cache_capacity)
        for pod in pods:
            room = pod.memory_room_mib
            if room is None:
                found.append(_unknown(pod))
                continue
            if cap is None or cap > room:
                size = "unlimited (-1)" if cap is None else f"{m.file_cache_capacity} ({cap}Mi)"
                found.append(
                    Problem(
                        f"{where}.fileCacheCapacity",
                        f"{size} in memory (fileCacheMedium: memory) does not fit {pod.pod}: {pod.machine_type} "
                        f"offers it {pod.node.memory_mib if pod.node else 0}Mi after GKE's reservations and the "
                        f"DaemonSet headroom, and the pod requests {pod.requests.memory_mib}Mi, leaving {room}Mi "
                        "for the cache; set fileCacheCapacity to at most "
                        f"{max(room, 0)}Mi, or fileCacheMedium: disk",
                    )
                )
                break  # one problem per mount: the first pod it does not fit
    return found
