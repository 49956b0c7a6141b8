"""Rules over a whole stack's resources, for what one resource cannot tell alone.

Pure Python. :mod:`~tpuray.components.review.rules` adds :data:`MAINTENANCE_STACK_RULES` to its ``STACK_RULES``:
``tpuray plan`` runs them over the collected resources and the policy pack makes them CrossGuard stack validation
policies.

A static multi-host TPU slice in production (a node pool that keeps its slice, not autoscaled from zero) must not
be upgraded in the middle of a run: TPU VMs cannot live-migrate and a slice restarts whole when any of its hosts
does. Node upgrades happen at any time unless the cluster's maintenance policy has a window or an exclusion
(https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions), which lives on the
cluster, not on the node pool: hence a stack rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpuray.components.catalog.wire import as_int
from tpuray.components.review.policy_rules import slice_of, tpu_pool
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL
from tpuray.components.review.rule_types import Resource, RuleContext, StackRule

__all__ = [
    "MAINTENANCE_STACK_RULES",
    "check_static_slices_have_maintenance",
    "maintenance_declared",
    "static_multi_host",
]


def maintenance_declared(cluster_props: Mapping[str, Any]) -> bool:
    """The cluster's maintenance policy has a (recurring or daily) window or an exclusion."""
    policy = cluster_props.get("maintenancePolicy")
    if not isinstance(policy, Mapping):
        return False
    windows = ("recurringWindow", "recurringMaintenanceWindow", "dailyMaintenanceWindow")
    return any(policy.get(k) for k in windows) or bool(policy.get("maintenanceExclusions"))


def static_multi_host(res: Resource) -> str | None:
    """The slice (``v5p-128``) a node pool keeps up, if it holds a multi-host slice that is never scaled away."""
    pool = tpu_pool(res)
    if pool is None:
        return None
    s = slice_of(pool)
    if s is None or not s.multi_host:
        return None
    auto = pool.autoscaling
    kept = as_int(auto.get("minNodeCount")) if auto else as_int(res.props.get("nodeCount"))
    return s.pod_type if kept is not None and kept >= s.hosts else None


def check_static_slices_have_maintenance(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    if not ctx.production:
        return []
    if any(maintenance_declared(r.props) for r in resources if r.type == CLUSTER):
        return []
    out = []
    for r in resources:
        kept = static_multi_host(r) if r.type == NODE_POOL else None
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


MAINTENANCE_STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "tpu-static-slices-maintenance-production",
        "Production pools that keep multi-host TPU slices need a cluster maintenance window or exclusion.",
        check_static_slices_have_maintenance,
    ),
)
