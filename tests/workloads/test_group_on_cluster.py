"""Placement on an emulated multi-node Ray cluster: 2 slices x 2 hosts x 4 chips (v5e 2x4 on 4-chip VMs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tpuray.components.topology import TpuSlice
from tpuray.workloads.pjrt import chip_env
from tpuray.workloads.placement import LABEL_SLICE_NAME, LABEL_WORKER_ID, PlacementError

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLICE = TpuSlice.parse("v5e", "2x4", "ct5lp-hightpu-4t")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    from tpuray.workloads.emulation import EmulatedCluster

    with EmulatedCluster(SLICE, slices=2) as c:
        ray.init(address=c.address, log_to_driver=False)
        yield
        ray.shutdown()


def test_two_slices_every_chip_one_worker(cluster: None) -> None:
    from tpuray.workloads.group import WorkerGroup

    assert ray.cluster_resources()["TPU"] == 2 * SLICE.chips
    group = WorkerGroup.create(SLICE, num_slices=2)
    try:
        assert group.world_size == 2 * SLICE.chips
        assert ray.available_resources().get("TPU", 0) == 0  # no chip left idle
        seats = [ray.get(a.seat.remote(0, 0)) for a in group.actors]
        nodes = {n["NodeID"]: n["Labels"] for n in ray.nodes() if n["Alive"]}
        # every worker on its own (host, chip), as each worker process reports it from Ray's runtime context
        assert len({(s.slice_name, s.worker_id, s.chip) for s in seats}) == len(seats)
        for rank, (plan, seat) in enumerate(zip(group.plans, seats, strict=True)):
            assert plan.rank == rank
            assert (plan.slice_name, plan.worker_id, plan.chip) == (seat.slice_name, seat.worker_id, seat.chip)
        # one Ray slice per replica, and the replicas on different slices
        per_replica = {p.slice_index: {p.slice_name} for p in group.plans}
        for p in group.plans:
            per_replica[p.slice_index].add(p.slice_name)
        assert all(len(v) == 1 for v in per_replica.values())
        assert len({next(iter(v)) for v in per_replica.values()}) == 2
        assert {lb.get(LABEL_SLICE_NAME) for lb in nodes.values() if LABEL_WORKER_ID in lb} == {
            next(iter(v)) for v in per_replica.values()
        }
        # the env the worker process actually holds is the PJRT env of its chip, plus MEGASCALE_*
        applied = ray.get([a.configure.remote(p) for a, p in zip(group.actors, group.plans, strict=True)])
        for plan, env in zip(group.plans, applied, strict=True):
            hosts = [f"{plan.slice_name}-{w}.local" for w in range(SLICE.hosts)]  # the emulated webhook's names
            assert {k: env[k] for k in chip_env(SLICE, plan.worker_id, plan.chip, hosts)} == chip_env(
                SLICE, plan.worker_id, plan.chip, hosts
            )
            assert env["MEGASCALE_SLICE_ID"] == str(plan.slice_index)
            assert env["MEGASCALE_NUM_SLICES"] == "2"
    finally:
        group.shutdown()


def test_job_larger_than_the_cluster_is_refused(cluster: None) -> None:
    from tpuray.workloads.group import WorkerGroup

    with pytest.raises(PlacementError, match="needs 3"):
        WorkerGroup.create(SLICE, num_slices=3)
    with pytest.raises(PlacementError, match="straddle"):
        WorkerGroup.create(SLICE, chips=SLICE.chips + SLICE.chips_per_host)


def test_one_slice_job_takes_one_whole_slice(cluster: None) -> None:
    from tpuray.workloads.group import WorkerGroup

    group = WorkerGroup.create(SLICE, chips=SLICE.chips)
    try:
        assert {p.slice_name for p in group.plans} == {group.plans[0].slice_name}
        assert ray.available_resources().get("TPU", 0) == SLICE.chips  # the other slice stays free
    finally:
        group.shutdown()


def test_topology_the_cluster_lacks_is_refused(cluster: None) -> None:
    from tpuray.workloads.group import WorkerGroup

    with pytest.raises(PlacementError, match=r"no idle v6e:2x2 slice.*2 x v5litepod-8 \(2x4\)"):
        WorkerGroup.create(TpuSlice.parse("v6e", "2x2"))


def test_emulated_cluster_stays_on_the_loopback(cluster: None) -> None:
    """Every node, and the driver, bind to 127.0.0.1: a local test cluster never uses the machine's address."""
    from tpuray.workloads.emulation import LOOPBACK

    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {LOOPBACK}
    assert ray.util.get_node_ip_address() == LOOPBACK
