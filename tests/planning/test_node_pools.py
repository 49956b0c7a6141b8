"""The pure node pool planner: one slice pool -> GKE node pools, for every catalog shape and capacity mode."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.slices import ALL_SLICES, node_pools, pool, slice_capacity_st
from tpuray.components.catalog.names import POOL_LABEL, TPU_TAINT
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.planning.node_pools import (
    NodePoolSpec,
    bounded_name,
    workload_policy_name,
)

ZONE = "us-east5-a"


def plan(s: TpuSlice, capacity: str = "on-demand", slices: int = 1, **kw: object) -> list[NodePoolSpec]:
    return node_pools(pool(s, capacity, slices, **kw), ZONE, "tpuray-test")  # type: ignore[arg-type]


@settings(deadline=None)  # no wall-clock bounds
@given(sc=slice_capacity_st, slices=st.integers(1, 8), autoscale=st.booleans())
def test_every_shape_and_capacity_plans_consistently(sc: tuple[TpuSlice, str], slices: int, autoscale: bool) -> None:
    s, capacity = sc
    dws = capacity in ("flex-start", "queued")
    auto = {"enabled": autoscale or dws, "minSlices": 0}
    plans = plan(s, capacity, slices, autoscaling=auto)
    # node count == hosts: each multi-host pool holds one whole slice; a single-host pool holds them all
    assert sum(p.max_nodes for p in plans) == slices * s.hosts
    if s.multi_host:
        assert [p.name for p in plans] == [f"tpu-{i}" for i in range(slices)]
        assert all(p.max_nodes == s.hosts and p.slices == 1 for p in plans)
    else:
        assert [p.name for p in plans] == ["tpu"]
        assert plans[0].slices == slices
    for p in plans:
        assert p.tpu_slice == s and p.machine_type == s.machine_type
        assert p.taints == (TPU_TAINT,)
        assert p.labels[POOL_LABEL] == "tpu"
        assert p.node_locations == (ZONE,)
        assert (p.node_count is None) == (p.autoscaling is not None) == (p.initial_node_count is not None)
        if p.autoscaling:
            assert 0 <= p.autoscaling.min_node_count <= p.autoscaling.max_node_count
            assert p.autoscaling.min_node_count in (0, p.autoscaling.max_node_count) or not s.multi_host
        _placement_rules(s, p)
        _capacity_rules(capacity, p)


def _placement_rules(s: TpuSlice, p: NodePoolSpec) -> None:
    if not s.multi_host:
        # GKE rejects tpu_topology on single-host pools
        assert p.placement is None and p.workload_policy is None
    elif s.generation == "tpu7x":
        assert p.workload_policy is not None and p.placement is not None
        assert p.workload_policy.type == "HIGH_THROUGHPUT"
        assert p.workload_policy.accelerator_topology == s.topology
        assert p.workload_policy.region == "us-east5"
        # the workload policy, never COMPACT next to it (GKE rejects the pair); GKE stores the topology beside it
        assert p.placement.policy_name == p.workload_policy.name and p.placement.type == ""
        assert p.placement.tpu_topology == s.topology
    else:
        assert p.placement is not None and p.workload_policy is None
        assert (p.placement.type, p.placement.tpu_topology) == ("COMPACT", s.topology)
    if s.multi_host:
        assert p.autoscaling is None or p.autoscaling.location_policy == "ANY"


def _capacity_rules(capacity: str, p: NodePoolSpec) -> None:
    assert p.spot == (capacity == "spot")
    assert p.flex_start == (capacity in ("flex-start", "queued"))  # queued provisioning is flex-start's queued mode
    assert p.queued_provisioning == (capacity == "queued")
    assert p.auto_repair == (capacity not in ("flex-start", "queued"))
    r = p.reservation_affinity
    if capacity == "reservation":
        assert r is not None and r.consume_reservation_type == "SPECIFIC_RESERVATION"
        assert (r.key, r.values) == ("compute.googleapis.com/reservation-name", ("tpu-res",))
    elif capacity == "shared-reservation":
        assert r is not None and r.values == ("projects/capacity-proj/reservations/tpu-res",)
    elif capacity in ("flex-start", "queued"):
        assert r is not None and r.consume_reservation_type == "NO_RESERVATION"
        assert p.autoscaling is not None and p.autoscaling.min_node_count == 0 and p.initial_node_count == 0
    else:
        assert r is None
    assert (p.max_run_duration == "21600s") == (capacity == "flex-start")


# ---- golden-ish, one per capacity mode ----------------------------------------------------------------
V6E_4X4 = TpuSlice.parse("v6e", "4x4")


def test_on_demand_static_multislice() -> None:
    plans = plan(V6E_4X4, "on-demand", 3, autoscaling={"enabled": False})
    assert [(p.name, p.node_count, p.initial_node_count, p.autoscaling) for p in plans] == [
        ("tpu-0", 4, None, None),
        ("tpu-1", 4, None, None),
        ("tpu-2", 4, None, None),
    ]
    assert all(p.placement and p.placement.tpu_topology == "4x4" for p in plans)


def test_spot_autoscaled_keeps_min_slices_whole() -> None:
    plans = plan(V6E_4X4, "spot", 3, autoscaling={"enabled": True, "minSlices": 1})
    got = [
        (p.autoscaling.min_node_count, p.autoscaling.max_node_count, p.initial_node_count)
        for p in plans
        if p.autoscaling
    ]
    assert got == [(4, 4, 4), (0, 4, 0), (0, 4, 0)]
    assert all(p.spot and p.reservation_affinity is None for p in plans)


def test_shared_reservation() -> None:
    (p,) = plan(TpuSlice.parse("v5p", "2x2x4"), "shared-reservation", 1, autoscaling={"enabled": False})
    assert p.node_count == 4
    assert p.reservation_affinity is not None
    assert p.reservation_affinity.values == ("projects/capacity-proj/reservations/tpu-res",)


def test_flex_start() -> None:
    (p,) = plan(V6E_4X4, "flex-start")
    assert (p.flex_start, p.max_run_duration, p.auto_repair, p.initial_node_count, p.node_count) == (
        True,
        "21600s",
        False,
        0,
        None,
    )


def test_queued_provisioning() -> None:
    (p,) = plan(V6E_4X4, "queued")
    assert p.queued_provisioning and p.flex_start and p.max_run_duration is None  # maxRunDuration: the request's
    assert p.reservation_affinity is not None and p.reservation_affinity.consume_reservation_type == "NO_RESERVATION"
    assert p.autoscaling is not None and (p.autoscaling.min_node_count, p.initial_node_count) == (0, 0)


def test_single_host_pool_scales_by_node() -> None:
    (p,) = plan(TpuSlice.parse("v5e", "2x2"), "spot", 5, autoscaling={"enabled": True, "minSlices": 2})
    assert p.autoscaling is not None
    assert (p.autoscaling.min_node_count, p.autoscaling.max_node_count, p.initial_node_count) == (2, 5, 2)
    assert p.placement is None and p.autoscaling.location_policy is None


def test_v6e_2x4_machine_type_decides_single_or_multi_host() -> None:
    single = plan(TpuSlice.parse("v6e", "2x4"), slices=2)
    multi = plan(TpuSlice.parse("v6e", "2x4", "ct6e-standard-4t"), slices=2)
    assert [p.name for p in single] == ["tpu"] and single[0].placement is None
    assert [p.name for p in multi] == ["tpu-0", "tpu-1"]
    assert all(p.placement and p.placement.tpu_topology == "2x4" and p.max_nodes == 2 for p in multi)


def test_tpu7x_multi_host_uses_a_workload_policy() -> None:
    plans = plan(TpuSlice.parse("tpu7x", "4x4x4"), "on-demand", 2)
    assert {p.workload_policy for p in plans} == {plans[0].workload_policy}  # one policy, shared by the slices
    assert plans[0].workload_policy is not None
    assert plans[0].workload_policy.name == "tpuray-test-tpu-wp"


def test_single_host_without_zone_spans_the_cluster_locations() -> None:
    (p,) = node_pools(pool(TpuSlice.parse("v6e", "2x2")), None, "c")
    assert p.node_locations is None


def test_names_are_bounded_and_stable() -> None:
    long = workload_policy_name("c" * 40, "p" * 36)
    assert len(long) <= 63 and long == workload_policy_name("c" * 40, "p" * 36)
    assert bounded_name("short", 30) == "short"
    assert all(len(p.name) <= 40 for p in plan(V6E_4X4, slices=64, name="p" * 36))


def test_catalog_is_covered() -> None:
    assert {s.generation for s in ALL_SLICES} == {"v4", "v5e", "v5p", "v6e", "tpu7x"}
    assert any(s.placement == "workload-policy" for s in ALL_SLICES)
