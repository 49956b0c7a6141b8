"""The KubeRay ``ray.io/v1`` RayService of a stack's Serve application, as a plain dict.

Pure Python; imports no Pulumi. The RayService's ``rayClusterConfig`` is the stack's own RayCluster spec
(:func:`~tpuray.components.planning.kuberay.ray_cluster_spec`: the same head, token, mounts and hardening) with one
worker group: the serving pool's :class:`~tpuray.components.planning.kuberay.TpuWorkerGroup` from its
:class:`~tpuray.components.planning.pool_plan.PoolPlan`, sized in whole slices, so its node selector, tolerations,
``numOfHosts``, ``google.com/tpu``, Ray labels and the TPU webhook's pod label are those of training on that pool.

Its pods are a network identity of their own: they carry the RayService's name as tpuray's Ray pod label
(``tpuray.io/ray-cluster: <service>``), and its own NetworkPolicies
(:func:`~tpuray.components.planning.network_policy.ray_service_policies`: Ray's and the serving pool's runtime ports
among its own pods, Managed Prometheus's scrape, the operator's calls to its head's dashboard) and PodMonitoring
select that label. So a serving pod is no Ray peer of a training pod: neither reaches the other's GCS, object store or
workers. The namespace's default deny and egress (DNS, the metadata server, HTTPS out) cover them as every pod. Serve's
HTTP port (8000) gets no ingress rule: the least is none, since no client of the stack's is known (``kubectl
port-forward`` reaches it, and a Gateway's proxies need a rule naming their subnet, which tpuray does not know).

The upgrade strategy is KubeRay v1.7's ``spec.upgradeStrategy``
(``ray-operator/apis/ray/v1/rayservice_types.go`` at v1.7.0): ``NewClusterWithIncrementalUpgrade`` takes its step as
``maxSurgePercent`` and ``stepSizePercent`` of the Serve capacity, a whole number of slices by the config's rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tpuray.components.catalog.names import RAY_SERVE_HTTP_PORT
from tpuray.components.catalog.runtimes import union_ports
from tpuray.components.config.serving import INCREMENTAL, MAX_RAY_SERVICE_NAME, ServingConfig, UpgradeType
from tpuray.components.planning.gmp import ray_pod_monitoring
from tpuray.components.planning.kuberay import API_VERSION, RayClusterParams, TpuWorkerGroup, ray_cluster_spec
from tpuray.components.planning.kuberay_checks import check_ray_cluster_spec, raise_problems
from tpuray.components.planning.network_policy import NetworkPolicyParams, ray_service_policies
from tpuray.components.planning.pool_plan import PoolPlan

__all__ = [
    "ServingPlan",
    "ray_service_manifest",
    "serve_config",
    "serving_group",
    "serving_plan",
]


@dataclass(frozen=True)
class ServingPlan:
    """The stack's RayService, as data: its cluster, its application and its upgrade strategy."""

    name: str
    namespace: str
    cluster: RayClusterParams
    """The stack's RayCluster parameters with the serving pool's group only."""
    application: str
    import_path: str
    pool: str
    """The slice pool it runs on."""
    strategy: UpgradeType
    step_percent: int | None = None
    """``NewClusterWithIncrementalUpgrade``: the step as a percentage of the Serve capacity (whole slices)."""
    interval_seconds: int | None = None
    gateway_class_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    """The RayService's labels: the stack's, and Kueue's queue and priority class where the stack has Kueue."""
    network_policies: tuple[dict[str, Any], ...] = ()
    """Its pods' own NetworkPolicies (the module docstring)."""
    monitoring: tuple[dict[str, Any], ...] = ()
    """The PodMonitoring of its pods: Ray's and Serve's series on Ray's metrics port."""

    @property
    def group(self) -> TpuWorkerGroup:
        [group] = self.cluster.groups
        return group


def serving_group(pool: PoolPlan, serving: ServingConfig) -> TpuWorkerGroup:
    """``pool``'s worker group (the one training's RayCluster has), sized in whole slices for ``serving``."""
    return replace(pool.group, replicas=serving.replicas, min_replicas=serving.lowest, max_replicas=serving.highest)


def serving_plan(
    serving: ServingConfig | None,
    pools: Sequence[PoolPlan],
    cluster: RayClusterParams,
    labels: Mapping[str, str],
    network: NetworkPolicyParams,
    stack_cluster: str,
) -> ServingPlan | None:
    """The RayService of ``serving`` on the stack's RayCluster parameters ``cluster``; None without a serving
    section. ``labels`` are the stack's Kubernetes labels with Kueue's where the stack has Kueue; ``network`` is the
    training cluster's NetworkPolicy parameters (the namespace's, the operator's, the nodes' range);
    ``stack_cluster`` is ``cluster.name``, which names it."""
    if serving is None:
        return None
    [pool] = [p for p in pools if p.name == serving.slice_pool]
    incremental = serving.upgrade.strategy == INCREMENTAL
    name = serving.service_name(stack_cluster)
    own = replace(network, cluster=name, runtime_ranges=tuple(union_ports([pool.tpu_slice], cluster.backend)))
    return ServingPlan(
        name=name,
        namespace=cluster.namespace,
        # the service's name as its pods' label: the network identity its own policies select
        cluster=replace(cluster, name=name, groups=(serving_group(pool, serving),)),
        application=serving.name,
        import_path=serving.import_path,
        pool=pool.name,
        strategy=serving.upgrade.strategy,
        step_percent=serving.step_percent,
        interval_seconds=serving.upgrade.interval_seconds if incremental else None,
        gateway_class_name=serving.upgrade.gateway_class_name if incremental else None,
        labels=dict(labels),
        network_policies=tuple(ray_service_policies(own)),
        monitoring=(ray_pod_monitoring(name, cluster.namespace, cluster.labels, role="serving"),),
    )


def serve_config(p: ServingPlan) -> str:
    """``serveConfigV2``: Serve's config file (YAML; JSON is YAML), one application at ``/`` on port 8000."""
    doc = {
        "http_options": {"host": "0.0.0.0", "port": RAY_SERVE_HTTP_PORT},
        "applications": [{"name": p.application, "import_path": p.import_path, "route_prefix": "/"}],
    }
    return json.dumps(doc, indent=2)


def _upgrade_strategy(p: ServingPlan) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": p.strategy}
    if p.strategy == INCREMENTAL:
        strategy["clusterUpgradeOptions"] = {
            "maxSurgePercent": p.step_percent,
            "stepSizePercent": p.step_percent,
            "intervalSeconds": p.interval_seconds,
            "gatewayClassName": p.gateway_class_name,
        }
    return strategy


def ray_service_manifest(p: ServingPlan) -> dict[str, Any]:
    """The RayService; a ValueError names what KubeRay or the TPU webhook would reject."""
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayService",
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": dict(p.labels)},
        "spec": {
            "serveConfigV2": serve_config(p),
            "upgradeStrategy": _upgrade_strategy(p),
            "rayClusterConfig": ray_cluster_spec(p.cluster),
        },
    }
    problems = [
        f"rayClusterConfig: {x}"
        for x in check_ray_cluster_spec(manifest["spec"]["rayClusterConfig"], p.cluster.name)
        if not x.startswith("metadata.name")  # the RayService names its clusters, checked just below
    ]
    if len(p.name) > MAX_RAY_SERVICE_NAME:
        problems.append(f"metadata.name: {p.name!r} is longer than {MAX_RAY_SERVICE_NAME} characters")
    raise_problems("RayService", p.name, problems)
    return manifest
