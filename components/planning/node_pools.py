"""The GKE node pools of one TPU slice pool, as plain data.

Pure Python; imports no Pulumi. :func:`slice_pool_node_pools` turns a :class:`~tpuray.components.config.SlicePoolConfig`
(whose :attr:`tpu_slice` carries every TPU fact) into the node pools ``TpuSlicePool`` declares, so the rules
below are testable without a resource engine:

- multi-host shapes: one node pool per slice (a multi-host pool is atomic), named ``<pool>-<i>``; node count =
  hosts per slice; autoscaling per zone 0..hosts with location policy ANY (the slice is 0 or whole);
- single-host shapes: one node pool named ``<pool>`` of ``slices`` nodes, autoscaling ``minSlices..slices``;
- placement: COMPACT with ``tpu_topology`` (multi-host v4/v5e/v5p/v6e), a HIGH_THROUGHPUT workload policy named
  in ``policy_name`` with no type (multi-host tpu7x), nothing for single-host (GKE rejects a topology there);
- capacity: the fields the pool's capacity type sets (``config.capacity``: spot, reservation affinity, flex-start,
  queued provisioning, max run duration, no auto-repair, starting empty and location policy ANY for flex-start VMs,
  the kubelet's longer graceful node shutdown for spot VMs);
- labels and taints: the pool's :class:`~tpuray.components.planning.scheduling.PoolScheduling`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.names import TPU_TAINT, Taint
from tpuray.components.catalog.resource_names import bounded_name
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import SlicePoolConfig
from tpuray.components.config.capacity import NodeShutdownSpec, ReservationAffinitySpec
from tpuray.components.config.startup import ImagePullConfig
from tpuray.components.planning.scheduling import PoolScheduling
from tpuray.components.planning.startup import node_pool_startup_fields

__all__ = [
    "AutoscalingSpec",
    "NodePoolSpec",
    "NodeShutdownSpec",
    "PlacementSpec",
    "ReservationAffinitySpec",
    "WorkloadPolicySpec",
    "bounded_name",
    "region_of_zone",
    "slice_pool_node_pools",
    "workload_policy_name",
]

_GCE_NAME_MAX = 63


@dataclass(frozen=True)
class AutoscalingSpec:
    min_node_count: int
    max_node_count: int
    location_policy: str | None
    """``ANY`` for multi-host slices (and for flex-start capacity), else the GKE default."""


@dataclass(frozen=True)
class PlacementSpec:
    type: str
    tpu_topology: str | None = None
    policy_name: str | None = None
    """The workload policy's name (tpu7x multi-host); the pool references the ``ResourcePolicy`` by name."""


@dataclass(frozen=True)
class WorkloadPolicySpec:
    """A ``gcp.compute.ResourcePolicy`` with ``workload_policy`` (tpu7x multi-host placement)."""

    name: str
    region: str
    type: str
    accelerator_topology: str


@dataclass(frozen=True)
class NodePoolSpec:
    """One GKE node pool: every field ``gcp.container.NodePool`` needs, as plain values."""

    name: str
    """GKE node pool name (also the Pulumi resource name suffix): ``<pool>-<i>`` or ``<pool>``."""
    pool: str
    """The slice pool (config) this node pool belongs to."""
    slice_index: int | None
    """Index of the slice a multi-host pool serves; None for a single-host pool (it serves every slice)."""
    slices: int
    """Slices this node pool holds at most (1 for a multi-host pool)."""
    tpu_slice: TpuSlice
    machine_type: str
    node_locations: tuple[str, ...] | None
    node_count: int | None
    """Static size (autoscaling off); mutually exclusive with ``initial_node_count``."""
    initial_node_count: int | None
    autoscaling: AutoscalingSpec | None
    placement: PlacementSpec | None
    workload_policy: WorkloadPolicySpec | None
    spot: bool
    flex_start: bool
    max_run_duration: str | None
    reservation_affinity: ReservationAffinitySpec | None
    queued_provisioning: bool
    auto_repair: bool
    capacity: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = (TPU_TAINT,)
    image_streaming: bool = False
    """GKE image streaming (``node_config.gcfs_config``)."""
    secondary_boot_disk: str | None = None
    """A disk image with the worker image preloaded (``secondary_boot_disks``, mode ``CONTAINER_IMAGE_CACHE``)."""
    image_type: str | None = None
    """The node image; set (COS_CONTAINERD) only where streaming or a preloaded image needs it."""
    node_shutdown: NodeShutdownSpec | None = None
    """``node_config.kubelet_config``'s graceful node shutdown (spot pools with the longer period); None: GKE's."""

    @property
    def max_nodes(self) -> int:
        return self.autoscaling.max_node_count if self.autoscaling else int(self.node_count or 0)


