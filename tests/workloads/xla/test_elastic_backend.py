"""Elastic whole-slice training on PyTorch/XLA: the scaling config's (min, max) bounds, and every worker's env
recomputed from the live worker group at each start, whatever its pod carried."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import XlaChipConfig, chip, tpu_scaling_config
from tpuray.workloads.api.worker import bind
from tpuray.workloads.placement.seats import Seat, assign_chips
from tpuray.workloads.placement.worker_env import MEGASCALE_PREFIX
from tpuray.workloads.sharding import live_mesh
from tpuray.workloads.xla.backend import apply_assignment, check_scaling_config

V5P = TpuSlice.parse("v5p:2x2x2")  # two hosts of four chips


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 6).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))))
def test_elastic_bounds_are_whole_slices_of_workers(case: tuple[int, int]) -> None:
    n, lo = case
    cfg = tpu_scaling_config(V5P, num_slices=n, min_slices=lo)  # Ray's own TPU checks run here
    assert cfg.elasticity_enabled and cfg.num_workers == (8 * lo, 8 * n)
    assert (cfg.min_workers, cfg.max_workers) == (8 * lo, 8 * n)
    check_scaling_config(XlaChipConfig(), cfg)
    assert not tpu_scaling_config(V5P, num_slices=n).elasticity_enabled


@pytest.mark.parametrize("bad", [0, 3, 4, 1.5, True, "1"])
def test_elastic_bounds_that_are_not_whole_slices_below_the_most_are_refused(bad: object) -> None:
    valid = r"whole slices; valid: an integer from 1 to num_slices - 1 \(2\)"
    with pytest.raises(ValueError, match=rf"min_slices=.*{valid}"):
        tpu_scaling_config(V5P, num_slices=3, min_slices=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["min_workers", "max_workers"])
def test_a_bound_that_is_not_whole_slices_is_refused_naming_it(field: str) -> None:
    good = tpu_scaling_config(V5P, num_slices=3, min_slices=1)
    asked = SimpleNamespace(
        use_gpu=False,
        use_tpu=True,
        resources_per_worker=good.resources_per_worker,
        topology=good.topology,
        accelerator_type=good.accelerator_type,
        num_workers=(8, 24),
        min_workers=8,
        max_workers=24,
    )
    setattr(asked, field, 12)
    with pytest.raises(ValueError, match=rf"ScalingConfig.{field} = 12: not a whole number of v5p:2x2x2 slices"):
        check_scaling_config(XlaChipConfig(), asked)


def _seats(num_slices: int) -> list[Seat]:
    out: list[Seat] = []
    for i in range(num_slices):
        hosts = tuple(f"s{i}-h{w}.tpu" for w in range(V5P.hosts))
        for w in range(V5P.hosts):
            for c in range(V5P.chips_per_host):
                out.append(Seat(len(out), i, f"slice-{i}", w, c, f"10.0.{i}.{w}", hostnames=hosts))
    return out


STALE = {
    "MEGASCALE_NUM_SLICES": "3",
    "MEGASCALE_SLICE_ID": "2",
    "MEGASCALE_COORDINATOR_ADDRESS": "gone-host.tpu:8081",
    "MEGASCALE_PORT": "1",
    "MEGASCALE_OTHER": "x",
}


@pytest.fixture
def planted() -> Iterator[None]:
    """A replacement pod's env as a provider may leave it: a three-slice job's MEGASCALE_* values (the whole env is
    put back afterwards: apply_assignment sets the process's env, as on a worker)."""
    saved = dict(os.environ)
    os.environ.update(STALE)
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["TPU_VISIBLE_CHIPS"] = "3"  # a stale per-chip value too
    try:
        yield
    finally:
        bind(None)
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.usefixtures("planted")
@pytest.mark.parametrize("live", [2, 1])
def test_every_worker_gets_the_live_groups_multislice_env_not_its_pods(live: int) -> None:
    assignments = assign_chips(V5P, live, _seats(live))
    for a in assignments:
        env = apply_assignment(a)
        megascale = {k: v for k, v in env.items() if k.startswith(MEGASCALE_PREFIX)}
        if live == 1:
            assert megascale == {}  # one slice sets none, and none of the pod's stays
        else:
            assert megascale["MEGASCALE_NUM_SLICES"] == str(live)
            assert megascale["MEGASCALE_SLICE_ID"] == str(a.slice_index)
            assert megascale["MEGASCALE_COORDINATOR_ADDRESS"].startswith("s0-h0.tpu:")
            assert "MEGASCALE_OTHER" not in megascale
        assert env["TPU_VISIBLE_CHIPS"] == str(a.chip)
        assert env["CLOUD_TPU_TASK_ID"] == str(a.worker_id * V5P.chips_per_host + a.chip)
        info = chip()
        assert (info.num_slices, info.world_size, info.chips_per_slice) == (live, 8 * live, 8)
        assert info.slice_index == a.slice_index and info.rank == a.rank


@pytest.mark.usefixtures("planted")
def test_the_live_mesh_follows_each_resize() -> None:
    """Three slices, then two after a loss, then three again: the data axis shrinks and grows over DCN, FSDP and
    tensor groups stay inside a slice."""
    for live in (3, 2, 3):
        apply_assignment(assign_chips(V5P, live, _seats(live))[0])
        plan = live_mesh(fsdp=4, tensor=2)
        assert plan.shape == (live, 4, 2) and plan.dcn_shape == (live, 1, 1) and plan.ici_shape == (1, 4, 2)
