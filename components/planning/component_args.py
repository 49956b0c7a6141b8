"""The plain-data inputs of the components, so the stack plan (:mod:`tpuray.components.planning.stack_plan`) can
hold them without importing Pulumi.

Each component keeps one typed ``Args`` in its own module (``GkeClusterArgs``, ``TpuSlicePoolArgs``, ...). Where
that ``Args`` needs nothing but data it lives here whole and the component module re-exports it; where it also
needs a Pulumi ``Input`` (the cluster's name output, a service account, ``depends_on``, the Ray token secret), the
plain part lives here (``SlicePoolPlan``, ``RayClusterPlan``, ``KueuePlan``) and ``deploy()`` adds the links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.images import ArtifactRepository
from tpuray.components.catalog.runtimes import union_ports
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.gke_cluster_types import AuthorizedNetwork, MaintenanceExclusion, MaintenanceWindow
from tpuray.components.planning.dashboard import AlertPlan, DashboardPlan
from tpuray.components.planning.kuberay import RayClusterParams
from tpuray.components.planning.kueue import KueueSpec
from tpuray.components.planning.network_policy import NetworkPolicyParams
from tpuray.components.planning.node_pools import NodePoolSpec

__all__ = [
    "AuthorizedNetwork",
    "ControlPlane",
    "GkeClusterArgs",
    "KueuePlan",
    "Maintenance",
    "MaintenanceExclusion",
    "MaintenanceWindow",
    "Network",
    "RayClusterPlan",
    "SlicePoolPlan",
    "StackMonitoringArgs",
    "TpuWebhookPlan",
]


@dataclass(frozen=True)
class ControlPlane:
    """The cluster itself: name, version, endpoint access and the CPU system pool."""

    name: str
    release_channel: str
    min_master_version: str | None
    """The alias requested (``cluster.minMasterVersion``), or None: the release channel's default. Never the
    pools' floor (``StackConfig.required_master_version``): a floor is a bound to check, and GKE creates a cluster
    only at a version it offers now."""
    private_nodes: bool
    control_plane_endpoint: str
    """``public`` (limited to ``master_authorized_networks``), ``private`` or ``dns``."""
    master_authorized_networks: tuple[AuthorizedNetwork, ...]
    deletion_protection: bool
    node_service_account_id: str
    system_machine_type: str
    system_nodes: int


@dataclass(frozen=True)
class Network:
    """A new VPC and subnet (``create``), or an existing ``name``/``subnetwork`` with its secondary ranges."""

    create: bool
    name: str | None
    subnetwork: str | None
    subnet_cidr: str
    pods_cidr: str
    services_cidr: str
    pods_range_name: str
    services_range_name: str


@dataclass(frozen=True)
class Maintenance:
    """When GKE may upgrade the cluster and nodes; neither set leaves GKE's default (any time)."""

    window: MaintenanceWindow | None
    exclusions: tuple[MaintenanceExclusion, ...]

    @property
    def declared(self) -> bool:
        return self.window is not None or bool(self.exclusions)


@dataclass
class GkeClusterArgs:
    """Inputs of ``GkeCluster``: all plain data, so the stack plan holds them whole."""

    project: str
    region: str
    location: str
    """The region (regional cluster) or a zone (zonal cluster)."""
    cluster: ControlPlane
    network: Network
    maintenance: Maintenance
    image_repositories: list[ArtifactRepository]
    """Artifact Registry repositories of the stack's images: the nodes may read these and no others."""
    resource_labels: dict[str, str] = field(default_factory=dict)
    streamed_image_projects: tuple[str, ...] = ()
    """The projects whose images the TPU nodes stream (``startup.images.streaming``): the node service account gets
    ``IMAGE_STREAMING_NODE_ROLE`` in each, and in no project where nothing streams."""


