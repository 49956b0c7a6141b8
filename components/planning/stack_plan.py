"""The one mapping from a :class:`~tpuray.components.config.StackConfig` to what the stack declares.

:func:`plan_stack` returns a :class:`StackPlan`: plain data for every component (the GKE cluster, each TPU slice
pool's :class:`~tpuray.components.planning.pool_plan.PoolPlan`, the KubeRay cluster and job, Kueue, monitoring), the
resource labels and whether the training job brings its own cluster. :func:`~tpuray.components.stack.deploy`
only instantiates components from it, adding the links only a running program has (the cluster's name output, the
node service account, ``depends_on``, the Ray token secret); ``tpuray plan`` reads its pools, dashboard and budget
from the same object. Each default lives in the config model and nowhere else.

Pure Python; imports no Pulumi.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar, cast

from tpuray.components.catalog.images import ArtifactRepository, parse_image
from tpuray.components.catalog.names import (
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    RAY_SERVICE_ACCOUNT,
    RAY_WORKER_SERVICE_ACCOUNT,
    SYSTEM_POOL,
)
from tpuray.components.catalog.resource_names import label_value
from tpuray.components.config import CostConfig, StackConfig
from tpuray.components.planning.component_args import (
    ControlPlane,
    GkeClusterArgs,
    KueuePlan,
    Maintenance,
    Network,
    RayClusterPlan,
    StackMonitoringArgs,
    TpuWebhookPlan,
)
from tpuray.components.planning.dashboard import dashboard_plan, idle_alert_plan
from tpuray.components.planning.entrypoint import train_entrypoint
from tpuray.components.planning.gmp import kueue_monitoring, ray_pod_monitoring
from tpuray.components.planning.kuberay import (
    RayClusterParams,
    RayJobParams,
    ray_cluster_manifest,
    ray_job_manifest,
)
from tpuray.components.planning.kueue import kueue_spec, priority_class_name
from tpuray.components.planning.pool_plan import PoolPlan, kueue_entries, pool_plans
from tpuray.components.planning.ray_auth import RayAuth, auth_secret_name
from tpuray.components.planning.serving import ServingPlan, ray_service_manifest, serving_plan
from tpuray.components.planning.startup import startup_plan

__all__ = ["StackPlan", "image_repositories", "plan_stack", "resource_labels"]


@dataclass(frozen=True)
class StackPlan:
    """Everything the stack's program declares, as plain data, in the components' own types."""

    stack: str
    project: str
    """The GCP provider's project."""
    region: str
    """The GCP provider's region."""
    zone: str | None
    """The GCP provider's default zone."""
    resource_labels: dict[str, str]
    """GCP labels on every labelled resource."""
    k8s_labels: dict[str, str]
    """Kubernetes labels on every object tpuray renders."""
    gke: GkeClusterArgs
    pools: tuple[PoolPlan, ...]
    """One per slice pool, in config order: each ``TpuSlicePool`` declares a pool's ``slice_pool``, and the
    RayCluster's groups and the Kueue objects are made from them."""
    ray: RayClusterPlan
    """The Ray namespace, identity, bucket and policies, and the long-lived RayCluster unless ``ephemeral``."""
    ephemeral: bool
    """The training job brings its own cluster (``ray.jobMode: ephemeral``): no long-lived RayCluster."""
    job: RayJobParams
    """The training RayJob."""
    kueue: KueuePlan | None
    """Kueue and its queues (``kueue.enabled``)."""
    tpu_webhook: TpuWebhookPlan | None
    """The KubeRay TPU webhook (``ray.tpuWebhook``; by default when a slice pool is multi-host)."""
    monitoring: StackMonitoringArgs | None
    """The dashboard and idle-slice alert (``monitoring.enabled``)."""
    cost: CostConfig
    """The budget ``tpuray plan`` holds the declared pools to (declares nothing)."""
    serving: ServingPlan | None = None
    """The Serve application's RayService (``tpuray:serving``), on a pool the shared RayCluster leaves out."""

    @property
    def manifests(self) -> list[dict[str, Any]]:
        """Every KubeRay manifest, in declaration order: the shared RayCluster (unless ephemeral), the RayJob, then
        the RayService (``tpuray:serving``)."""
        job = ray_job_manifest(self.job)
        out = [job] if self.ephemeral else [ray_cluster_manifest(self.ray.params), job]
        return out + ([ray_service_manifest(self.serving)] if self.serving is not None else [])


