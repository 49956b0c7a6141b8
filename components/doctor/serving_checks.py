"""What a stack's Ray Serve application (``tpuray:serving``) needs on a live cluster, beyond its RayService CRD (which
the ``kuberay-crds`` check validates with every rendered kind): the KubeRay gate its upgrade type needs, and serving
pods on node pools of their own, never on training's (the Gateway API of the incremental upgrade:
:mod:`.gateway_checks`). Pure functions of the objects read, like :mod:`.checks`."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog.names import GKE_NODEPOOL_LABEL, RAY_CLUSTER_LABEL
from tpuray.components.catalog.pins import INCREMENTAL_UPGRADE
from tpuray.components.config import StackConfig
from tpuray.components.config.serving import INCREMENTAL
from tpuray.components.doctor.objects import (
    flag_at,
    item_paths,
    labels,
    meta,
    name,
    running_tpu_pods,
    short,
    text_at,
)
from tpuray.components.doctor.operator_gates import operator_gate
from tpuray.components.doctor.reader import OPTIONAL_LIST_FILES, ClusterObjects
from tpuray.components.doctor.result import CheckResult, Status
from tpuray.components.doctor.sources import SRC_RAYSERVICE_UPGRADE

__all__ = ["SERVICE_CLUSTER_SUFFIX", "check_serving_pools_apart", "check_serving_upgrade_gate", "made_by_service"]

SERVICE_CLUSTER_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
"""What KubeRay appends to a RayService's name to name each of its RayClusters: ``GenerateRayClusterName`` is
``<service>-`` plus ``rand.String(5)`` (ray-project/kuberay ``ray-operator/controllers/ray/utils/util.go``, v1.7.0),
whose letters are k8s.io/apimachinery ``pkg/util/rand``'s ``alphanums`` (no vowels, no 0, 1 or 3; v0.36.0)."""


def made_by_service(cluster: Mapping[str, Any], service: str) -> bool:
    """The RayCluster ``cluster`` is one the RayService ``service`` made: KubeRay sets the RayService as its
    controller owner (``constructRayClusterForRayService``: ``ctrl.SetControllerReference``, which sets
    ``controller: true``; ``rayservice_controller.go``, v1.7.0), which no cluster a team applies itself carries."""
    for ref in item_paths(cluster, "metadata", "ownerReferences"):
        # every field read before deciding: one of a type the API never returns fails the check naming it
        api, kind, owner = (text_at(cluster, *ref, key) for key in ("apiVersion", "kind", "name"))
        controller = flag_at(cluster, *ref, "controller")
        if (api or "").split("/", 1)[0] == "ray.io" and (kind, owner, controller) == ("RayService", service, True):
            return True
    return False


def check_serving_upgrade_gate(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """``NewClusterWithIncrementalUpgrade`` needs the operator's gate on: off, KubeRay makes no new cluster on a
    change, and the service never takes a new version. None where the stack serves nothing or upgrades otherwise."""
    serving = cfg.serving
    if serving is None or serving.upgrade.strategy != INCREMENTAL:
        return None
    on, how = operator_gate(cfg, objs, INCREMENTAL_UPGRADE)
    fact = f"serving upgrade {INCREMENTAL} needs the KubeRay operator's {INCREMENTAL_UPGRADE} gate on; {how}"
    fix = (
        f"turn {INCREMENTAL_UPGRADE} on in the operator's featureGates (KubeRay >= 1.7 has it on by default), or "
        "choose serving.upgrade.strategy NewCluster where the pool holds twice the replicas"
    )
    status: Status = "pass" if on else "fail" if on is False else "warn"
    return CheckResult("serving-upgrade-gate", status, fact, SRC_RAYSERVICE_UPGRADE, fix)


def check_serving_pools_apart(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """No GKE node pool runs a serving TPU pod beside a training one: a serving replica owns whole slices, and a
    training job on the same nodes would take chips a replica counts on (the config gives each its own pool; this
    reads where the pods run). None where the stack serves nothing."""
    serving = cfg.serving
    if serving is None:
        return None
    service = serving.service_name(cfg.cluster.name)
    namespace = cfg.ray.namespace
    node_pool = {name(n): str(labels(n).get(GKE_NODEPOOL_LABEL, "?")) for n in objs.nodes}
    read = objs.ray_clusters is not None
    clusters = {name(c): c for c in objs.ray_clusters or () if meta(c).get("namespace") == namespace}
    by_name = re.compile(re.escape(f"{service}-") + SERVICE_CLUSTER_SUFFIX)

    def serves(cluster: str) -> bool:
        if not read:  # the name form alone: a team's cluster could still take such a name
            return by_name.fullmatch(cluster) is not None
        found = clusters.get(cluster)
        return found is not None and made_by_service(found, service)

    kinds: dict[str, set[str]] = defaultdict(set)
    pods: dict[str, list[str]] = defaultdict(list)
    for pod in running_tpu_pods(objs, namespace):
        cluster = str(labels(pod).get(RAY_CLUSTER_LABEL, ""))
        kind = "serving" if serves(cluster) else f"RayCluster {cluster or '?'}"
        pool = node_pool.get(text_at(pod, "spec", "nodeName") or "", "?")
        kinds[pool].add("serving" if kind == "serving" else "other")
        pods[pool].append(f"{meta(pod).get('namespace')}/{name(pod)} ({kind})")
    shared = sorted(p for p, k in kinds.items() if k == {"serving", "other"})
    how = (
        f"a pod is the RayService's where its RayCluster's controller owner is RayService {service}"
        if read
        else f"RayClusters not read: a pod is the RayService's by KubeRay's cluster name form {service}-xxxxx alone"
    )
    fact = f"the RayService {service}'s TPU pods run on node pools no other Ray cluster's TPU pod runs on ({how})"
    fix = (
        f"give serving its own slice pool (serving.slicePool, now {serving.slice_pool}) and let no other cluster's "
        "node selector reach its nodes; then pulumi up"
    )
    if shared:
        found = "; ".join(f"node pool {p}: {short(sorted(pods[p]))}" for p in shared)
        return CheckResult("serving-pools-apart", "fail", f"{fact}; shared: {found}", SRC_RAYSERVICE_UPGRADE, fix)
    serving_pools = sorted(p for p, k in kinds.items() if "serving" in k)
    said = f"serving runs on {short(serving_pools)}" if serving_pools else "no serving pod runs yet"
    if serving_pools and not read:
        unread = f"{fact}; {said}, but which clusters are the RayService's is not known"
        return CheckResult("serving-pools-apart", "warn", unread, SRC_RAYSERVICE_UPGRADE, _READ_CLUSTERS)
    return CheckResult("serving-pools-apart", "pass", f"{fact}; {said}", SRC_RAYSERVICE_UPGRADE, fix)


_READ_CLUSTERS = (
    f"save {OPTIONAL_LIST_FILES['ray_clusters']} with kubectl get rayclusters.ray.io -A -o json (a snapshot), or let "
    "the doctor's identity list rayclusters.ray.io"
)
