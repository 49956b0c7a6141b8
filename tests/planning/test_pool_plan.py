"""One slice pool, one PoolPlan: its node pools, its worker group and its Kueue flavor, as rendered, all carry its
PoolScheduling, which the plan computes once per pool and in one place."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.plans import ROOT, STACKS
from tests.support.slices import ALL_SLICES, CAPACITIES, supported
from tpuray.components.catalog.names import GKE_ACCELERATOR_LABEL, GKE_TOPOLOGY_LABEL
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import ConfigError, StackConfig, load_stack_file, parse_stack_config
from tpuray.components.planning.pool_plan import PoolPlan
from tpuray.components.planning.scheduling import PoolScheduling
from tpuray.components.planning.stack_plan import StackPlan, plan_stack
from tpuray.components.review.plan import Plan
from tpuray.components.review.resource_types import NODE_POOL

FIXTURE_STACKS = sorted((ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml"))
SHIPPED = [ROOT / f"Pulumi.{s}.yaml" for s in STACKS] + FIXTURE_STACKS
GKE_NODE_LABELS = (GKE_ACCELERATOR_LABEL, GKE_TOPOLOGY_LABEL)
"""The labels GKE itself puts on a TPU node (the selector asks for them; tpuray's node labels do not carry them)."""


def _worker_groups(plan: StackPlan) -> dict[str, list[dict[str, Any]]]:
    """The rendered TPU worker groups by cluster: the shared RayCluster's, or the ephemeral RayJob's own."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in plan.manifests:
        spec = m["spec"] if m["kind"] == "RayCluster" else m["spec"].get("rayClusterSpec")
        if spec is not None:
            out[m["kind"]] = spec["workerGroupSpecs"]
    return out


def _flavors(plan: StackPlan) -> dict[str, dict[str, Any]]:
    assert plan.kueue is not None
    return {o["metadata"]["name"]: o["spec"] for o in plan.kueue.spec.objects if o["kind"] == "ResourceFlavor"}


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    """Kubernetes' rule: a toleration with the taint's key and effect, and operator Exists or the same value."""
    return any(
        t.get("key") == taint["key"]
        and t.get("effect") in (None, taint["effect"])
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        for t in tolerations
    )


def _pod_lands_on(selector: dict[str, str], tolerations: list[dict[str, Any]], node: dict[str, Any]) -> bool:
    """A pod with this node selector and these tolerations is schedulable on a node with these labels and taints."""
    labels = node["labels"]
    return all(labels.get(k) == v for k, v in selector.items()) and all(
        _tolerated(t, tolerations) for t in node["taints"]
    )


def _node(labels: dict[str, str], taints: list[dict[str, Any]], s: TpuSlice) -> dict[str, Any]:
    """A node of the pool as GKE runs it: the declared labels, plus the accelerator and topology GKE adds."""
    gke = {GKE_ACCELERATOR_LABEL: s.gke_accelerator, GKE_TOPOLOGY_LABEL: s.topology}
    return {"labels": {**labels, **gke}, "taints": taints}


def check_pools_carry_their_scheduling(cfg: StackConfig, plan: StackPlan) -> None:
    """Every pool's rendered node pools, worker group and Kueue flavor carry its PoolScheduling; its worker pods
    and its flavor land on its nodes and on no other pool's."""
    groups = _worker_groups(plan)
    flavors = _flavors(plan) if plan.kueue is not None else {}
    assert [p.name for p in plan.pools] == [p.name for p in cfg.slice_pools]
    for pool in plan.pools:
        sch = pool.scheduling
        assert sch == PoolScheduling.of(next(p for p in cfg.slice_pools if p.name == pool.name))
        selector, tolerations = sch.pod_node_selector(), sch.k8s_tolerations()
        nodes = []
        for np in pool.node_pools:
            assert np.labels == sch.slice_node_labels(np.name if np.slice_index is not None else pool.name)
            assert np.taints == sch.node_taints
            taints = [{"key": t.key, "value": t.value, "effect": t.k8s_effect} for t in np.taints]
            nodes.append(_node(np.labels, taints, pool.tpu_slice))
        assert nodes, pool.name
        # the worker group: in the shared RayCluster unless the pool stays out of it, in the job's own cluster
        # when the job trains on it
        rendered = [(kind, g) for kind, gs in groups.items() for g in gs if g["groupName"] == pool.group.name]
        expected_kinds = set()
        if pool.worker_group is not None and not plan.ephemeral:
            expected_kinds.add("RayCluster")
        if plan.ephemeral and cfg.workload_pool().name == pool.name:
            expected_kinds.add("RayJob")
        assert {kind for kind, _ in rendered} == expected_kinds, pool.name
        for kind, g in rendered:
            pod = g["template"]["spec"]
            assert pod["nodeSelector"] == selector and pod["tolerations"] == tolerations
            assert pod["terminationGracePeriodSeconds"] == pool.drain.grace_seconds
            size = (g["minReplicas"], g["maxReplicas"])
            whole = pool.slice_pool.slices
            assert size == ((whole, whole) if kind == "RayJob" else (pool.slice_pool.min_slices, whole))
            assert all(_pod_lands_on(selector, tolerations, n) for n in nodes)
        assert (pool.kueue is None) == (plan.kueue is None) == (not cfg.kueue.enabled)
        if plan.kueue is not None and pool.kueue is not None:
            flavor = flavors[pool.kueue.quota.flavor]
            assert flavor == {"nodeLabels": selector, "tolerations": tolerations}
            assert plan.kueue.spec.quota_of(pool.name) == pool.kueue.quota
        # and no other pool's pods land on this pool's nodes
        for other in plan.pools:
            if other.name != pool.name:
                o = other.scheduling
                assert not any(_pod_lands_on(o.pod_node_selector(), o.k8s_tolerations(), n) for n in nodes)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_each_shipped_stacks_pools_carry_their_scheduling(path: Path) -> None:
    cfg = load_stack_file(path)
    check_pools_carry_their_scheduling(cfg, plan_stack(cfg, path.name.split(".")[1]))


@pytest.mark.parametrize("stack", STACKS)
def test_the_declared_node_pools_carry_the_pool_plans_labels_and_taints(plans: dict[str, Plan], stack: str) -> None:
    """Read back from what the program declared (the engine's node pools), not from the plan's own specs."""
    plan = plans[stack].stack_plan
    declared = {
        r["inputs"]["name"]: r["inputs"]["nodeConfig"] for r in plans[stack].resources if r["type"] == NODE_POOL
    }
    for pool in plan.pools:
        sch = pool.scheduling
        for np in pool.node_pools:
            node = declared[np.name]
            assert node["labels"] == sch.slice_node_labels(np.name if np.slice_index is not None else pool.name)
            assert [(t["key"], t["value"], t["effect"]) for t in node["taints"]] == [
                (t.key, t.value, t.effect) for t in sch.node_taints
            ]


def _capacity(draw: st.DrawFn, s: TpuSlice) -> str:
    return draw(st.sampled_from([c for c in sorted(CAPACITIES) if supported(s, c)]))


EAST5 = [s for s in ALL_SLICES if s.generation in ("v5p", "v6e", "v5e") and s.hosts <= 64]
"""Shapes us-east5-a offers (tpu_locations: v5p and v6e, v5e on reservations), at most 64 hosts a slice: three pools
of three such slices fit the default pods range's 1,024 nodes."""


@st.composite
def stack_values(draw: st.DrawFn) -> dict[str, Any]:
    """A stack of one to three slice pools of any us-east5-a shape and capacity type, trained on one of them."""
    shapes = draw(st.lists(st.sampled_from(EAST5), min_size=1, max_size=3))
    pools: list[dict[str, Any]] = []
    for i, s in enumerate(shapes):
        cap = _capacity(draw, s)
        dws = cap in ("flex-start", "queued")
        auto = (
            {"enabled": True, "minSlices": 0}
            if dws
            else draw(
                st.sampled_from(
                    [{"enabled": False}, {"enabled": True, "minSlices": 0}, {"enabled": True, "minSlices": 1}]
                )
            )
        )
        pools.append(
            {
                "name": f"p{i}",
                "generation": s.generation,
                "topology": s.topology,
                "machineType": s.machine_type,
                "slices": draw(st.integers(1, 3)),
                "capacity": CAPACITIES[cap],
                "autoscaling": auto,
            }
        )
    trained = draw(st.integers(0, len(pools) - 1))
    queued = any(p["capacity"]["type"] == "queued" for p in pools)
    ephemeral = pools[trained]["capacity"]["type"] == "queued" or draw(st.booleans())
    return {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "cluster": {"name": "tpu"},
        "slicePools": pools,
        "kueue": {"enabled": queued or ephemeral or draw(st.booleans())},
        "ray": {"jobMode": "ephemeral" if ephemeral else "shared"},
        "workload": {"slicePool": f"p{trained}"},
    }


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.filter_too_much])  # no wall-clock bounds
@given(values=stack_values())
def test_each_generated_stacks_pools_carry_their_scheduling(values: dict[str, Any]) -> None:
    try:
        cfg = parse_stack_config(values)
    except ConfigError:
        assume(False)  # a combination the config refuses (each refusal has its own test)
        raise
    check_pools_carry_their_scheduling(cfg, plan_stack(cfg, "gen"))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the pools ``PoolScheduling.of`` is called for, while the test runs."""
    calls: list[str] = []
    real = PoolScheduling.of.__func__  # type: ignore[attr-defined]

    def of(cls: type[PoolScheduling], pool: Any) -> PoolScheduling:
        calls.append(pool.name)
        result: PoolScheduling = real(cls, pool)
        return result

    monkeypatch.setattr(PoolScheduling, "of", classmethod(of))
    yield calls


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_stack_plan_computes_each_pools_scheduling_once(path: Path, counted: list[str]) -> None:
    cfg = load_stack_file(path)
    plan = plan_stack(cfg, "test")
    assert counted == [p.name for p in cfg.slice_pools]
    # and every piece holds that one object
    for pool in plan.pools:
        assert isinstance(pool, PoolPlan)
        assert pool.group.scheduling is pool.scheduling
    for g in plan.ray.params.groups:
        assert g.scheduling is next(p.scheduling for p in plan.pools if p.name == g.name)


def _calls_of_pool_scheduling_of(path: Path) -> list[str]:
    """``PoolScheduling.of(...)`` (or ``cls.of`` inside the class) calls in a module, as ``<module>:<innermost
    enclosing function>`` (``<module>`` at its top level)."""
    found: list[str] = []

    def visit(node: ast.AST, where: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "of":
                owner = getattr(child.func.value, "id", None)
                if owner == "PoolScheduling" or (in_class and owner == "cls"):
                    found.append(f"{path.relative_to(ROOT)}:{where}")
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name, in_class)
            elif isinstance(child, ast.ClassDef):
                visit(child, where, child.name == "PoolScheduling")
            else:
                visit(child, where, in_class)

    visit(ast.parse(path.read_text()), "<module>", False)
    return found


def test_pool_scheduling_is_made_in_one_place_in_the_package() -> None:
    """Beyond what a plan calls: no planner, review or doctor module makes a pool's scheduling on its own."""
    calls = [c for path in sorted((ROOT / "components").rglob("*.py")) for c in _calls_of_pool_scheduling_of(path)]
    assert calls == ["components/planning/pool_plan.py:pool_plan"]