def resource_labels(stack_name: str) -> dict[str, str]:
    """GCP labels on every labelled resource; the stack's value is also a Kubernetes label value (both rules)."""
    return {"managed-by": "pulumi", "tpuray-stack": label_value(stack_name)}


def image_repositories(images: Sequence[str]) -> list[ArtifactRepository]:
    """The distinct Artifact Registry repositories the images come from (public images need no grant)."""
    repos = [parse_image(i).artifact_repository for i in images]
    return list(dict.fromkeys(r for r in repos if r is not None))


def plan_stack(config: StackConfig, stack_name: str) -> StackPlan:
    """Everything the stack ``stack_name`` declares from ``config``."""
    labels = resource_labels(stack_name)
    k8s_labels = {"app.kubernetes.io/managed-by": "pulumi", "tpuray.io/stack": labels["tpuray-stack"]}
    pools = pool_plans(config, labels)
    job = _ray_job(config, pools, k8s_labels)
    # Ephemeral jobs bring their own cluster: the namespace, identity, token and network policies are declared
    # for that cluster (its pods carry its name), and no long-lived RayCluster is.
    ephemeral = config.ray.job_mode == "ephemeral" and job.cluster is not None
    cluster = job.cluster if ephemeral and job.cluster else _ray_cluster(config, pools, k8s_labels)
    ray = _ray(config, cluster, declare_cluster=not ephemeral, labels=labels)
    return StackPlan(
        stack=stack_name,
        project=config.project,
        region=config.region,
        zone=config.zone,
        resource_labels=labels,
        k8s_labels=k8s_labels,
        gke=_gke(config, labels),
        pools=pools,
        ray=ray,
        ephemeral=ephemeral,
        job=job,
        kueue=_kueue(config, pools, k8s_labels) if config.kueue.enabled else None,
        tpu_webhook=_tpu_webhook(config),
        monitoring=(
            StackMonitoringArgs(
                project=config.project,
                dashboard=dashboard_plan(config, stack_name),
                idle_alert=idle_alert_plan(config, stack_name),
                user_labels=dict(labels),
            )
            if config.monitoring.enabled
            else None
        ),
        cost=config.cost,
        serving=serving_plan(
            config.serving,
            pools,
            _ray_cluster(config, pools, k8s_labels),
            _queued(config, k8s_labels),
            ray.network,
            config.cluster.name,
        ),
    )


D = TypeVar("D")


def _fields_of(target: Callable[..., D], source: object, **given: Any) -> D:
    """``target`` (a plain dataclass) from the same-named attributes of ``source``, with ``given`` ones set: the
    component's inputs are the config's values, not copies written out field by field."""
    names = [f.name for f in fields(cast(Any, target)) if f.name not in given]
    return target(**{n: getattr(source, n) for n in names}, **given)


def _gke(cfg: StackConfig, labels: Mapping[str, str]) -> GkeClusterArgs:
    c, m = cfg.cluster, cfg.maintenance
    return GkeClusterArgs(
        project=cfg.project,
        region=cfg.region,
        location=cfg.location,
        cluster=_fields_of(
            ControlPlane,
            c,
            min_master_version=c.min_master_version,
            master_authorized_networks=tuple(c.master_authorized_networks),
        ),
        network=_fields_of(Network, cfg.network),
        maintenance=Maintenance(window=m.window, exclusions=tuple(m.exclusions)),
        image_repositories=image_repositories([cfg.ray.image, cfg.ray.worker_image or cfg.ray.image]),
        resource_labels=dict(labels),
        # only the TPU node pools stream, and they pull the worker image (planning.startup)
        streamed_image_projects=tuple(
            r.project
            for r in image_repositories([cfg.ray.worker_image or cfg.ray.image])
            if cfg.startup.images.streaming
        ),
    )


