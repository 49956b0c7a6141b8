"""What KubeRay's webhook and the GKE TPU webhook would reject in a RayCluster or RayJob, as pure checks.

A subset of KubeRay's validation (``ray-operator/controllers/ray/utils/validation.go`` at v1.7.0, the pinned
chart, https://github.com/ray-project/kuberay)
plus the TPU webhook's slice rule (numOfHosts x chips per host = the topology's chips,
https://github.com/ai-on-gke/kuberay-tpu-webhook). The renderer raises on them before anything is declared, and
the policy rules reuse them. Imports no Pulumi.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    RAY_CLUSTER_LABEL,
    TPU_RESOURCE,
    TPU_TAINT,
)
from tpuray.components.catalog.topology import TopologyError, TpuSlice, generation_of_accelerator
from tpuray.components.catalog.wire import as_int, get_path
from tpuray.components.planning.kueue_checks import check_kueue_ray_job

__all__ = [
    "MAX_RAY_CLUSTER_NAME",
    "MAX_RAY_JOB_NAME",
    "check_ray_cluster_spec",
    "check_ray_job",
    "raise_problems",
    "tpu_groups",
    "worker_group_chips_problem",
]

# KubeRay v1.7 ray-operator/controllers/ray/utils/constant.go: MaxRayClusterNameLength = 53, and
# MaxRayJobNameLength = MaxRayClusterNameLength - 6 (the RayJob's cluster is named <job>-<5 chars>);
# utils/validation.go ValidateRayJobMetadata refuses a longer RayJob name.
MAX_RAY_CLUSTER_NAME = 53
MAX_RAY_JOB_NAME = MAX_RAY_CLUSTER_NAME - 6


def tpu_groups(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The worker groups of a RayCluster spec that request TPUs."""
    out = []
    for g in spec.get("workerGroupSpecs", []):
        containers = g["template"]["spec"]["containers"]
        if any(TPU_RESOURCE in c.get("resources", {}).get("limits", {}) for c in containers):
            out.append(g)
    return out


_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_problems(where: str, labels: Mapping[str, str]) -> list[str]:
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.fullmatch(prefix)))
            or len(name) > 63
            or not (_LABEL_NAME.fullmatch(name))
        ):
            problems.append(f"{where}: invalid label key {key!r}")
        if len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
            problems.append(f"{where}: invalid value {value!r} for label {key!r}")
    return problems


def check_ray_cluster_spec(spec: Mapping[str, Any], name: str) -> list[str]:
    """Problems KubeRay or the GKE TPU webhook would reject this RayCluster spec for (empty when fine)."""
    problems: list[str] = []
    if len(name) > MAX_RAY_CLUSTER_NAME or not _DNS1035.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label of at most {MAX_RAY_CLUSTER_NAME} chars")
    head = spec["headGroupSpec"]
    if not head["template"]["spec"].get("containers"):
        problems.append("headGroupSpec: needs at least one container")
    if head.get("serviceType", "ClusterIP") == "LoadBalancer":
        problems.append("headGroupSpec.serviceType: never LoadBalancer (the dashboard has no authentication)")
    seen: set[str] = set()
    for i, g in enumerate(spec.get("workerGroupSpecs", [])):
        at = f"workerGroupSpecs[{i}]"
        if g["groupName"] in seen:
            problems.append(f"{at}.groupName: duplicate {g['groupName']!r}")
        seen.add(g["groupName"])
        lo, hi, n = g.get("minReplicas", 0), g.get("maxReplicas", 0), g.get("replicas", 0)
        if not 0 <= lo <= hi:
            problems.append(f"{at}: minReplicas {lo} must be between 0 and maxReplicas {hi}")
        if not lo <= n <= hi:
            problems.append(f"{at}.replicas: {n} is outside [{lo}, {hi}]")
        starts = g.get("rayStartParams", {})
        if g.get("resources") and any(k in starts for k in ("num-cpus", "num-gpus", "memory", "resources")):
            problems.append(f"{at}: resources set both in rayStartParams and resources")
        if "labels" in starts:
            problems.append(f"{at}.rayStartParams.labels: use the group's labels field")
        problems += _label_problems(f"{at}.labels", g.get("labels", {}))
    for i, g in enumerate(spec.get("workerGroupSpecs", [])):
        if g not in tpu_groups(spec):
            continue
        problems += _tpu_group_problems(f"workerGroupSpecs[{i}]", g)
    return problems


