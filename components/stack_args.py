"""The one mapping from a :class:`~tpuray.components.config.StackConfig` to each component's ``Args``.

The components take their own types (as pulumi-awsx and pulumi-eks do), so a platform repo can use them without
tpuray's config model; :func:`~tpuray.components.stack.deploy` builds every ``Args`` here. Each default lives in
the config model and nowhere else: no ``Args`` field repeats one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from tpuray.components.config import NAMESPACE, RAY_AUTH_TOKEN_KEY, SlicePoolConfig, StackConfig
from tpuray.components.config_types import checked_ray_token
from tpuray.components.gke_cluster import (
    AuthorizedNetwork,
    ControlPlane,
    GkeClusterArgs,
    Maintenance,
    MaintenanceExclusion,
    MaintenanceWindow,
    Network,
)
from tpuray.components.images import ArtifactRepository, parse_image
from tpuray.components.kueue import KueueQueuesArgs
from tpuray.components.planning.dashboard import dashboard_plan, idle_alert_plan
from tpuray.components.planning.gmp import kueue_monitoring, ray_training_monitoring
from tpuray.components.planning.kuberay import RayClusterParams, RayJobParams
from tpuray.components.planning.kueue import kueue_spec
from tpuray.components.planning.node_pools import slice_pool_node_pools
from tpuray.components.ray_cluster import RayTpuClusterArgs, RayTpuJobArgs
from tpuray.components.stack_monitoring import StackMonitoringArgs
from tpuray.components.tpu_slice_pool import TpuSlicePoolArgs

__all__ = [
    "gke_cluster_args",
    "image_repositories",
    "kueue_queues_args",
    "ray_tpu_cluster_args",
    "ray_tpu_job_args",
    "stack_monitoring_args",
    "tpu_slice_pool_args",
]


def image_repositories(images: Sequence[str]) -> list[ArtifactRepository]:
    """The distinct Artifact Registry repositories the images come from (public images need no grant)."""
    repos = [parse_image(i).artifact_repository for i in images]
    return list(dict.fromkeys(r for r in repos if r is not None))


def gke_cluster_args(cfg: StackConfig, resource_labels: Mapping[str, str] | None = None) -> GkeClusterArgs:
    c, net, m = cfg.cluster, cfg.network, cfg.maintenance
    return GkeClusterArgs(
        project=cfg.project,
        region=cfg.region,
        location=cfg.location,
        cluster=ControlPlane(
            name=c.name,
            release_channel=c.release_channel,
            min_master_version=cfg.master_version,
            private_nodes=c.private_nodes,
            control_plane_endpoint=c.control_plane_endpoint,
            master_authorized_networks=tuple(AuthorizedNetwork(n.cidr, n.name) for n in c.master_authorized_networks),
            deletion_protection=c.deletion_protection,
            node_service_account_id=c.node_service_account_id,
            system_machine_type=c.system_machine_type,
            system_nodes=c.system_nodes,
        ),
        network=Network(
            create=net.create,
            name=net.name,
            subnetwork=net.subnetwork,
            subnet_cidr=net.subnet_cidr,
            pods_cidr=net.pods_cidr,
            services_cidr=net.services_cidr,
            pods_range_name=net.pods_range_name,
            services_range_name=net.services_range_name,
        ),
        maintenance=Maintenance(
            window=MaintenanceWindow(m.window.start, m.window.end, m.window.recurrence) if m.window else None,
            exclusions=tuple(MaintenanceExclusion(e.name, e.start, e.end, e.scope) for e in m.exclusions),
        ),
        ray_operator_addon=cfg.ray.operator == "addon",
        image_repositories=image_repositories([cfg.ray.image, cfg.ray.worker_image or cfg.ray.image]),
        resource_labels=dict(resource_labels or {}),
    )


def tpu_slice_pool_args(
    cfg: StackConfig,
    pool: SlicePoolConfig,
    cluster: pulumi.Input[str],
    service_account: pulumi.Input[str],
    resource_labels: Mapping[str, str] | None = None,
) -> TpuSlicePoolArgs:
    return TpuSlicePoolArgs(
        name=pool.name,
        tpu_slice=pool.tpu_slice,
        slices=pool.slices,
        capacity=pool.capacity.type,
        node_pools=slice_pool_node_pools(pool, cfg.pool_zone(pool), cfg.cluster.name),
        auto_upgrade=pool.auto_upgrade,
        project=cfg.project,
        cluster=cluster,
        location=cfg.location,
        service_account=service_account,
        resource_labels=dict(resource_labels or {}),
    )


def ray_tpu_cluster_args(
    cfg: StackConfig,
    params: RayClusterParams,
    *,
    declare_cluster: bool,
    depends_on: list[pulumi.Resource],
    resource_labels: Mapping[str, str] | None = None,
) -> RayTpuClusterArgs:
    return RayTpuClusterArgs(
        project=cfg.project,
        cluster_name=cfg.cluster.name,
        params=params,
        bucket_location=cfg.checkpoints.location or cfg.region,
        retention_days=cfg.checkpoints.retention_days,
        soft_delete_days=cfg.checkpoints.soft_delete_days,
        versioning=cfg.checkpoints.versioning,
        operator=cfg.ray.operator,
        helm_chart_version=cfg.ray.helm_chart_version,
        resource_labels=dict(resource_labels or {}),
        # secret-bearing: read with get_secret only, never part of the (printable) StackConfig
        auth_token=_ray_token(),
        operator_namespace=cfg.ray.job_api_namespace,
        node_cidr=cfg.network.subnet_cidr,
        monitoring=[
            ray_training_monitoring(
                params.name, params.namespace, params.labels, addon_monitoring=cfg.ray.operator == "addon"
            )
        ],
        depends_on=depends_on,
        declare_cluster=declare_cluster,
    )


def _ray_token() -> pulumi.Output[str] | None:
    """``tpuray:rayAuthToken`` if set, held to the token rule (an empty or short token fails the update)."""
    secret = pulumi.Config(NAMESPACE).get_secret(RAY_AUTH_TOKEN_KEY)
    return None if secret is None else secret.apply(checked_ray_token)


def kueue_queues_args(
    cfg: StackConfig, labels: Mapping[str, str], depends_on: list[pulumi.Resource]
) -> KueueQueuesArgs:
    return KueueQueuesArgs(
        spec=kueue_spec(cfg, labels),
        chart_version=cfg.kueue.chart_version,
        namespace=cfg.kueue.namespace,
        depends_on=depends_on,
        monitoring=kueue_monitoring(cfg.kueue.namespace, labels),
    )


def ray_tpu_job_args(params: RayJobParams, depends_on: list[pulumi.Resource]) -> RayTpuJobArgs:
    return RayTpuJobArgs(params=params, depends_on=depends_on)


def stack_monitoring_args(
    cfg: StackConfig, stack_name: str, resource_labels: Mapping[str, str] | None = None
) -> StackMonitoringArgs:
    return StackMonitoringArgs(
        project=cfg.project,
        dashboard=dashboard_plan(cfg, stack_name),
        idle_alert=idle_alert_plan(cfg, stack_name),
        user_labels=dict(resource_labels or {}),
    )