def _ray(
    cfg: StackConfig, params: RayClusterParams, *, declare_cluster: bool, labels: Mapping[str, str]
) -> RayClusterPlan:
    return RayClusterPlan(
        project=cfg.project,
        cluster_name=cfg.cluster.name,
        params=params,
        bucket_location=cfg.checkpoints.location or cfg.region,
        retention_days=cfg.checkpoints.retention_days,
        soft_delete_days=cfg.checkpoints.soft_delete_days,
        versioning=cfg.checkpoints.versioning,
        helm_chart_version=cfg.ray.helm_chart_version,
        resource_labels=dict(labels),
        operator_namespace=cfg.ray.job_api_namespace,
        node_cidr=cfg.network.subnet_cidr,
        monitoring=(ray_pod_monitoring(params.name, params.namespace, params.labels),),
        declare_cluster=declare_cluster,
        tpu_webhook=_tpu_webhook(cfg) is not None,
        compile_cache_bucket=_own_cache_bucket(cfg),
        data_bucket=_data_bucket(cfg),
    )


def _tpu_webhook(cfg: StackConfig) -> TpuWebhookPlan | None:
    """The webhook, where the stack asks for it or (by default) has a multi-host pool: Ray finds a multi-host
    slice's hosts only through the variables it injects (TPU_NAME, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES)."""
    w = cfg.ray.tpu_webhook
    wanted = w.enabled if w.enabled is not None else any(p.tpu_slice.multi_host for p in cfg.slice_pools)
    if not wanted:
        return None
    cm = w.cert_manager
    return TpuWebhookPlan(
        chart_version=w.chart_version,
        namespace=w.namespace,
        cert_manager_chart_version=cm.chart_version if cm.install else None,
    )


def _data_bucket(cfg: StackConfig) -> str | None:
    """The data bucket, when it is in the stack's project (another project's owner grants it)."""
    d = cfg.startup.data_mount
    return d.bucket if d is not None and (d.bucket_project or cfg.project) == cfg.project else None


def _own_cache_bucket(cfg: StackConfig) -> str | None:
    """A compile cache bucket of its own in the stack's project: the Ray service account is granted on it."""
    cache = startup_plan(cfg).compile_cache
    c = cfg.startup.compile_cache
    in_project = (c.bucket_project or cfg.project) == cfg.project
    return cache.bucket if cache is not None and cache.own_bucket and in_project else None


def _kueue(cfg: StackConfig, pools: Sequence[PoolPlan], k8s_labels: Mapping[str, str]) -> KueuePlan:
    return KueuePlan(
        spec=kueue_spec(cfg, kueue_entries(pools), k8s_labels),
        chart_version=cfg.kueue.chart_version,
        namespace=cfg.kueue.namespace,
        monitoring=tuple(kueue_monitoring(cfg.kueue.namespace, k8s_labels)),
    )


def _ray_auth(cfg: StackConfig) -> RayAuth:
    """The stack's Ray token: a Secret named after the RayCluster, passed by authOptions or by env."""
    return RayAuth(secret_name=auth_secret_name(cfg.cluster.name), auth_options=cfg.ray.uses_auth_options)