@dataclass(frozen=True)
class SlicePoolPlan:
    """One TPU slice pool as ``TpuSlicePool`` declares it: everything but the cluster and service account links."""

    name: str
    """The slice pool's name (``tpuray.io/pool`` on its nodes)."""
    tpu_slice: TpuSlice
    """The slice shape: the single source of every TPU fact."""
    slices: int
    """Most slices the pool holds."""
    min_slices: int
    """Slices the pool keeps (its autoscaling minimum, else ``slices``)."""
    capacity: str
    """The capacity type's name, for the summary (the node pool specs carry its settings)."""
    zone: str | None
    """The zone of the pool's nodes."""
    node_pools: tuple[NodePoolSpec, ...]
    """What to declare, from :func:`~tpuray.components.planning.node_pools.slice_pool_node_pools`."""
    auto_upgrade: bool
    project: str
    location: str
    """The cluster's location (region or zone)."""
    resource_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RayClusterPlan:
    """What ``RayPlatform`` and ``RayTpuCluster`` declare, as data: everything but the Ray token and what their
    children wait for."""

    project: str
    cluster_name: str
    """The GKE cluster's configured name (names the Google service account)."""
    params: RayClusterParams
    """The RayCluster, as pure data (names, images, TPU worker groups): the shared cluster, or the ephemeral job's
    own cluster when ``declare_cluster`` is off (its namespace, identity and policies are declared for it)."""
    bucket_location: str
    retention_days: int
    """Delete checkpoints older than this many days (0 keeps them)."""
    helm_chart_version: str
    """KubeRay, installed from its Helm chart (the config refuses the GKE Ray add-on:
    :func:`tpuray.components.catalog.cloud_limits.ray_addon_problem`)."""
    soft_delete_days: int
    """Deleted or overwritten checkpoints stay restorable this long (GCS soft delete, 7-90 days)."""
    versioning: bool
    resource_labels: dict[str, str] = field(default_factory=dict)
    operator_namespace: str | None = None
    """Where the KubeRay operator runs in the cluster; its pods may call the head's job API (RayJob status)."""
    node_cidr: str | None = None
    """The nodes' subnet range: Ray pods may reach the TPU device plugin's metrics port there."""
    monitoring: tuple[dict[str, Any], ...] = ()
    """Managed Prometheus objects for the cluster's training metrics (:mod:`tpuray.components.planning.gmp`)."""
    compile_cache_bucket: str | None = None
    """A compile cache bucket other than the checkpoint bucket, in the stack's project: the Ray service account
    gets the checkpoint role on it too (config.startup)."""
    data_bucket: str | None = None
    """The training data bucket (``startup.dataMount``) in the stack's project: the Ray service account reads it."""
    declare_cluster: bool = True
    """Declare the long-lived RayCluster; off when every job brings its own (``ray.jobMode: ephemeral``), which
    still needs the namespace, identity and bucket declared here."""
    tpu_webhook: bool = False
    """The stack installs the KubeRay TPU webhook (``TpuWebhook``) before the Ray pods."""

    @property
    def network(self) -> NetworkPolicyParams:
        """The NetworkPolicy parameters of the cluster's pods: its TPU groups' runtime ports under its backend."""
        p = self.params
        return NetworkPolicyParams(
            namespace=p.namespace,
            cluster=p.name,
            runtime_ranges=tuple(union_ports((g.tpu_slice for g in p.groups), p.backend)),
            operator_namespace=self.operator_namespace,
            labels=p.labels,
            node_cidr=self.node_cidr,
        )


@dataclass(frozen=True)
class TpuWebhookPlan:
    """What ``TpuWebhook`` declares: the KubeRay TPU webhook's chart, and cert-manager's unless the cluster has it."""

    chart_version: str
    namespace: str
    cert_manager_chart_version: str | None
    """None: cert-manager is already in the cluster (``ray.tpuWebhook.certManager.install: false``)."""


@dataclass(frozen=True)
class KueuePlan:
    """What ``KueueQueues`` declares, as data: everything but what its children wait for."""

    spec: KueueSpec
    """The queue objects, as pure data."""
    chart_version: str
    namespace: str
    monitoring: tuple[dict[str, Any], ...] = ()
    """Managed Prometheus collection of Kueue's controller metrics (:func:`tpuray.components.planning.gmp.
    kueue_monitoring`), declared after the release (its chart ships the metrics-reader ClusterRole)."""


@dataclass
class StackMonitoringArgs:
    """Inputs of ``StackMonitoring``."""

    project: str
    dashboard: DashboardPlan
    idle_alert: AlertPlan | None = None
    user_labels: dict[str, str] | None = None
    """Labels of the alert policy (dashboards take none here)."""
