"""Compose a whole tpuray environment from a :class:`~tpuray.components.config.StackConfig`.

:func:`deploy` declares an explicit GCP provider (project and region from the typed config, so the stack needs no
``gcp:project``), the :class:`GkeCluster`, one :class:`TpuSlicePool` per slice pool, the :class:`RayTpuCluster`,
a :class:`KueueQueues` (when ``kueue.enabled``), a :class:`RayTpuJob` for the training entrypoint and a
:class:`StackMonitoring` (dashboard and idle-slice alert, when ``monitoring.enabled``). Names and
inputs depend only on the config and the stack name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from tpuray.components.config import StackConfig
from tpuray.components.config_types import label_value
from tpuray.components.gke_cluster import GkeCluster
from tpuray.components.kueue import KueueQueues
from tpuray.components.planning.from_config import ray_cluster_params, ray_job_params
from tpuray.components.ray_cluster import RayTpuCluster, RayTpuJob
from tpuray.components.stack_args import (
    gke_cluster_args,
    kueue_queues_args,
    ray_tpu_cluster_args,
    ray_tpu_job_args,
    stack_monitoring_args,
    tpu_slice_pool_args,
)
from tpuray.components.stack_monitoring import StackMonitoring
from tpuray.components.tpu_slice_pool import TpuSlicePool

__all__ = ["Stack", "deploy", "resource_labels", "topology_summary"]


@dataclass
class Stack:
    """What :func:`deploy` declared; ``manifests`` are the KubeRay objects as plain dicts."""

    config: StackConfig
    gcp_provider: gcp.Provider
    cluster: GkeCluster
    pools: list[TpuSlicePool]
    ray: RayTpuCluster
    job: RayTpuJob
    kueue: KueueQueues | None = None
    monitoring: StackMonitoring | None = None

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return [m for m in (self.ray.manifest, self.job.manifest) if m is not None]

    @property
    def topology(self) -> dict[str, Any]:
        return topology_summary(self.pools)


def resource_labels(stack_name: str) -> dict[str, str]:
    """GCP labels on every labelled resource; the stack's value is also a Kubernetes label value (both rules)."""
    return {"managed-by": "pulumi", "tpuray-stack": label_value(stack_name)}


def topology_summary(pools: list[TpuSlicePool]) -> dict[str, Any]:
    """Pools, slices, hosts and chips of the stack (the ``topology`` stack output)."""
    rows = [
        {
            key: p.summary[key]
            for key in (
                "pool",
                "generation",
                "topology",
                "pod_type",
                "machine_type",
                "capacity",
                "slices",
                "hosts",
                "chips",
                "chips_per_host",
                "placement",
                "node_pools",
            )
        }
        for p in pools
    ]
    return {
        "pools": rows,
        "total_slices": sum(r["slices"] for r in rows),
        "total_hosts": sum(r["slices"] * r["hosts"] for r in rows),
        "total_chips": sum(r["slices"] * r["chips"] for r in rows),
    }


def deploy(cfg: StackConfig, stack_name: str) -> Stack:
    """Declare the environment ``cfg`` describes."""
    labels = resource_labels(stack_name)
    k8s_labels = {"app.kubernetes.io/managed-by": "pulumi", "tpuray.io/stack": labels["tpuray-stack"]}
    provider = gcp.Provider("gcp", project=cfg.project, region=cfg.region, zone=cfg.zone)
    on_gcp = pulumi.ResourceOptions(providers=[provider])

    cluster = GkeCluster("gke", gke_cluster_args(cfg, labels), on_gcp)
    pools = [
        TpuSlicePool(
            pool.name,
            tpu_slice_pool_args(cfg, pool, cluster.cluster.name, cluster.node_service_account_email, labels),
            on_gcp,  # the node pools' cluster input orders them after the cluster
        )
        for pool in cfg.slice_pools
    ]
    on_both = pulumi.ResourceOptions(providers=[provider, cluster.provider])
    node_pools = [np for p in pools for np in p.node_pools]
    job_params = ray_job_params(cfg, k8s_labels)
    # Ephemeral jobs bring their own cluster: the namespace, identity, token and network policies are declared
    # for that cluster (its pods carry its name), and no long-lived RayCluster is.
    ephemeral = cfg.ray.job_mode == "ephemeral" and job_params.cluster is not None
    cluster_params = job_params.cluster if ephemeral and job_params.cluster else ray_cluster_params(cfg, k8s_labels)
    ray = RayTpuCluster(
        "ray",
        ray_tpu_cluster_args(
            cfg,
            cluster_params,
            declare_cluster=not ephemeral,
            depends_on=[cluster.cluster, cluster.system_pool, *node_pools],
            resource_labels=labels,
        ),
        on_both,
    )
    kueue = None
    job_after: list[pulumi.Resource] = [ray.ray_cluster] if ray.ray_cluster is not None else list(ray.prerequisites)
    if cfg.kueue.enabled:
        kueue = KueueQueues(
            "kueue",
            kueue_queues_args(cfg, k8s_labels, depends_on=[cluster.system_pool, *node_pools, ray.prerequisites[0]]),
            on_both,
        )
        job_after += list(kueue.objects.values())
    job = RayTpuJob(
        "train",
        ray_tpu_job_args(job_params, depends_on=[*job_after, ray.auth_secret]),
        on_both,
    )
    monitoring = None
    if cfg.monitoring.enabled:
        monitoring = StackMonitoring("monitoring", stack_monitoring_args(cfg, stack_name, labels), on_gcp)
    return Stack(
        config=cfg,
        gcp_provider=provider,
        cluster=cluster,
        pools=pools,
        ray=ray,
        job=job,
        kueue=kueue,
        monitoring=monitoring,
    )