def _ray_cluster(cfg: StackConfig, pools: Sequence[PoolPlan], labels: Mapping[str, str]) -> RayClusterParams:
    """The stack's RayCluster: a CPU head on the system pool and one TPU worker group per slice pool.

    Queued pools are left out: only a ProvisioningRequest makes GKE create their nodes, and only a Kueue-admitted
    RayJob brings one (``ray.jobMode: ephemeral``); a long-lived cluster's pods would wait forever.
    """
    r = cfg.ray
    return RayClusterParams(
        name=cfg.cluster.name,
        namespace=r.namespace,
        ray_version=r.version,
        head_image=r.image,
        worker_image=r.worker_image or r.image,
        service_account=RAY_SERVICE_ACCOUNT,
        worker_service_account=RAY_WORKER_SERVICE_ACCOUNT,
        # the serving pool's slices are the RayService's (config: serving and training share no pool)
        groups=tuple(
            p.worker_group
            for p in pools
            if p.worker_group is not None and not (cfg.serving is not None and p.name == cfg.serving.slice_pool)
        ),
        head_cpu=r.head_cpu,
        head_memory=r.head_memory,
        worker_cpu=r.worker_cpu,
        worker_memory=r.worker_memory,
        head_node_pool=SYSTEM_POOL,
        checkpoint_bucket=cfg.checkpoint_bucket,
        checkpoint_mount_path=cfg.checkpoints.mount_path,
        labels=dict(labels),
        auth=_ray_auth(cfg),
        backend=cfg.workload.backend,
        startup=startup_plan(cfg),
    )


def _queued(cfg: StackConfig, labels: Mapping[str, str]) -> dict[str, str]:
    """``labels``, with Kueue's LocalQueue and priority class where the stack has Kueue: Kueue admits a RayJob or a
    RayService (its chart's default frameworks include ``ray.io/rayservice``, kueue v0.19.2
    charts/kueue/values.yaml) only when it names a queue."""
    if not cfg.kueue.enabled:
        return dict(labels)
    return {
        **labels,
        KUEUE_QUEUE_NAME_LABEL: cfg.kueue.local_queue,
        KUEUE_PRIORITY_CLASS_LABEL: priority_class_name(cfg.cluster.name, cfg.kueue.priority),
    }


def _ray_job(cfg: StackConfig, pools: Sequence[PoolPlan], labels: Mapping[str, str]) -> RayJobParams:
    """The stack's training job: on the stack's running RayCluster (``ray.jobMode: shared``), or with a cluster
    of its own that Kueue admits whole (``ephemeral``)."""
    name = f"{cfg.cluster.name}-train"
    checkpoint_dir = cfg.checkpoints.mount_path  # Ray Train's storage path: the run's checkpoints go to <it>/<name>/
    if cfg.ray.job_mode == "ephemeral":
        return _ephemeral_job(cfg, pools, name, checkpoint_dir, labels)
    return RayJobParams(
        name=name,
        namespace=cfg.ray.namespace,
        entrypoint=train_entrypoint(cfg.workload, cfg.workload_pool(), name, checkpoint_dir),
        cluster_selector=cfg.cluster.name,
        shutdown_after_job_finishes=False,
        ttl_seconds_after_finished=0,
        backoff_limit=0,
        labels=dict(labels),
        submitter_image=cfg.ray.image,
        auth=_ray_auth(cfg),
    )


def _ephemeral_job(
    cfg: StackConfig, pools: Sequence[PoolPlan], name: str, checkpoint_dir: str, labels: Mapping[str, str]
) -> RayJobParams:
    """A suspended, queue-labelled RayJob whose own cluster holds the training pool's slices, all of them.

    The worker group is rendered as the shared cluster renders it, at a fixed size: Kueue admits a whole
    cluster (no in-tree autoscaling without workload slicing) and only the pool the entrypoint trains on, since
    every group would hold quota, and a queued pool would wait for capacity, whether the job uses it or not.
    """
    pool = cfg.workload_pool()
    [trained] = [p for p in pools if p.name == pool.name]
    cluster = replace(_ray_cluster(cfg, pools, labels), name=name, groups=(trained.job_group(),))
    job_labels = _queued(cfg, labels)
    return RayJobParams(
        name=name,
        namespace=cfg.ray.namespace,
        entrypoint=train_entrypoint(cfg.workload, pool, name, checkpoint_dir),
        cluster=cluster,
        shutdown_after_job_finishes=True,
        ttl_seconds_after_finished=cfg.ray.job_ttl_seconds,
        backoff_limit=0,
        labels=job_labels,
        suspend=True,
        submitter_image=cfg.ray.image,
        auth=_ray_auth(cfg),
    )
