"""Each policy rule fails on a bad variant of a real resource and passes on both stacks.

Rules run through the CrossGuard policies themselves (``policy.validate(ResourceValidationArgs(...), report)``),
so the pack's wiring is tested too; ``tpuray plan`` runs the same rule functions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.policy_runs import BY_NAME, violations
from tpuray.components.review.plan import Plan
from tpuray.components.review.policy_pack import POLICIES
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_CLUSTER, SERVICE
from tpuray.components.review.rule_types import Resource
from tpuray.components.review.rules import RULES, check_resources


def test_every_rule_is_a_policy() -> None:
    assert sorted(BY_NAME) == sorted(r.name for r in RULES)
    assert len(RULES) == 8 + 10  # tpuray's placement and platform rules, then security_rules.py (and its stack rules)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_both_stacks_pass_every_policy(plans: dict[str, Plan], stack: str) -> None:
    checked = 0
    for r in plans[stack].resources:
        for policy in POLICIES:
            assert violations(policy, r) == [], (policy.name, r["urn"])
            checked += 1
    assert checked > 100  # the stacks really hold resources
    assert plans[stack].violations == []


Pick = Callable[[str, str, str | None], dict[str, Any]]


def _tpu_pool(resource_of: Pick, name: str = "v5p-train-0") -> dict[str, Any]:
    return resource_of("prod", NODE_POOL, name)


def test_multi_host_placement(resource_of: Pick) -> None:
    policy = BY_NAME["tpu-multi-host-placement"]
    good = _tpu_pool(resource_of)
    assert violations(policy, good) == []
    no_placement = _tpu_pool(resource_of)
    del no_placement["inputs"]["placementPolicy"]
    assert any("placementPolicy.tpuTopology" in m for m in violations(policy, no_placement))
    wrong_topology = _tpu_pool(resource_of)
    wrong_topology["inputs"]["placementPolicy"]["tpuTopology"] = "4x4x8"
    assert any("hosts" in m for m in violations(policy, wrong_topology))
    not_compact = _tpu_pool(resource_of)
    not_compact["inputs"]["placementPolicy"]["type"] = "SPREAD"
    assert any("COMPACT" in m for m in violations(policy, not_compact))
    single_host = resource_of("dev", NODE_POOL, "v5e-dev")
    assert violations(policy, single_host) == []
    single_host["inputs"]["placementPolicy"] = {"type": "COMPACT", "tpuTopology": "2x2"}
    assert any("single-host" in m for m in violations(policy, single_host))


def test_tpu7x_needs_a_workload_policy(resource_of: Pick) -> None:
    policy = BY_NAME["tpu-multi-host-placement"]
    pool = _tpu_pool(resource_of)
    pool["inputs"]["nodeConfig"]["machineType"] = "tpu7x-standard-4t"
    pool["inputs"]["nodeConfig"]["labels"]["tpuray.io/pod-type"] = "v7x-128"
    assert any("workload policy" in m for m in violations(policy, pool))
    # COMPACT group placement and a workload policy are mutually exclusive: GKE refuses the pair
    pool["inputs"]["placementPolicy"] = {"type": "COMPACT", "policyName": "tpuray-prod-v7x-wp"}
    assert any("leave type empty" in m for m in violations(policy, pool))
    pool["inputs"]["placementPolicy"]["tpuTopology"] = "4x4x4"
    assert any("leave type empty" in m for m in violations(policy, pool))
    pool["inputs"]["placementPolicy"]["type"] = ""  # the form GKE stores for tpu7x
    assert violations(policy, pool) == []


def test_multi_host_autoscaling(resource_of: Pick) -> None:
    policy = BY_NAME["tpu-multi-host-autoscaling"]
    pool = resource_of("prod", NODE_POOL, "v6e-flex-0")
    assert pool["inputs"]["autoscaling"]["maxNodeCount"] == 4
    assert violations(policy, pool) == []
    pool["inputs"]["autoscaling"]["minNodeCount"] = 2
    assert any("minNodeCount 2" in m for m in violations(policy, pool))
    pool["inputs"]["autoscaling"] = {"totalMinNodeCount": 0, "totalMaxNodeCount": 4}
    assert any("totalMinNodeCount" in m for m in violations(policy, pool))


def test_private_nodes(resource_of: Pick) -> None:
    policy = BY_NAME["gke-private-nodes"]
    cluster = resource_of("prod", CLUSTER, None)
    assert violations(policy, cluster) == []
    cluster["inputs"]["privateClusterConfig"]["enablePrivateNodes"] = False
    cluster["inputs"].pop("networkConfig", None)
    assert violations(policy, cluster)


def test_workload_identity(resource_of: Pick) -> None:
    policy = BY_NAME["gke-workload-identity"]
    cluster = resource_of("dev", CLUSTER, None)
    assert violations(policy, cluster) == []
    del cluster["inputs"]["workloadIdentityConfig"]
    assert any("workloadPool" in m for m in violations(policy, cluster))
    pool = _tpu_pool(resource_of)
    pool["inputs"]["nodeConfig"]["workloadMetadataConfig"] = {"mode": "GCE_METADATA"}
    assert any("GCE_METADATA" in m for m in violations(policy, pool))


def test_no_default_service_account(resource_of: Pick) -> None:
    policy = BY_NAME["gke-no-default-service-account"]
    pool = _tpu_pool(resource_of)
    assert violations(policy, pool) == []
    pool["inputs"]["nodeConfig"]["serviceAccount"] = "123456789012-compute@developer.gserviceaccount.com"
    assert any("default compute" in m for m in violations(policy, pool))
    del pool["inputs"]["nodeConfig"]["serviceAccount"]
    assert violations(policy, pool)


def test_dashboard_never_a_load_balancer(resource_of: Pick) -> None:
    policy = BY_NAME["ray-dashboard-not-public"]
    ray = resource_of("prod", RAY_CLUSTER, None)
    assert violations(policy, ray) == []
    ray["inputs"]["spec"]["headGroupSpec"]["serviceType"] = "LoadBalancer"
    assert any("LoadBalancer" in m for m in violations(policy, ray))
    service: dict[str, Any] = {
        "type": SERVICE,
        "name": "dash",
        "urn": "urn:pulumi:prod::tpuray::kubernetes:core/v1:Service::dash",
        "inputs": {"spec": {"type": "LoadBalancer", "ports": [{"port": 8265}]}},
    }
    assert violations(policy, service)
    service["inputs"]["spec"]["type"] = "ClusterIP"
    assert violations(policy, service) == []


def test_deletion_protection_in_production(resource_of: Pick) -> None:
    policy = BY_NAME["gke-deletion-protection-production"]
    prod = resource_of("prod", CLUSTER, None)
    assert violations(policy, prod) == []
    prod["inputs"]["deletionProtection"] = False
    assert any("production" in m for m in violations(policy, prod))
    dev = resource_of("dev", CLUSTER, None)
    assert dev["inputs"]["deletionProtection"] is False
    assert violations(policy, dev) == []  # dev is not a production stack
    assert violations(policy, dev, {"productionStacks": ["dev"]})  # unless the pack's config says so


def test_worker_group_chips(resource_of: Pick) -> None:
    policy = BY_NAME["ray-tpu-worker-group-chips"]
    ray = resource_of("prod", RAY_CLUSTER, None)
    assert violations(policy, ray) == []
    groups = ray["inputs"]["spec"]["workerGroupSpecs"]
    v5p = next(g for g in groups if g["groupName"] == "v5p-train")
    assert v5p["numOfHosts"] == 16
    v5p["numOfHosts"] = 8
    assert any("numOfHosts 8" in m and "64 chips" in m for m in violations(policy, ray))
    del v5p["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
    assert any("nodeSelector" in m for m in violations(policy, ray))


# ---- stack rules (CrossGuard stack validation policies) ----------------------------------------------------
MAINTENANCE_RULE = "tpu-static-slices-maintenance-production"


def stack_violations(resources: list[dict[str, Any]], config: dict[str, Any] | None = None) -> list[str]:
    from pulumi_policy import PolicyResource, StackValidationArgs

    from tpuray.components.review.policy_pack import STACK_POLICIES

    found: list[str] = []
    policy_resources = [
        PolicyResource(r["type"], r["inputs"], r["urn"], r["name"], None, None, None, [], {})  # type: ignore[arg-type]
        for r in resources
    ]
    for policy in (p for p in STACK_POLICIES if p.name == MAINTENANCE_RULE):
        policy.validate(StackValidationArgs(policy_resources, config), lambda m, urn=None: found.append(m))  # type: ignore[misc]
    return found


def _without_maintenance(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(resources)
    for r in out:
        if r["type"] == CLUSTER:
            r["inputs"].pop("maintenancePolicy", None)
    return out


def test_static_multi_host_slices_in_production_need_a_window_or_exclusion(plans: dict[str, Plan]) -> None:
    prod = plans["prod"].resources
    assert stack_violations(prod) == []  # prod declares a weekend window
    bare = _without_maintenance(prod)
    found = stack_violations(bare)
    # the two static v5p slices are flagged; the v6e flex-start pool autoscales from zero and is not
    assert sorted(m.split(":", 1)[0] for m in found) == ["v5p-train-v5p-train-0", "v5p-train-v5p-train-1"]
    assert all("v5p-128" in m and "tpuray:maintenance" in m for m in found)
    # the plan's own rule run agrees
    resources = [Resource(r["type"], r["name"], r["inputs"], r["urn"]) for r in bare]
    assert len([v for v in check_resources(resources) if v.rule == MAINTENANCE_RULE]) == 2
    # an exclusion alone is enough
    with_exclusion = copy.deepcopy(bare)
    cluster = next(r for r in with_exclusion if r["type"] == CLUSTER)
    cluster["inputs"]["maintenancePolicy"] = {
        "maintenanceExclusions": [{"exclusionName": "q1", "startTime": "2026-01-01T00:00:00Z"}]
    }
    assert stack_violations(with_exclusion) == []
    # not a production stack: nothing to say
    assert stack_violations(bare, {"productionStacks": ["production"]}) == []


def test_autoscaled_multi_host_pools_are_not_static(plans: dict[str, Plan]) -> None:
    bare = _without_maintenance(plans["prod"].resources)
    for r in bare:
        if r["type"] == NODE_POOL and "v5p" in r["name"]:
            r["inputs"].pop("nodeCount", None)
            r["inputs"]["autoscaling"] = {"minNodeCount": 0, "maxNodeCount": 16, "locationPolicy": "ANY"}
    assert stack_violations(bare) == []
