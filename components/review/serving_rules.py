"""Whether a RayService's upgrade fits the capacity of its slice pool: a stack rule over the declared resources.

Pure Python. :mod:`~tpuray.components.review.rules` adds :data:`SERVING_STACK_RULES` to its ``STACK_RULES``:
``tpuray plan`` runs them over the collected resources and the policy pack makes them CrossGuard stack policies.

KubeRay v1.7 rolls a changed RayService out by its ``spec.upgradeStrategy.type``
(``ray-operator/controllers/ray/rayservice_controller.go`` at v1.7.0, ``isZeroDowntimeUpgradeEnabled``): unset or
``NewCluster`` builds a whole second RayCluster and switches when it is ready, so the service's slice pool must hold
twice its replicas at the peak; on TPUs, whose capacity is reserved or queued, a second set that cannot be created
waits for ever and the upgrade never finishes. ``NewClusterWithIncrementalUpgrade`` grows the new cluster by
``maxSurgePercent`` of the capacity per step (the pool holds the replicas and one step), but only where the
operator's ``RayServiceIncrementalUpgrade`` feature gate is on: with it off the same controller treats the type as
"no zero-downtime upgrade" (it creates no new cluster at all).

The pool is found by the worker group's ``tpuray.io/pool`` node selector, and its slices counted from the node pools
that carry that label (a multi-host slice is one node pool of ``hosts`` nodes; a single-host pool's nodes are its
slices), at their autoscaling maximum or fixed size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import POOL_LABEL, TPU_RESOURCE
from tpuray.components.catalog.pins import INCREMENTAL_UPGRADE, feature_gate_default
from tpuray.components.catalog.wire import as_int, get_path
from tpuray.components.config.capacity import capacity_of_node_pool
from tpuray.components.review.policy_rules import slice_of, tpu_pool
from tpuray.components.review.resource_types import NODE_POOL, RAY_SERVICE
from tpuray.components.review.rule_types import Resource, RuleContext, StackRule

__all__ = [
    "INCREMENTAL_GATE",
    "SERVING_STACK_RULES",
    "PoolSlices",
    "ServedGroup",
    "check_upgrade_capacity",
    "incremental_gate_on",
    "incremental_problems",
    "new_cluster_problem",
    "pool_slices",
    "served_groups",
]

INCREMENTAL_GATE = INCREMENTAL_UPGRADE
KUBERAY_RELEASE = "kubernetes:helm.sh/v3:Release"
_KUBERAY_CHART = "kuberay-operator"


@dataclass(frozen=True)
class ServedGroup:
    """One TPU worker group of a RayService: the pool it runs on and its slices."""

    service: str
    """The RayService's URN (or name)."""
    group: str
    pool: str
    replicas: int
    strategy: str
    """``spec.upgradeStrategy.type``; unset is ``NewCluster`` (KubeRay's default without ``ENABLE_ZERO_DOWNTIME``)."""
    max_surge_percent: int | None
    step_size_percent: int | None
    chips_per_slice: int | None = None
    """``numOfHosts`` x each pod's ``google.com/tpu`` limit (None where the group does not show them)."""

    @property
    def peak_slices(self) -> int:
        """Slices held at the upgrade's peak: twice the replicas (NewCluster), the replicas and one step
        (incremental), the replicas (None)."""
        if self.strategy == "NewCluster":
            return 2 * self.replicas
        if self.strategy == "NewClusterWithIncrementalUpgrade":
            return self.replicas + (self.max_surge_percent or 0) * self.replicas // 100
        return self.replicas


def _chips_per_slice(group: Mapping[str, Any]) -> int | None:
    hosts = as_int(group.get("numOfHosts"))
    containers = get_path(group, "template", "spec", "containers")
    per_pod = [
        as_int(get_path(c, "resources", "limits", TPU_RESOURCE))
        for c in (containers if isinstance(containers, list) else [])
        if isinstance(c, Mapping)
    ]
    chips = sum(n for n in per_pod if n is not None)
    return hosts * chips if hosts is not None and chips else None


def served_groups(res: Resource) -> list[ServedGroup]:
    """The TPU worker groups of a RayService resource (those that select a tpuray slice pool)."""
    spec = res.props.get("spec")
    if not isinstance(spec, Mapping):
        return []
    strategy = get_path(spec, "upgradeStrategy", "type")
    options = get_path(spec, "upgradeStrategy", "clusterUpgradeOptions")
    options = options if isinstance(options, Mapping) else {}
    groups = get_path(spec, "rayClusterConfig", "workerGroupSpecs")
    out = []
    for g in groups if isinstance(groups, list) else []:
        pool = get_path(g, "template", "spec", "nodeSelector", POOL_LABEL) if isinstance(g, Mapping) else None
        replicas = as_int(g.get("replicas")) if isinstance(g, Mapping) else None
        if isinstance(pool, str) and replicas is not None:
            out.append(
                ServedGroup(
                    service=res.urn or res.name,
                    group=str(g.get("groupName")),
                    pool=pool,
                    replicas=replicas,
                    strategy=strategy if isinstance(strategy, str) else "NewCluster",
                    max_surge_percent=as_int(options.get("maxSurgePercent")),
                    step_size_percent=as_int(options.get("stepSizePercent")),
                    chips_per_slice=_chips_per_slice(g),
                )
            )
    return out


