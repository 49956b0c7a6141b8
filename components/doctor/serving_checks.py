"""What a stack's Ray Serve application (``tpuray:serving``) needs on a live cluster, beyond its RayService CRD (which
the ``kuberay-crds`` check validates with every rendered kind): the KubeRay gate its upgrade type needs, and serving
pods on node pools of their own, never on training's (the Gateway API of the incremental upgrade:
:mod:`.gateway_checks`). Pure functions of the objects read, like :mod:`.checks`."""

from __future__ import annotations

from collections import defaultdict

from tpuray.components.catalog.names import GKE_NODEPOOL_LABEL, RAY_CLUSTER_LABEL
from tpuray.components.catalog.pins import INCREMENTAL_UPGRADE
from tpuray.components.config import StackConfig
from tpuray.components.config.serving import INCREMENTAL
from tpuray.components.doctor.objects import labels, meta, name, running_tpu_pods, short, text_at
from tpuray.components.doctor.operator_gates import operator_gate
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult, Status
from tpuray.components.doctor.sources import SRC_RAYSERVICE_UPGRADE

__all__ = ["check_serving_pools_apart", "check_serving_upgrade_gate"]


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
    node_pool = {name(n): str(labels(n).get(GKE_NODEPOOL_LABEL, "?")) for n in objs.nodes}
    kinds: dict[str, set[str]] = defaultdict(set)
    pods: dict[str, list[str]] = defaultdict(list)
    for pod in running_tpu_pods(objs, cfg.ray.namespace):
        # KubeRay names a RayService's clusters <service>-<suffix> (rayservice_controller.go, v1.7.0)
        cluster = str(labels(pod).get(RAY_CLUSTER_LABEL, ""))
        kind = "serving" if cluster.startswith(f"{service}-") else "training"
        pool = node_pool.get(text_at(pod, "spec", "nodeName") or "", "?")
        kinds[pool].add(kind)
        pods[pool].append(f"{meta(pod).get('namespace')}/{name(pod)} ({kind})")
    shared = sorted(p for p, k in kinds.items() if k == {"serving", "training"})
    fact = f"the RayService {service}'s TPU pods run on node pools no training pod runs on"
    fix = (
        f"give serving its own slice pool (serving.slicePool, now {serving.slice_pool}) and let no training job's "
        "node selector reach its nodes; then pulumi up"
    )
    if shared:
        found = "; ".join(f"node pool {p}: {short(sorted(pods[p]))}" for p in shared)
        return CheckResult("serving-pools-apart", "fail", f"{fact}; shared: {found}", SRC_RAYSERVICE_UPGRADE, fix)
    serving_pools = sorted(p for p, k in kinds.items() if "serving" in k)
    said = f"serving runs on {short(serving_pools)}" if serving_pools else "no serving pod runs yet"
    return CheckResult("serving-pools-apart", "pass", f"{fact}; {said}", SRC_RAYSERVICE_UPGRADE, fix)
