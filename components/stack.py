"""Compose a whole tpuray environment from a :class:`~tpuray.components.config.StackConfig`.

:func:`deploy` declares an explicit GCP provider (project and region from the typed config, so the stack needs no
``gcp:project``), the :class:`GkeCluster`, one :class:`TpuSlicePool` per slice pool, the :class:`RayPlatform` and
the :class:`RayTpuCluster` on it,
a :class:`KueueQueues` (when ``kueue.enabled``), a :class:`RayTpuJob` for the training entrypoint, a
:class:`RayTpuService` for the Serve application (when ``tpuray:serving`` is set) and a
:class:`StackMonitoring` (dashboard and idle-slice alert, when ``monitoring.enabled``). Names and
inputs depend only on the config and the stack name: every component's data comes from
:func:`~tpuray.components.planning.stack_plan.plan_stack`; here it is only linked (providers, the cluster's name
output, the node service account, ``depends_on``) and the Ray token secret is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from tpuray.components.config import NAMESPACE, RAY_TOKEN_CONFIG_KEY, StackConfig
from tpuray.components.config.value_types import checked_ray_token
from tpuray.components.gke_cluster import GkeCluster
from tpuray.components.kueue import KueueQueues, KueueQueuesArgs
from tpuray.components.planning.stack_plan import StackPlan, plan_stack
from tpuray.components.ray_cluster import (
    RayTpuCluster,
    RayTpuClusterArgs,
    RayTpuJob,
    RayTpuJobArgs,
    RayTpuService,
    RayTpuServiceArgs,
)
from tpuray.components.ray_platform import RayPlatform, RayPlatformArgs
from tpuray.components.stack_monitoring import StackMonitoring
from tpuray.components.tpu_slice_pool import TpuSlicePool, TpuSlicePoolArgs
from tpuray.components.tpu_webhook import TpuWebhook, TpuWebhookArgs

__all__ = ["Stack", "deploy", "topology_summary"]


@dataclass
class Stack:
    """What :func:`deploy` declared; ``manifests`` are the KubeRay objects as plain dicts."""

    config: StackConfig
    plan: StackPlan
    """What was declared, as data (:func:`~tpuray.components.planning.stack_plan.plan_stack`)."""
    gcp_provider: gcp.Provider
    cluster: GkeCluster
    pools: list[TpuSlicePool]
    platform: RayPlatform
    """The namespace, policies, token, bucket, identities and the KubeRay operator."""
    ray: RayTpuCluster
    job: RayTpuJob
    kueue: KueueQueues | None = None
    tpu_webhook: TpuWebhook | None = None
    monitoring: StackMonitoring | None = None
    serving: RayTpuService | None = None

    @property
    def manifests(self) -> list[dict[str, Any]]:
        serve = self.serving.manifest if self.serving is not None else None
        return [m for m in (self.ray.manifest, self.job.manifest, serve) if m is not None]

    @property
    def topology(self) -> dict[str, Any]:
        return topology_summary(self.pools)


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
    """Declare the environment ``cfg`` describes: the components of its :class:`StackPlan`, linked."""
    plan = plan_stack(cfg, stack_name)
    provider = gcp.Provider("gcp", project=plan.project, region=plan.region, zone=plan.zone)
    on_gcp = pulumi.ResourceOptions(providers=[provider])

    cluster = GkeCluster("gke", plan.gke, on_gcp)
    pools = [
        TpuSlicePool(
            pool.name,
            TpuSlicePoolArgs(pool.slice_pool, cluster.cluster.name, cluster.node_service_account_email),
            on_gcp,  # the node pools' cluster input orders them after the cluster
        )
        for pool in plan.pools
    ]
    on_both = pulumi.ResourceOptions(providers=[provider, cluster.provider])
    node_pools = [np for p in pools for np in p.node_pools]
    webhook = None
    ray_after: list[pulumi.Resource] = [cluster.cluster, cluster.system_pool, *node_pools]
    if plan.tpu_webhook is not None:
        webhook = TpuWebhook(
            "tpu-webhook", TpuWebhookArgs(plan.tpu_webhook, depends_on=[cluster.cluster, cluster.system_pool]), on_both
        )
        ray_after.append(webhook.release)  # TPU pods are mutated as they are created: the webhook serves first
    # "ray" names both: the platform's children keep their names, and their aliases name the RayTpuCluster "ray"
    # that declared them before the split (ray_platform.py)
    platform = RayPlatform("ray", RayPlatformArgs(plan.ray, auth_token=_ray_token(), depends_on=ray_after), on_both)
    ray = RayTpuCluster("ray", RayTpuClusterArgs(plan.ray, platform, depends_on=ray_after), on_both)
    kueue = None
    job_after: list[pulumi.Resource] = (
        [ray.ray_cluster] if ray.ray_cluster is not None else list(platform.prerequisites)
    )
    if plan.kueue is not None:
        kueue = KueueQueues(
            "kueue",
            KueueQueuesArgs(plan.kueue, depends_on=[cluster.system_pool, *node_pools, platform.namespace_resource]),
            on_both,
        )
        job_after += list(kueue.objects.values())
    job = RayTpuJob("train", RayTpuJobArgs(plan.job, depends_on=[*job_after, platform.auth_secret]), on_both)
    serving = None
    if plan.serving is not None:
        serving = RayTpuService(
            "serve",
            # a queue-labelled RayService needs its LocalQueue first, as the RayJob does
            RayTpuServiceArgs(
                plan.serving, platform, depends_on=[*ray_after, *(kueue.objects.values() if kueue else [])]
            ),
            on_both,
        )
    monitoring = None
    if plan.monitoring is not None:
        monitoring = StackMonitoring("monitoring", plan.monitoring, on_gcp)
    return Stack(
        config=cfg,
        plan=plan,
        gcp_provider=provider,
        cluster=cluster,
        pools=pools,
        platform=platform,
        ray=ray,
        job=job,
        kueue=kueue,
        tpu_webhook=webhook,
        monitoring=monitoring,
        serving=serving,
    )


def _ray_token() -> pulumi.Output[str] | None:
    """``tpuray:rayAuthToken`` if set, held to the token rule (an empty or short token fails the update).

    Secret-bearing: read here with ``get_secret`` only, never part of the (printable) config or plan.
    """
    secret = pulumi.Config(NAMESPACE).get_secret(RAY_TOKEN_CONFIG_KEY)
    return None if secret is None else secret.apply(checked_ray_token)