@dataclass(frozen=True)
class PoolSlices:
    """What a slice pool's declared node pools hold: at most ``slices`` slices of ``pod_type``."""

    slices: int
    pod_type: str
    capacity: str
    """The capacity type its node pools show (``reservation``: only the named reservation backs them)."""


def pool_slices(resources: Sequence[Resource], pool: str) -> PoolSlices | None:
    """The most slices the node pools labelled ``tpuray.io/pool: <pool>`` hold; None when none is declared."""
    slices, pod_type, capacity = 0, None, None
    for r in resources:
        p = tpu_pool(r) if r.type == NODE_POOL else None
        if p is None or p.labels.get(POOL_LABEL) != pool:
            continue
        s = slice_of(p)
        if s is None or p.max_nodes is None:
            return None  # a shape or size the plan does not show: unknown, not zero
        slices += p.max_nodes // s.hosts
        pod_type, capacity = s.pod_type, capacity_of_node_pool(r.props)
    return PoolSlices(slices, pod_type, capacity or "") if pod_type is not None else None


def new_cluster_problem(g: ServedGroup, held: PoolSlices) -> str | None:
    """A ``NewCluster`` upgrade needs a second set of replicas beside the first: twice the replicas."""
    need = g.peak_slices
    if held.slices >= need:
        return None
    source = (
        "its reservation backs only the slices the pool declares"
        if held.capacity == "reservation"
        else "the pool's maximum size"
    )
    return (
        f"upgrade NewCluster builds a second cluster of {g.replicas} slices beside the first: pool {g.pool!r} "
        f"needs {need} {held.pod_type} slices at the peak but holds at most {held.slices} ({source}), so the "
        f"upgrade would wait for capacity and never finish; give the pool {need} slices, or use "
        "NewClusterWithIncrementalUpgrade (whole-slice steps) or None"
    )


def incremental_problems(g: ServedGroup, held: PoolSlices | None, gate_on: bool | None) -> list[str]:
    """``NewClusterWithIncrementalUpgrade``: the operator's gate on (``gate_on``; None is unknown), each step a
    whole number of slices, and the pool holding the replicas and one step."""
    out = []
    if gate_on is False:
        out.append(
            f"upgrade NewClusterWithIncrementalUpgrade needs the KubeRay operator's {INCREMENTAL_GATE} feature gate, "
            "which is off: KubeRay then makes no new cluster on a change; turn it on in the operator's featureGates"
        )
    elif gate_on is None:
        out.append(
            f"upgrade NewClusterWithIncrementalUpgrade needs the KubeRay operator's {INCREMENTAL_GATE} feature gate, "
            "and whether it is on is unknown (no tpuray-declared KubeRay operator, or a chart version tpuray does "
            "not know): check the operator's featureGates"
        )
    for name, percent in (("maxSurgePercent", g.max_surge_percent), ("stepSizePercent", g.step_size_percent)):
        if percent is None or (percent * g.replicas) % 100:
            out.append(
                f"{name} {percent}% of {g.replicas} slices is not a whole number of slices: a multi-host slice is "
                "added whole, so give a percentage that is a whole number of slices (tpuray:serving.upgrade.stepSlices)"
            )
    if held is not None and held.slices < g.peak_slices:
        out.append(
            f"upgrade NewClusterWithIncrementalUpgrade holds {g.replicas} slices and adds "
            f"{g.peak_slices - g.replicas} per step: pool {g.pool!r} needs {g.peak_slices} {held.pod_type} slices "
            f"but holds at most {held.slices}"
        )
    return out


def incremental_gate_on(resources: Sequence[Resource]) -> bool | None:
    """The gate's state in the KubeRay operator the stack declares: its Helm values' ``featureGates`` entry, else its
    chart's default; None (unknown) without a declared operator or with a version whose default is not known."""
    releases = [r for r in resources if r.type == KUBERAY_RELEASE and r.props.get("chart") == _KUBERAY_CHART]
    if len(releases) != 1:
        return None
    props = releases[0].props
    gates = get_path(props, "values", "featureGates")
    for gate in gates if isinstance(gates, list) else []:
        if isinstance(gate, Mapping) and gate.get("name") == INCREMENTAL_GATE and isinstance(gate.get("enabled"), bool):
            return bool(gate["enabled"])
    return feature_gate_default(INCREMENTAL_GATE, str(props.get("version")))


def check_upgrade_capacity(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    gate = incremental_gate_on(resources)
    for r in resources:
        if r.type != RAY_SERVICE:
            continue
        for g in served_groups(r):
            held = pool_slices(resources, g.pool)
            if g.strategy == "NewCluster":
                if held is None:
                    out.append((g.service, f"pool {g.pool!r} of group {g.group!r} declares no node pool tpuray reads"))
                elif problem := new_cluster_problem(g, held):
                    out.append((g.service, problem))
            elif g.strategy == "NewClusterWithIncrementalUpgrade":
                out += [(g.service, m) for m in incremental_problems(g, held, gate)]
    return out


SERVING_STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "serving-upgrade-capacity",
        "A RayService's upgrade fits its slice pool: NewCluster needs twice the replicas; the incremental upgrade "
        "needs KubeRay's feature gate and whole-slice steps.",
        check_upgrade_capacity,
    ),
)
