"""Chip assignment (pure): XLA ranks, one worker per chip, whole slices, MEGASCALE, refusals."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL as LABEL_POD_TYPE
from tpuray.components.catalog.names import RAY_SLICE_NAME_LABEL as LABEL_SLICE_NAME
from tpuray.components.catalog.names import RAY_TOPOLOGY_LABEL as LABEL_TOPOLOGY
from tpuray.components.catalog.names import RAY_WORKER_ID_LABEL as LABEL_WORKER_ID
from tpuray.components.catalog.runtimes import runtime_ports
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.seats import (
    PlacementError,
    Seat,
    assign_chips,
    cluster_slices,
    describe_slices,
    slice_of_cluster,
    slices_for_job,
)
from tpuray.workloads.placement.worker_env import chip_env

SHAPES = [
    TpuSlice.parse("v5e", "2x2"),
    TpuSlice.parse("v5e", "2x4", "ct5lp-hightpu-4t"),
    TpuSlice.parse("v6e", "4x4"),
    TpuSlice.parse("v4", "2x2x2"),
    TpuSlice.parse("tpu7x", "2x2x4"),
    TpuSlice.parse("v5p", "2x2x1"),
]


def ray_like_seats(s: TpuSlice, num_slices: int, rng: random.Random, webhook: bool = True) -> list[Seat]:
    """Seats as Ray could hand them out: actors created in any order, chips assigned in any order per host."""
    seats = []
    for i in range(num_slices):
        name = f"slice-{i}"
        hostnames = tuple(f"{name}-w{w}.headless" for w in range(s.hosts)) if (webhook and s.multi_host) else ()
        for w in range(s.hosts):
            for c in rng.sample(range(s.chips_per_host), s.chips_per_host):
                seats.append(Seat(0, i, name, w, c, f"10.0.{i}.{w}", hostnames))
    rng.shuffle(seats)
    return [replace(x, actor_index=k) for k, x in enumerate(seats)]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SHAPES), st.integers(1, 3), st.randoms(use_true_random=False), st.booleans())
def test_assignment_gives_each_chip_one_rank(s: TpuSlice, n: int, rng: random.Random, webhook: bool) -> None:
    seats = ray_like_seats(s, n, rng, webhook)
    assigned = assign_chips(s, n, seats)
    assert [p.rank for p in assigned] == list(range(n * s.chips))
    assert {p.world_size for p in assigned} == {n * s.chips}
    assert len({(p.slice_index, p.worker_id, p.chip) for p in assigned}) == len(assigned)
    assert sorted(p.actor_index for p in assigned) == list(range(len(seats)))
    by_actor = {x.actor_index: x for x in seats}
    for p in assigned:
        seat = by_actor[p.actor_index]
        assert (p.slice_index, p.worker_id, p.chip) == (seat.slice_index, seat.worker_id, seat.chip)
        # ranks are slice-major, then torch_xla's task id within the slice
        assert p.rank // s.chips == p.slice_index
        assert int(p.env["CLOUD_TPU_TASK_ID"]) == p.rank % s.chips
        hosts = (
            list(seat.hostnames)
            if seat.hostnames
            else ([f"10.0.{p.slice_index}.{w}" for w in range(s.hosts)] if s.multi_host else [])
        )
        pjrt = chip_env(s, p.worker_id, p.chip, hosts)
        assert {k: p.env[k] for k in pjrt} == pjrt
        if n > 1:
            assert p.env["MEGASCALE_NUM_SLICES"] == str(n)
            assert p.env["MEGASCALE_SLICE_ID"] == str(p.slice_index)
        else:
            assert not any(k.startswith("MEGASCALE_") for k in p.env)
    if n > 1:
        assert len({p.env["MEGASCALE_COORDINATOR_ADDRESS"] for p in assigned}) == 1
        # every process binds its own MEGASCALE_PORT: no two of one host share it, and the policy opens each
        per_host: dict[tuple[int, int], set[str]] = {}
        for p in assigned:
            per_host.setdefault((p.slice_index, p.worker_id), set()).add(p.env["MEGASCALE_PORT"])
        assert all(len(ports) == s.chips_per_host for ports in per_host.values())
        (megascale,) = [r for r in runtime_ports(s, "xla") if r.name == "tpu-megascale"]
        assert {int(p.env["MEGASCALE_PORT"]) for p in assigned} == set(megascale.ports)
        # the coordinator address names the port of slice 0's host 0 chip 0 process, which listens there
        (coordinator,) = [p for p in assigned if p.slice_index == 0 and p.worker_id == 0 and p.chip == 0]
        assert assigned[0].env["MEGASCALE_COORDINATOR_ADDRESS"].endswith(f":{coordinator.env['MEGASCALE_PORT']}")


def _seats(s: TpuSlice, rng: random.Random) -> list[Seat]:
    return ray_like_seats(s, 1, rng)


def test_duplicate_chip_is_refused() -> None:
    s = SHAPES[1]
    seats = _seats(s, random.Random(0))
    a, b = seats[0], seats[1]
    seats[1] = Seat(b.actor_index, b.slice_index, b.slice_name, a.worker_id, a.chip, a.address, a.hostnames)
    with pytest.raises(PlacementError, match="duplicates"):
        assign_chips(s, 1, seats)


def test_straddling_two_ray_slices_is_refused() -> None:
    s = SHAPES[1]
    seats = _seats(s, random.Random(1))
    x = seats[0]
    seats[0] = Seat(x.actor_index, x.slice_index, "another-slice", x.worker_id, x.chip, x.address, x.hostnames)
    with pytest.raises(PlacementError, match="straddles"):
        assign_chips(s, 1, seats)


def test_one_ray_slice_cannot_serve_two_reservations() -> None:
    s = SHAPES[0]
    seats = ray_like_seats(s, 2, random.Random(2))
    seats = [Seat(x.actor_index, x.slice_index, "same", x.worker_id, x.chip, x.address, x.hostnames) for x in seats]
    with pytest.raises(PlacementError, match="serves reservations"):
        assign_chips(s, 2, seats)


def test_missing_chip_is_refused() -> None:
    s = SHAPES[2]
    with pytest.raises(PlacementError, match="missing"):
        assign_chips(s, 1, _seats(s, random.Random(3))[1:])


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(st.sampled_from(SHAPES), st.integers(1, 8), st.integers(1, 8))
def test_jobs_take_whole_slices(s: TpuSlice, k: int, available: int) -> None:
    if k <= available:
        assert slices_for_job(s, k * s.chips, None, available) == k
        assert slices_for_job(s, None, k, available) == k
    else:
        with pytest.raises(PlacementError, match="cluster has"):
            slices_for_job(s, k * s.chips, None, available)
    if s.chips > 1:
        with pytest.raises(PlacementError, match="straddle"):
            slices_for_job(s, k * s.chips + 1, None, available + k + 1)


def test_default_is_one_slice() -> None:
    assert slices_for_job(SHAPES[0], None, None, 3) == 1
    with pytest.raises(PlacementError, match="0 intact"):
        slices_for_job(SHAPES[0], None, None, 0)


def _node(slice_name: str, s: TpuSlice, worker: int, alive: bool = True) -> dict[str, object]:
    return {
        "NodeID": f"{slice_name}-{worker}",
        "Alive": alive,
        "Resources": {"CPU": 8.0, "TPU": float(s.chips_per_host)},
        "Labels": {
            LABEL_SLICE_NAME: slice_name,
            LABEL_WORKER_ID: str(worker),
            LABEL_POD_TYPE: s.pod_type,
            LABEL_TOPOLOGY: s.topology,
        },
    }


def test_cluster_slices_from_node_labels() -> None:
    a, b = TpuSlice.parse("v6e", "4x4"), TpuSlice.parse("v5e", "2x2")
    nodes = [_node("big", a, w) for w in range(a.hosts)] + [_node("small", b, 0), _node("gone", b, 0, alive=False)]
    nodes.append({"NodeID": "head", "Alive": True, "Resources": {"CPU": 4.0}, "Labels": {}})
    found = cluster_slices(nodes)
    assert [(x.name, x.chips, x.worker_ids) for x in found] == [
        ("big", a.chips, tuple(range(a.hosts))),
        ("small", b.chips, (0,)),
    ]
    want = sorted([f"1 x {a.pod_type} ({a.topology})", f"1 x {b.pod_type} ({b.topology})"])
    assert describe_slices(found) == ", ".join(want)
    assert describe_slices([]) == "no TPU slices"
    with pytest.raises(PlacementError, match="--topology"):
        slice_of_cluster(found)


@pytest.mark.parametrize("s", [*SHAPES, TpuSlice.parse("v6e", "2x4")], ids=str)
def test_slice_shape_is_read_back_from_labels(s: TpuSlice) -> None:
    nodes = [_node("x", s, w) for w in range(s.hosts)]
    assert slice_of_cluster(cluster_slices(nodes)) == s