def region_of_zone(zone: str) -> str:
    """``us-east5-a`` -> ``us-east5``."""
    return zone.rsplit("-", 1)[0]


def workload_policy_name(cluster_name: str, pool_name: str) -> str:
    """Regional resource policy names are project-wide, so the cluster name is part of it."""
    return bounded_name(f"{cluster_name}-{pool_name}-wp", _GCE_NAME_MAX)


def slice_pool_node_pools(
    pool: SlicePoolConfig,
    zone: str | None,
    cluster_name: str,
    images: ImagePullConfig | None = None,
    *,
    scheduling: PoolScheduling,
) -> list[NodePoolSpec]:
    """The node pools of one slice pool, in a stable order, whose nodes carry ``scheduling``'s labels and taints.

    ``zone`` is the pool's zone (``StackConfig.pool_zone``). Every rule (a zone for multi-host shapes, DWS
    autoscaling, node pool names) lives in the config model, which a ``SlicePoolConfig`` has passed; this function
    only derives.
    """
    s = pool.tpu_slice
    cap = pool.capacity
    workload_policy: WorkloadPolicySpec | None = None
    placement: PlacementSpec | None = None
    if s.placement == "compact":
        placement = PlacementSpec(type="COMPACT", tpu_topology=s.topology)
    elif s.placement == "workload-policy":
        assert zone is not None  # StackConfig guarantees a zone for every multi-host pool
        workload_policy = WorkloadPolicySpec(
            name=workload_policy_name(cluster_name, pool.name),
            region=region_of_zone(zone),
            type="HIGH_THROUGHPUT",
            accelerator_topology=s.topology,
        )
        # tpu7x: the workload policy replaces compact placement ("Creation of a managed instance group with
        # tpu7x-standard-4t machine type with placement policy is not supported. Use workload policy instead.",
        # https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood). GKE stores policyName and
        # tpuTopology with no type (https://github.com/vllm-project/ci-infra/pull/547); pulumi-gcp requires `type`,
        # and an empty one is left out of the request, so the declared inputs match what GKE stores.
        placement = PlacementSpec(type="", tpu_topology=s.topology, policy_name=workload_policy.name)

    max_run = cap.node_pool_max_run_seconds
    common: dict[str, Any] = {
        "pool": pool.name,
        "tpu_slice": s,
        "machine_type": s.machine_type,
        "node_locations": (zone,) if zone else None,
        "workload_policy": workload_policy,
        "placement": placement,
        "spot": cap.spot,
        "flex_start": cap.flex_start,
        "max_run_duration": f"{max_run}s" if max_run is not None else None,
        "reservation_affinity": cap.reservation_affinity,
        "queued_provisioning": cap.queued_provisioning,
        # Flex-start nodes are not repaired in place (GKE docs for flex-start and queued provisioning).
        "auto_repair": not cap.flex_start,
        "capacity": cap.type,
        "node_shutdown": cap.node_shutdown,
        "taints": scheduling.node_taints,
        **node_pool_startup_fields(images),  # the image pull path (planning.startup)
    }

    def sized(min_nodes: int, max_nodes: int, location_policy: str | None) -> dict[str, Any]:
        if not pool.autoscaling.enabled:
            return {"node_count": max_nodes, "initial_node_count": None, "autoscaling": None}
        # Flex-start pools start empty (queued provisioning requires it); others start at their minimum, and the
        # autoscaler adds slices when KubeRay creates their pods.
        initial = 0 if cap.flex_start else min_nodes
        return {
            "node_count": None,
            "initial_node_count": initial,
            "autoscaling": AutoscalingSpec(
                min_node_count=min_nodes, max_node_count=max_nodes, location_policy=location_policy
            ),
        }

    plans: list[NodePoolSpec] = []
    if s.multi_host:
        for i, name in enumerate(pool.node_pool_names):
            kept = i < pool.min_slices  # the first minSlices slices are never scaled away
            plans.append(
                NodePoolSpec(
                    name=name,
                    slice_index=i,
                    slices=1,
                    labels=scheduling.slice_node_labels(name),
                    **common,
                    **sized(s.hosts if kept else 0, s.hosts, "ANY"),
                )
            )
    else:
        plans.append(
            NodePoolSpec(
                name=pool.node_pool_names[0],
                slice_index=None,
                slices=pool.slices,
                labels=scheduling.slice_node_labels(pool.name),
                **common,
                **sized(pool.min_slices * s.hosts, pool.slices * s.hosts, "ANY" if cap.flex_start else None),
            )
        )
    return plans
