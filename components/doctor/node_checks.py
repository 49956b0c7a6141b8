"""Each slice pool's TPU nodes: labels, count, allocatable chips, and GKE's TPU device plugin on every one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_TOPOLOGY_LABEL,
    TPU_RESOURCE,
)
from tpuray.components.config import (
    SlicePoolConfig,
    StackConfig,
)
from tpuray.components.doctor.objects import (
    SYSTEM_NAMESPACE,
    labels,
    mapping_at,
    meta,
    name,
    pod_ready,
    short,
    text_at,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult, Status
from tpuray.components.doctor.sources import SRC_DEVICE_PLUGIN, SRC_GKE_TPU

__all__ = ["DEVICE_PLUGIN_POD_LABEL", "check_device_plugin", "check_pool_nodes"]

DEVICE_PLUGIN_POD_LABEL = ("k8s-app", "tpu-device-plugin")


def _pool_nodes(pool: SlicePoolConfig, objs: ClusterObjects) -> list[dict[str, Any]]:
    """The pool's nodes, each once (a snapshot may list a node twice; the API server never does)."""
    names = set(pool.node_pool_names)
    unique = {name(n): n for n in reversed(objs.nodes) if labels(n).get(GKE_NODEPOOL_LABEL) in names}
    return list(reversed(unique.values()))


def _listed_twice(pool: SlicePoolConfig, objs: ClusterObjects) -> list[str]:
    names = set(pool.node_pool_names)
    counts = Counter(name(n) for n in objs.nodes if labels(n).get(GKE_NODEPOOL_LABEL) in names)
    return sorted(name for name, count in counts.items() if count > 1)


def _not_schedulable(node: Mapping[str, Any]) -> str | None:
    """Why the scheduler would not place a pod on ``node`` (NotReady, cordoned), or None.
    https://kubernetes.io/docs/concepts/architecture/nodes/#condition, kubectl cordon sets spec.unschedulable."""
    if mapping_at(node, "spec").get("unschedulable") is True:
        return "cordoned"
    if not pod_ready(node):  # the same Ready condition, on a node
        return "NotReady"
    return None


def check_pool_nodes(pool: SlicePoolConfig, objs: ClusterObjects) -> list[CheckResult]:
    s = pool.tpu_slice
    nodes = _pool_nodes(pool, objs)
    pools = ", ".join(pool.node_pool_names)
    fix_pool = f"recreate node pool(s) {pools} from the stack (pulumi up); GKE sets these labels from the pool's shape"
    results = []

    want = {GKE_ACCELERATOR_LABEL: s.gke_accelerator, GKE_TOPOLOGY_LABEL: s.topology}
    wrong = [
        f"{name(n)} has {k}={labels(n).get(k, '(none)')}"
        for n in nodes
        for k, v in want.items()
        if labels(n).get(k) != v
    ]
    fact = f"pool {pool.name} ({s}) nodes carry {', '.join(f'{k}={v}' for k, v in want.items())}"
    results.append(_nodes_result(f"tpu-node-labels.{pool.name}", nodes, wrong, fact, SRC_GKE_TPU, fix_pool))

    # capacity is what the scheduler can use: a NotReady or cordoned host leaves its slice short
    unusable = {name(n): why for n in nodes if (why := _not_schedulable(n))}
    per_pool = Counter(str(labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes)
    usable = Counter(str(labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes if name(n) not in unusable)
    problems = [
        f"node pool {name} has {usable[name]} usable of {s.hosts} hosts"
        for name in sorted(per_pool)
        if s.multi_host and usable[name] != s.hosts
    ]
    slices = sum(1 for c in usable.values() if c == s.hosts) if s.multi_host else sum(usable.values())
    if not problems and not pool.min_slices <= slices <= pool.slices:
        problems.append(f"{slices} slice(s) up, the pool keeps {pool.min_slices} to {pool.slices}")
    twice = _listed_twice(pool, objs)
    fact = (
        f"pool {pool.name}: {pool.min_slices}-{pool.slices} slice(s) of {s.hosts} node(s) each; "
        f"found {len(nodes)} node(s) in {len(per_pool)} node pool(s)"
        + (f" ({short(twice)} listed more than once, counted once)" if twice else "")
        + (f"; not counted: {short(f'{n} ({why})' for n, why in unusable.items())}" if unusable else "")
    )
    fix = f"see the node pools' events (gcloud container node-pools describe {pools}); quota, capacity or repair"
    if unusable:
        fix += "; kubectl uncordon a cordoned node, kubectl describe node a NotReady one"
    status: Status = "fail" if problems else "pass"
    results.append(
        CheckResult(f"tpu-node-count.{pool.name}", status, f"{fact}; {'; '.join(problems) or 'ok'}", SRC_GKE_TPU, fix)
    )

    wrong = [
        f"{name(n)} has {text_at(n, 'status', 'allocatable', TPU_RESOURCE) or 'none'}"
        for n in nodes
        if text_at(n, "status", "allocatable", TPU_RESOURCE) != str(s.chips_per_host)
    ]
    fact = f"pool {pool.name} nodes ({s.machine_type}) allocate {TPU_RESOURCE}={s.chips_per_host}"
    fix = "check the TPU device plugin on those nodes (tpu-device-plugin check), then repair or recreate them"
    results.append(_nodes_result(f"tpu-allocatable.{pool.name}", nodes, wrong, fact, SRC_DEVICE_PLUGIN, fix))
    return results


def _nodes_result(check_id: str, nodes: list[Any], wrong: list[str], fact: str, source: str, fix: str) -> CheckResult:
    if not nodes:
        return CheckResult(check_id, "warn", f"{fact}; no nodes up (the pool is at zero): not checked", source, fix)
    if wrong:
        return CheckResult(check_id, "fail", f"{fact}; {short(wrong)}", source, fix)
    return CheckResult(check_id, "pass", f"{fact}; {len(nodes)} node(s) ok", source, fix)


def check_device_plugin(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    tpu_nodes = {name(n) for p in cfg.slice_pools for n in _pool_nodes(p, objs)}
    key, value = DEVICE_PLUGIN_POD_LABEL
    ready = {
        text_at(pod, "spec", "nodeName")
        for pod in objs.pods
        if meta(pod).get("namespace") == SYSTEM_NAMESPACE and labels(pod).get(key) == value and pod_ready(pod)
    }
    fact = f"every TPU node runs a ready {SYSTEM_NAMESPACE} pod {key}={value}"
    fix = "GKE manages the plugin: check kubectl -n kube-system get pods -l k8s-app=tpu-device-plugin -o wide"
    missing = tpu_nodes - ready
    if not tpu_nodes:
        return CheckResult("tpu-device-plugin", "warn", f"{fact}; no TPU nodes up: not checked", SRC_DEVICE_PLUGIN, fix)
    if missing:
        return CheckResult(
            "tpu-device-plugin", "fail", f"{fact}; none ready on {short(missing)}", SRC_DEVICE_PLUGIN, fix
        )
    return CheckResult("tpu-device-plugin", "pass", f"{fact}; {len(tpu_nodes)} node(s) ok", SRC_DEVICE_PLUGIN, fix)
