"""Ray workers in the plan's topology: one per TPU chip, on one worker pod per host.

The expected numbers are derived from the stack config and the declared RayCluster (slices x chips, worker
pods x ``google.com/tpu``), never from the code under test, and the picture is checked mark by mark: every
``ray-worker`` dot sits inside a chip, no chip has two, so a picture with one dot per host fails.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.support.plans import STACKS
from tpuray.components.catalog.names import TPU_RESOURCE
from tpuray.components.catalog.topology import GENERATIONS, TpuSlice
from tpuray.components.cli import build_parser
from tpuray.components.review.plan import Plan
from tpuray.components.review.pool_views import PoolView, RayGroup
from tpuray.components.review.render import summary_table, topology_markdown
from tpuray.components.review.resource_types import RAY_CLUSTER
from tpuray.components.review.svg import COLORS, MAX_SLICES_DRAWN, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def _classed(svg: str, cls: str) -> list[ET.Element]:
    return [e for e in ET.fromstring(svg).iter() if e.get("class") == cls]


def _marks_by_slice(svg: str) -> dict[tuple[str, int], int]:
    """Ray worker marks per drawn slice, after checking that each one sits inside its own chip."""
    out: dict[tuple[str, int], int] = {}
    for g in _classed(svg, "slice"):
        chips = [
            (int(c.get("x", "")), int(c.get("y", "")), int(c.get("width", "")), int(c.get("height", "")))
            for c in g.iter(f"{SVG}rect")
            if c.get("class") == "chip"
        ]
        taken: set[int] = set()
        marks = [m for m in g.iter() if m.get("class") == "ray-worker"]
        for m in marks:
            cx, cy = int(m.get("cx", "")), int(m.get("cy", ""))
            inside = [i for i, (x, y, w, h) in enumerate(chips) if x < cx < x + w and y < cy < y + h]
            assert len(inside) == 1, f"a Ray worker mark at ({cx},{cy}) is not inside a chip"
            assert inside[0] not in taken, f"two Ray worker marks on one chip at ({cx},{cy})"
            taken.add(inside[0])
        out[(g.get("data-pool", ""), int(g.get("data-slice", "")))] = len(marks)
    return out


def _worker_groups(plan: Plan) -> dict[str, dict[str, int]]:
    """Per worker group (by name): pods per slice, chips each pod requests, max replicas, read from the
    declared RayCluster, or from the RayJob that brings its own cluster (``ray.jobMode: ephemeral``)."""
    groups: dict[str, dict[str, int]] = {}
    for r in plan.resources:
        if r["type"] == RAY_CLUSTER:
            spec = r["inputs"]["spec"]
        elif r["type"] == "kubernetes:ray.io/v1:RayJob" and "rayClusterSpec" in r["inputs"]["spec"]:
            spec = r["inputs"]["spec"]["rayClusterSpec"]
        else:
            continue
        for g in spec["workerGroupSpecs"]:
            res = g["template"]["spec"]["containers"][0]["resources"]
            tpu = int((res.get("limits") or res["requests"])[TPU_RESOURCE])
            groups[g["groupName"]] = {"pods": int(g["numOfHosts"]), "tpu": tpu, "max": int(g["maxReplicas"])}
    return groups


@pytest.mark.parametrize("stack", STACKS)
def test_one_ray_worker_per_chip_in_the_stacks(plans: dict[str, Plan], stack: str) -> None:
    """In the real stacks every chip of a slice has a Ray worker: worker pods x google.com/tpu == chips."""
    plan = plans[stack]
    groups = _worker_groups(plan)
    # An ephemeral job's cluster holds the training pool only; the other pools serve jobs submitted to the queue.
    ephemeral = plan.config.ray.job_mode == "ephemeral"
    pools = [plan.config.workload_pool()] if ephemeral else plan.config.slice_pools
    for pool in pools:
        g = groups[pool.name]
        assert g["pods"] == pool.tpu_slice.hosts
        assert g["pods"] * g["tpu"] == pool.tpu_slice.chips


@pytest.mark.parametrize("stack", STACKS)
def test_svg_marks_one_ray_worker_per_chip(plans: dict[str, Plan], stack: str) -> None:
    plan = plans[stack]
    svg = render_svg(stack, plan.pools)
    marks = _marks_by_slice(svg)
    groups = _worker_groups(plan)
    expected: dict[tuple[str, int], int] = {}
    for pool in plan.config.slice_pools:
        with_workers = min(groups[pool.name]["max"], pool.slices) if pool.name in groups else 0
        for i in range(min(pool.slices, MAX_SLICES_DRAWN)):
            expected[(pool.name, i)] = pool.tpu_slice.chips if i < with_workers else 0
    assert marks == expected
    total = sum(expected.values())
    assert len(_classed(svg, "ray-worker")) == total
    # a mark per host (per Ray worker pod) would not do: every drawn slice with workers has more chips than hosts
    hosts = {p.name: p.tpu_slice.hosts for p in plan.config.slice_pools}
    assert total and all(n > hosts[name] for (name, _), n in expected.items() if n)


@pytest.mark.parametrize("stack", STACKS)
def test_topology_markdown_counts_pods_and_workers(plans: dict[str, Plan], stack: str) -> None:
    plan = plans[stack]
    md = topology_markdown(stack, plan.pools, "topology.svg")
    lines = md.splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| pool |")).strip("|").split("|")]
    pods_col = header.index("Ray worker pods (max)")
    workers_col = header.index("Ray workers, one per chip (max)")
    rows = {
        r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| "))
    }
    total_pods = total_workers = 0
    with_group = [plan.config.workload_pool()] if plan.config.ray.job_mode == "ephemeral" else plan.config.slice_pools
    for pool in plan.config.slice_pools:
        row = rows[pool.name]
        pods, workers = pool.slices * pool.tpu_slice.hosts, pool.slices * pool.tpu_slice.chips
        if pool not in with_group:  # no worker group of the stack targets it (jobs come through the queue)
            pods = workers = 0
        assert (int(row[pods_col].replace(",", "")), int(row[workers_col].replace(",", ""))) == (pods, workers)
        total_pods, total_workers = total_pods + pods, total_workers + workers
    total = rows["**total**"]
    assert (int(total[pods_col].replace(",", "")), int(total[workers_col].replace(",", ""))) == (
        total_pods,
        total_workers,
    )


def test_summary_and_heading_say_workers_on_pods(plans: dict[str, Plan]) -> None:
    plan = plans["prod"]
    text = summary_table("prod", plan.resources, plan.pools)
    svg = render_svg("prod", plan.pools)
    for pool in plan.config.slice_pools:
        phrase = (
            f"{pool.slices * pool.tpu_slice.chips} Ray workers (one per chip) on {pool.slices * pool.tpu_slice.hosts} "
            "pods"
        )
        assert phrase in text
        assert phrase in svg
    assert re.search(r"\b4 Ray workers \(one per chip\) on 1 pod\b", render_svg("dev", plans["dev"].pools))


def _pool(spec: str, slices: int, group: dict[str, Any] | None, min_slices: int = 0) -> PoolView:
    s = TpuSlice.parse(spec)
    ray = (
        RayGroup(
            cluster="c",
            name="g",
            pool="p",
            replicas=group["max"],
            min_replicas=0,
            max_replicas=group["max"],
            num_of_hosts=group["pods"],
            tpu_per_pod=group["tpu"],
            ray_tpu_per_pod=group["tpu"],
        )
        if group
        else None
    )
    return PoolView(
        name="p",
        tpu_slice=s,
        min_slices=min_slices,
        max_slices=slices,
        capacity="spot",
        zone=None,
        node_pools=(),
        ray_group=ray,
    )


@pytest.mark.parametrize(
    ("spec", "slices", "group", "per_slice"),
    [
        ("v6e:2x4:ct6e-standard-8t", 2, {"pods": 1, "tpu": 8, "max": 2}, [8, 8]),  # 8 chips a pod
        ("v5e:1x1", 3, {"pods": 1, "tpu": 1, "max": 3}, [1, 1, 1]),  # 1 chip a pod
        ("v6e:4x4", 1, {"pods": 4, "tpu": 2, "max": 1}, [8]),  # pods asking for half their host's chips
        ("v6e:2x4:ct6e-standard-4t", 3, {"pods": 2, "tpu": 4, "max": 2}, [8, 8, 0]),  # group reaches 2 of 3
        ("v6e:4x4", 10, {"pods": 4, "tpu": 4, "max": 10}, [16] * MAX_SLICES_DRAWN),  # only drawn slices
        ("v6e:4x4", 2, None, [0, 0]),  # no worker group, no workers
    ],
)
def test_marks_follow_the_worker_group(
    spec: str, slices: int, group: dict[str, Any] | None, per_slice: list[int]
) -> None:
    pool = _pool(spec, slices, group)
    svg = render_svg("s", [pool])
    assert _marks_by_slice(svg) == {("p", i): n for i, n in enumerate(per_slice)}
    pods = min(group["max"], slices) * group["pods"] if group else 0
    workers = pods * group["tpu"] if group else 0
    assert (pool.max_ray_worker_pods, pool.max_ray_workers) == (pods, workers)
    assert f"{workers} Ray workers (one per chip) on {pods} pods" in svg


def test_plan_draws_which_pools_kueue_reaches(plans: dict[str, Plan]) -> None:
    dws = plans["prod-dws"]
    admission = {p.name: p.admission for p in dws.pools}
    assert admission == {"v5p-train": "Kueue", "v6e-dws": "Kueue + ProvisioningRequest"}
    assert {p.name: p.kueue.chips for p in dws.pools if p.kueue} == {"v5p-train": 64, "v6e-dws": 16}
    svg = render_svg("prod-dws", dws.pools)
    assert "reservation, via Kueue;" in svg and "queued, via Kueue + ProvisioningRequest;" in svg
    text = summary_table("prod-dws", dws.resources, dws.pools)
    assert "Kueue + ProvisioningRequest" in text.splitlines()[-1]
    # without Kueue every pool is reached directly
    assert {p.admission for p in plans["prod"].pools} == {"direct"}
    assert "via direct;" in render_svg("prod", plans["prod"].pools)


def test_every_catalog_generation_has_its_own_colour_and_is_named_in_the_cli_help() -> None:
    """Colours and help text come from the catalog: a new generation needs only its row."""
    names = [g.name for g in GENERATIONS]
    assert list(COLORS) == names
    assert len(set(COLORS.values())) == len(names)
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    topology = sub.choices["topology"]  # type: ignore[index]
    text = next(a.help for a in topology._actions if a.dest == "generation") or ""
    for g in GENERATIONS:
        assert all(n in text for n in (g.name, *g.aliases)), g.name
