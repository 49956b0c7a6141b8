"""An agent enforces the stack's NetworkPolicies (Dataplane V2 or Calico)."""

from __future__ import annotations

from collections import Counter

from tpuray.components.config import StackConfig
from tpuray.components.doctor.objects import (
    SYSTEM_NAMESPACE,
    labels,
    meta,
    pod_ready,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_DPV2

__all__ = ["NETWORK_POLICY_AGENTS", "check_network_policy"]

NETWORK_POLICY_AGENTS = {("k8s-app", "cilium"): "Dataplane V2 (anetd)", ("k8s-app", "calico-node"): "Calico"}


def check_network_policy(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    found = Counter(
        agent
        for pod in objs.pods
        if meta(pod).get("namespace") == SYSTEM_NAMESPACE and pod_ready(pod)
        for (key, value), agent in NETWORK_POLICY_AGENTS.items()
        if labels(pod).get(key) == value
    )
    fact = (
        f"the stack's NetworkPolicies in namespace {cfg.ray.namespace} only hold where an agent enforces them: "
        "Dataplane V2 (anetd pods, k8s-app=cilium) or Calico (k8s-app=calico-node) in kube-system"
    )
    fix = "create the cluster with Dataplane V2 (datapathProvider ADVANCED_DATAPATH, as the stack does)"
    if not found:
        return CheckResult(
            "network-policy", "fail", f"{fact}; no ready agent pod: the policies are not enforced", SRC_DPV2, fix
        )
    agents = ", ".join(f"{a} ({n} ready pod(s))" for a, n in sorted(found.items()))
    return CheckResult("network-policy", "pass", f"{fact}; found {agents}", SRC_DPV2, fix)
