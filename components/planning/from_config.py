"""The one mapping from a :class:`~tpuray.components.config.StackConfig` to the KubeRay parameters.

Pure Python; imports no Pulumi. The components, ``tpuray plan`` and the tests all build the stack's RayCluster and
RayJob through these functions, so each default comes from the config model and is written nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tpuray.components.config import Queued, StackConfig
from tpuray.components.names import (
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    RAY_SERVICE_ACCOUNT,
    RAY_WORKER_SERVICE_ACCOUNT,
    SYSTEM_POOL,
)
from tpuray.components.planning.entrypoint import train_entrypoint
from tpuray.components.planning.kuberay import (
    RayClusterParams,
    RayJobParams,
    TpuWorkerGroup,
    ray_cluster_manifest,
    ray_job_manifest,
)
from tpuray.components.planning.kueue import priority_class_name
from tpuray.components.planning.ray_auth import RayAuth, auth_secret_name

__all__ = ["ray_auth", "ray_cluster_params", "ray_job_params", "stack_manifests"]


def ray_auth(cfg: StackConfig) -> RayAuth:
    """The stack's Ray token: a Secret named after the RayCluster, passed by authOptions or by env."""
    return RayAuth(secret_name=auth_secret_name(cfg.cluster.name), auth_options=cfg.ray.uses_auth_options)


def ray_cluster_params(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> RayClusterParams:
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
        groups=tuple(TpuWorkerGroup.from_pool(p) for p in cfg.slice_pools if not isinstance(p.capacity, Queued)),
        head_cpu=r.head_cpu,
        head_memory=r.head_memory,
        worker_cpu=r.worker_cpu,
        worker_memory=r.worker_memory,
        head_node_pool=SYSTEM_POOL,
        checkpoint_bucket=cfg.checkpoint_bucket,
        checkpoint_mount_path=cfg.checkpoints.mount_path,
        labels=dict(labels or {}),
        auth=ray_auth(cfg),
    )


def ray_job_params(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> RayJobParams:
    """The stack's training job: on the stack's running RayCluster (``ray.jobMode: shared``), or with a cluster
    of its own that Kueue admits whole (``ephemeral``)."""
    name = f"{cfg.cluster.name}-train"
    checkpoint_dir = cfg.checkpoints.mount_path  # Ray Train's storage path: the run's checkpoints go to <it>/<name>/
    if cfg.ray.job_mode == "ephemeral":
        return _ephemeral_job_params(cfg, name, checkpoint_dir, labels)
    return RayJobParams(
        name=name,
        namespace=cfg.ray.namespace,
        entrypoint=train_entrypoint(cfg.workload, cfg.workload_pool(), name, checkpoint_dir),
        cluster_selector=cfg.cluster.name,
        shutdown_after_job_finishes=False,
        ttl_seconds_after_finished=0,
        backoff_limit=0,
        labels=dict(labels or {}),
        submitter_image=cfg.ray.image,
        auth=ray_auth(cfg),
    )


def _ephemeral_job_params(
    cfg: StackConfig, name: str, checkpoint_dir: str, labels: Mapping[str, str] | None
) -> RayJobParams:
    """A suspended, queue-labelled RayJob whose own cluster holds the training pool's slices, all of them.

    The worker group is rendered as the shared cluster renders it, at a fixed size: Kueue admits a whole
    cluster (no in-tree autoscaling without workload slicing) and only the pool the entrypoint trains on, since
    every group would hold quota, and a queued pool would wait for capacity, whether the job uses it or not.
    """
    pool = cfg.workload_pool()
    group = replace(TpuWorkerGroup.from_pool(pool), min_replicas=pool.slices, max_replicas=pool.slices)
    cluster = replace(ray_cluster_params(cfg, labels), name=name, groups=(group,))
    job_labels = {
        **(labels or {}),
        KUEUE_QUEUE_NAME_LABEL: cfg.kueue.local_queue,
        KUEUE_PRIORITY_CLASS_LABEL: priority_class_name(cfg.cluster.name, cfg.kueue.priority),
    }
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
        auth=ray_auth(cfg),
    )


def stack_manifests(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every KubeRay manifest the stack declares, in declaration order (the shared RayCluster, then the RayJob)."""
    job = ray_job_manifest(ray_job_params(cfg, labels))
    if cfg.ray.job_mode == "ephemeral":
        return [job]
    return [ray_cluster_manifest(ray_cluster_params(cfg, labels)), job]
