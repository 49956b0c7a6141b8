"""The runtime rows name what the repository ships (extras, image targets), and the per-host counts the planner,
the config and the workers read follow from each row's process model."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tpuray.components.catalog.images import image_backend
from tpuray.components.catalog.runtimes import (
    BACKENDS,
    RUNTIMES,
    XLA_SPMD,
    runtime_for_tag,
    runtime_ports,
    union_ports,
)
from tpuray.components.catalog.topology import TpuSlice

ROOT = Path(__file__).resolve().parents[2]


def test_each_row_names_an_extra_and_an_image_target_the_repository_has() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    targets = set(re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "workloads" / "Dockerfile").read_text(), re.M))
    for backend, r in RUNTIMES.items():
        assert r.name == backend
        assert r.extra in extras and r.image_target in targets, backend


def test_a_tag_names_its_runtime() -> None:
    assert BACKENDS == ("xla", "torch_tpu")
    for backend, r in RUNTIMES.items():
        assert runtime_for_tag(f"0.1.0{r.tag_suffix}") == backend
        assert image_backend(f"us-docker.pkg.dev/p/tpuray/worker:0.1.0{r.tag_suffix}") == backend
    assert runtime_for_tag(None) is None and runtime_for_tag("0.1.0") is None


@pytest.mark.parametrize("spec", ["v5p:2x2x2", "v6e:2x4:ct6e-standard-8t", "tpu7x:2x2x2", "v5e:1x1"])
def test_workers_and_tpu_resources_per_host(spec: str) -> None:
    s = TpuSlice.parse(spec)
    xla, tpu = RUNTIMES["xla"], RUNTIMES["torch_tpu"]
    assert xla.workers_per_host(s) == xla.ray_tpu_per_host(s) == s.chips_per_host
    assert tpu.workers_per_host(s) == tpu.ray_tpu_per_host(s) == s.devices_per_host
    for r in RUNTIMES.values():
        assert r.tpu_resource_per_worker(s) == 1
        assert r.workers_per_slice(s) == r.workers_per_host(s) * s.hosts
        # one port per process of a host in every per-process range
        assert all(len(p.ports) in (1, r.workers_per_host(s), 2 * r.workers_per_host(s)) for p in r.ports(s))
    # SPMD: PyTorch/XLA's second process model, one worker per host holding every chip of it
    assert (XLA_SPMD.name, XLA_SPMD.package) == (xla.name, xla.package)
    assert XLA_SPMD.workers_per_slice(s) == s.hosts
    assert XLA_SPMD.tpu_resource_per_worker(s) == s.chips_per_host


def test_ports_as_the_runtime_docs_give_them() -> None:
    got = [(p.name, p.first, p.last) for p in runtime_ports(TpuSlice.parse("tpu7x:2x2x2"), "torch_tpu")]
    assert got == [("tpu-slicebuilder", 8471, 8478), ("tpu-megascale", 8080, 8095)]
    got = [(p.name, p.first, p.last) for p in runtime_ports(TpuSlice.parse("v5p:2x2x2"), "xla")]
    assert got == [("tpu-slicebuilder", 8471, 8471), ("tpu-process", 8476, 8479), ("tpu-megascale", 8081, 8084)]
    assert union_ports([TpuSlice.parse("v5p:2x2x2")], "xla") == [(8081, 8084), (8471, 8471), (8476, 8479)]
    with pytest.raises(ValueError, match="valid choices"):
        runtime_ports(TpuSlice.parse("v5p:2x2x2"), "cuda")  # type: ignore[arg-type]
