"""Rules over a whole stack's resources, for what one resource cannot tell alone.

Pure Python, like :mod:`~tpuray.components.review.policy_rules`: ``tpuray plan`` runs them over the collected
resources and the policy pack turns them into CrossGuard stack validation policies.

A static multi-host TPU slice in production (a node pool that keeps its slice, not autoscaled from zero) must not
be upgraded in the middle of a run: TPU VMs cannot live-migrate and a slice restarts whole when any of its hosts
does. Node upgrades happen at any time unless the cluster's maintenance policy has a window or an exclusion
(https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions), which lives on the
cluster, not on the node pool: hence a stack rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.review.policy_rules import (
    CLUSTER,
    NODE_POOL,
    Resource,
    RuleContext,
    Violation,
    _slice_of,
    _tpu_pool,
    stack_of_urn,
)
from tpuray.components.review.policy_rules import _int as as_int

__all__ = ["STACK_RULES", "StackRule", "check_stack", "maintenance_declared", "static_multi_host"]


@dataclass(frozen=True)
class StackRule:
    name: str
    description: str
    check: Callable[[Sequence[Resource], RuleContext], list[tuple[str, str]]]
    """``(urn of the offending resource, message)`` pairs."""


def maintenance_declared(cluster_props: Mapping[str, Any]) -> bool:
    """The cluster's maintenance policy has a (recurring or daily) window or an exclusion."""
    policy = cluster_props.get("maintenancePolicy")
    if not isinstance(policy, Mapping):
        return False
    windows = ("recurringWindow", "recurringMaintenanceWindow", "dailyMaintenanceWindow")
    return any(policy.get(k) for k in windows) or bool(policy.get("maintenanceExclusions"))


def static_multi_host(res: Resource) -> str | None:
    """The slice (``v5p-128``) a node pool keeps up, if it holds a multi-host slice that is never scaled away."""
    pool = _tpu_pool(res)
    if pool is None:
        return None
    s = _slice_of(pool)
    if s is None or not s.multi_host:
        return None
    auto = pool.autoscaling
    kept = as_int(auto.get("minNodeCount")) if auto else as_int(res.props.get("nodeCount"))
    return s.pod_type if kept is not None and kept >= s.hosts else None


def check_static_slices_have_maintenance(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    if not ctx.production:
        return []
    clusters = [r for r in resources if r.type == CLUSTER]
    if any(maintenance_declared(c.props) for c in clusters):
        return []
    out = []
    for r in resources:
        if r.type != NODE_POOL:
            continue
        kept = static_multi_host(r)
        if kept is not None:
            out.append(
                (
                    r.urn or r.name,
                    f"keeps a multi-host {kept} slice in production stack {ctx.stack!r}, but the cluster has no "
                    "maintenance window or exclusion: a node upgrade may restart the slice mid-run (set "
                    "tpuray:maintenance)",
                )
            )
    return out


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "tpu-static-slices-maintenance-production",
        "Production pools that keep multi-host TPU slices need a cluster maintenance window or exclusion.",
        check_static_slices_have_maintenance,
    ),
)


def check_stack(resources: Sequence[Resource], ctx: RuleContext | None = None) -> list[Violation]:
    """Every stack rule over a plan's resources; the stack comes from the URNs unless ``ctx`` names it."""
    if not resources:
        return []
    c = ctx or RuleContext(stack=stack_of_urn(resources[0].urn))
    return [Violation(rule.name, urn, message) for rule in STACK_RULES for urn, message in rule.check(resources, c)]
