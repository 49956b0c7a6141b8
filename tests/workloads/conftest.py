"""Shared fixtures: stack files for local runs and the emulated cluster the train tests share (the ``slow`` marker
is tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from tests.support.paths import ROOT

if TYPE_CHECKING:
    from tpuray.workloads.emulation.cluster import EmulatedCluster


SHARED_SLICES = (("v5e:2x2", 2), ("v5p:2x2x2", 1), ("v6e:1x1", 1))
"""The shared cluster: two single-host v5e 2x2 slices (4 chips on one VM each; Tune's two slices), a multi-host
v5p 2x2x2 slice (8 chips on two VMs) and a one-chip v6e 1x1 slice (its own generation, so no request for it lands
on the other slices' VMs)."""


@pytest.fixture(scope="session")
def emulated_slices() -> Iterator[EmulatedCluster]:
    """One emulated cluster (:data:`SHARED_SLICES`) for every test that trains on it and leaves it as it found it:
    starting one costs tens of seconds of the suite's two cores. This driver is connected to it; the value is the
    cluster, for a test that takes a host away and brings it back (``replace_host``). The tests that
    ask for it run after the cluster group's tests that start clusters of their own (tests/conftest.py)."""
    ray = pytest.importorskip("ray")
    from tpuray.components.catalog.topology import TpuSlice
    from tpuray.workloads.emulation.cluster import RAY_METRICS_INTERVAL_S, EmulatedCluster

    # Ray's own metrics interval, not the emulation's 1 s: no test on this cluster scrapes a gauge, and every Ray
    # process reporting each second cost the idle 6-node cluster 0.15 to 0.3 of a core more (measured).
    slices = [(TpuSlice.parse(spec), n) for spec, n in SHARED_SLICES]
    with EmulatedCluster(slices, metrics_interval_s=RAY_METRICS_INTERVAL_S) as c:
        ray.init(address=c.address, log_to_driver=False)
        yield c
        ray.shutdown()


@pytest.fixture
def stack_file(tmp_path: Path) -> Path:
    """The dev stack file (one v5e 2x2 slice), copied so a test can tweak it."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    out = tmp_path / "Pulumi.dev.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out
