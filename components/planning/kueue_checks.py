"""What Kueue's RayJob webhook would reject, checked before any resource exists.

Pure Python. Restates kubernetes-sigs/kueue ``pkg/controller/jobs/rayjob/rayjob_webhook.go`` and
``pkg/controller/jobs/raycluster/common.go`` (``ValidateCreate``) for a RayJob labelled with a LocalQueue, plus
KubeRay's rule that a suspended RayJob deletes its cluster when done
(https://github.com/ray-project/kuberay/pull/1813).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog.names import KUEUE_QUEUE_NAME_LABEL

__all__ = ["MAX_POD_SETS", "check_kueue_ray_job"]

MAX_POD_SETS = 18
"""Kueue v0.19 ``pkg/controller/jobframework/constants.go`` ``MaxPodSets``: head + worker groups (+ the submitter in
K8sJobMode)."""
HEAD_POD_SET = "head"


def check_kueue_ray_job(manifest: Mapping[str, Any]) -> list[str]:
    """Problems of a RayJob that Kueue manages (queue-labelled) or that is created suspended."""
    spec = manifest["spec"]
    labels = manifest.get("metadata", {}).get("labels") or {}
    problems: list[str] = []
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("spec.suspend: a suspended RayJob needs shutdownAfterJobFinishes (KubeRay)")
    if not labels.get(KUEUE_QUEUE_NAME_LABEL):
        return problems
    cluster = spec.get("rayClusterSpec")
    # kueue v0.19 rayjob_webhook.go validateCreate: clusterSelector with rayClusterSpec is refused, neither is
    # refused, and clusterSelector alone is *accepted* but not managed ("RayJobs using existing clusters are not
    # managed by Kueue"). The last one would carry a queue label that does nothing, so tpuray refuses it too, as its
    # own rule: a queued job must never silently run unqueued.
    if spec.get("clusterSelector"):
        if cluster is not None:
            problems.append("spec.clusterSelector: a Kueue-managed job should not use an existing cluster (Kueue)")
        else:
            problems.append(
                "spec.clusterSelector: Kueue does not manage a RayJob on an existing cluster, so its queue label "
                "would do nothing (tpuray's rule): give the job its own rayClusterSpec or drop the queue label"
            )
        return problems
    if cluster is None:
        problems.append("spec.rayClusterSpec: a Kueue-managed job needs its own rayClusterSpec (Kueue)")
        return problems
    if not spec.get("shutdownAfterJobFinishes"):
        problems.append("spec.shutdownAfterJobFinishes: a Kueue-managed job must delete its cluster when done")
    if cluster.get("enableInTreeAutoscaling"):
        problems.append("rayClusterSpec.enableInTreeAutoscaling: Kueue admits a fixed size (no workload slicing)")
    groups = cluster.get("workerGroupSpecs") or []
    pod_sets = 1 + len(groups) + (1 if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode" else 0)
    if pod_sets > MAX_POD_SETS:
        problems.append(f"rayClusterSpec.workerGroupSpecs: {pod_sets} pod sets, Kueue admits at most {MAX_POD_SETS}")
    for i, g in enumerate(groups):
        if g.get("groupName") == HEAD_POD_SET:
            problems.append(f"rayClusterSpec.workerGroupSpecs[{i}].groupName: 'head' is reserved for the head")
    return problems