def worker_group_chips_problem(group: Mapping[str, Any]) -> str | None:
    """The TPU webhook's slice rule for one worker group, or None when it holds (or the group has no TPUs).

    numOfHosts x the ``google.com/tpu`` each pod requests must equal the chips of the slice its nodeSelector names
    (https://github.com/ai-on-gke/kuberay-tpu-webhook). Reads wire values defensively: the renderer calls it on
    what it built, the policy rule on whatever a program declared.
    """
    template = group.get("template")
    per_pod = 0
    for c in get_path(template, "spec", "containers") or []:
        for section in ("limits", "requests"):
            n = as_int(get_path(c, "resources", section, TPU_RESOURCE))
            if n is not None:
                per_pod += n
                break
    if per_pod == 0:
        return None
    selector = get_path(template, "spec", "nodeSelector") or {}
    accel, topo = selector.get(GKE_ACCELERATOR_LABEL), selector.get(GKE_TOPOLOGY_LABEL)
    gen = generation_of_accelerator(accel)
    if gen is None or not isinstance(topo, str):
        return (
            f"requests {TPU_RESOURCE} but its nodeSelector lacks a known {GKE_ACCELERATOR_LABEL} and "
            f"{GKE_TOPOLOGY_LABEL}"
        )
    try:
        chips = TpuSlice.parse(gen.name, topo).chips  # 2x4 is one -8t VM or two -4t VMs: 8 chips either way
    except TopologyError as e:
        return str(e)
    hosts = as_int(group.get("numOfHosts")) or 1
    if hosts * per_pod != chips:
        return (
            f"numOfHosts {hosts} x {TPU_RESOURCE} {per_pod} = {hosts * per_pod}, but a {gen.name} {topo} slice has "
            f"{chips} chips"
        )
    return None


def _tpu_group_problems(at: str, g: Mapping[str, Any]) -> list[str]:
    """The TPU webhook rejects a group whose numOfHosts * google.com/tpu differs from the topology's chips."""
    pod = g["template"]["spec"]
    problems = []
    chips = worker_group_chips_problem(g)
    if chips:
        problems.append(f"{at}: {chips}")
    for c in pod["containers"]:
        res = c.get("resources", {})
        if res.get("requests", {}).get(TPU_RESOURCE) != res.get("limits", {}).get(TPU_RESOURCE):
            problems.append(f"{at}.containers[{c['name']}]: {TPU_RESOURCE} requests and limits differ")
    if not any(t.get("key") == TPU_TAINT.key for t in pod.get("tolerations", [])):
        problems.append(f"{at}.template.spec.tolerations: missing the {TPU_TAINT.key} toleration")
    return problems


def check_ray_job(manifest: Mapping[str, Any]) -> list[str]:
    """Problems KubeRay's RayJob validation would report (empty when fine)."""
    spec = manifest["spec"]
    problems: list[str] = []
    selector = spec.get("clusterSelector") or {}
    if not selector and "rayClusterSpec" not in spec:
        problems.append("spec: one of rayClusterSpec or clusterSelector must be set")
    if selector:
        # KubeRay v1.7.0 ValidateRayJobSpec, clusterSelector mode; each rule with the release that added it (the
        # validation.go of each tag): an empty ray.io/cluster and suspend are refused in v1.4.0 already,
        # SidecarMode from v1.5.0 (the mode's release), backoffLimit > 0 from v1.6.0 (ray-project/kuberay#4527).
        if not selector.get(RAY_CLUSTER_LABEL):
            problems.append("spec.clusterSelector: ray.io/cluster must name a RayCluster")
        if spec.get("suspend"):
            problems.append("spec.suspend: the clusterSelector mode does not support suspend (KubeRay >= 1.4)")
        if spec.get("submissionMode") == "SidecarMode":
            problems.append("spec.submissionMode: SidecarMode does not support clusterSelector (KubeRay >= 1.5)")
        if spec.get("backoffLimit", 0) > 0:
            problems.append("spec.backoffLimit: incompatible with clusterSelector (KubeRay >= 1.6)")
        # tpuray's own rule, not KubeRay's: v1.7.0 accepts it and then skips the deletion
        # (rayjob_controller.go: "using an existing RayCluster via clusterSelector; skipping resource deletion")
        if spec.get("shutdownAfterJobFinishes"):
            problems.append("spec.shutdownAfterJobFinishes: the selected cluster is not the job's to shut down")
    if not spec.get("shutdownAfterJobFinishes") and spec.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append("spec.ttlSecondsAfterFinished: needs shutdownAfterJobFinishes")
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        problems.append("spec.activeDeadlineSeconds: must be positive")
    if spec.get("backoffLimit", 0) < 0:
        problems.append("spec.backoffLimit: must not be negative")
    if not spec.get("entrypoint"):
        problems.append("spec.entrypoint: empty")
    name = manifest["metadata"]["name"]
    if len(name) > MAX_RAY_JOB_NAME or not _DNS1035.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label of at most {MAX_RAY_JOB_NAME} chars")
    if "rayClusterSpec" in spec:
        cluster_problems = check_ray_cluster_spec(spec["rayClusterSpec"], name)
        problems += [f"rayClusterSpec: {p}" for p in cluster_problems if not p.startswith("metadata.name")]
    problems += check_kueue_ray_job(manifest)
    return problems


def raise_problems(kind: str, name: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"{kind} {name}: " + "; ".join(problems))
