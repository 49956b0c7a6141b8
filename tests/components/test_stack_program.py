"""``infra/__main__.py`` end to end under the mock engine, with config set the way the Pulumi CLI sets it."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.kuberay_schema import schema_errors, tpu_chip_mismatches
from tpuray.components.catalog.topology import generation
from tpuray.components.config import ConfigError, load_stack_file
from tpuray.components.planning.pool_plan import pool_plans
from tpuray.components.review.engine import ProgramRun

PROGRAM = er.ROOT / "infra" / "__main__.py"
STACKS = ("dev", "prod")


def run_program(stack: str, via: str = "set_config", config: dict[str, str] | None = None) -> ProgramRun:
    cfg = config if config is not None else er.cli_config(stack)
    if via == "env":  # PULUMI_CONFIG: the JSON bag the CLI hands a program
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PULUMI_CONFIG", json.dumps(cfg))
            return er.run(PROGRAM, stack=stack, config={})[0]
    return er.run(PROGRAM, stack=stack, config=cfg)[0]


def snapshot(run: ProgramRun) -> list[tuple[str, str, str]]:
    return sorted((r["type"], r["name"], json.dumps(r["inputs"], sort_keys=True)) for r in run.resources)


@pytest.fixture(scope="module", params=STACKS)
def program_run(request: pytest.FixtureRequest) -> tuple[str, ProgramRun]:
    return request.param, run_program(request.param)


def test_registers_the_expected_resources(program_run: tuple[str, ProgramRun]) -> None:
    stack, rec = program_run
    cfg = load_stack_file(er.ROOT / f"Pulumi.{stack}.yaml")
    plans = [p for pool in pool_plans(cfg) for p in pool.node_pools]
    counts = Counter(rec.types())
    assert counts["tpuray:index:GkeCluster"] == 1
    assert counts["tpuray:index:TpuSlicePool"] == len(cfg.slice_pools)
    assert (
        counts["tpuray:index:RayPlatform"] == counts["tpuray:index:RayTpuCluster"] == counts["tpuray:index:RayTpuJob"]
    )
    assert counts["tpuray:index:RayTpuJob"] == 1
    assert counts["gcp:container/nodePool:NodePool"] == 1 + len(plans)  # system pool + TPU pools
    assert counts["gcp:container/cluster:Cluster"] == 1
    assert counts["kubernetes:ray.io/v1:RayCluster"] == counts["kubernetes:ray.io/v1:RayJob"] == 1
    assert counts["pulumi:providers:gcp"] == counts["pulumi:providers:kubernetes"] == 1
    assert counts["gcp:compute/resourcePolicy:ResourcePolicy"] == len({p.workload_policy for p in plans} - {None})
    # every GCP resource uses the explicit provider (no gcp:project needed in stack config)
    gcp_provider = rec.one("pulumi:providers:gcp")
    assert gcp_provider["inputs"]["project"] == cfg.project and gcp_provider["inputs"]["region"] == cfg.region
    for r in rec.resources:
        if r["custom"] and r["type"].startswith("gcp:"):
            assert "pulumi:providers:gcp::gcp" in r["provider"], r
        if r["custom"] and r["type"].startswith("kubernetes:"):
            assert "pulumi:providers:kubernetes" in r["provider"], r
    assert not rec.invokes  # no data source look-ups: the program needs no cloud


def test_creation_order(program_run: tuple[str, ProgramRun]) -> None:
    _, rec = program_run
    # the Workload Identity pool exists only once the cluster does
    for wi in rec.of_type("gcp:serviceaccount/iAMMember:IAMMember"):  # the head's and the workers' bindings
        assert any(d.endswith("::gke-cluster") for d in er.depends_on(wi)), er.depends_on(wi)
    # the RayCluster waits for its identity, its bucket access and every TPU node pool
    rc = rec.one("kubernetes:ray.io/v1:RayCluster")
    tpu_pools = [r["name"] for r in rec.of_type("gcp:container/nodePool:NodePool") if r["inputs"]["name"] != "system"]
    ray_identity = (
        "ray-ray-ksa",
        "ray-ray-worker-ksa",
        "ray-ray-workload-identity",
        "ray-ray-worker-workload-identity",
    )
    for name in (*ray_identity, "ray-checkpoints-object-user", *tpu_pools):
        assert any(d.endswith(f"::{name}") for d in er.depends_on(rc)), (name, er.depends_on(rc))
    job = rec.one("kubernetes:ray.io/v1:RayJob")
    assert any(d.endswith("::ray-raycluster") for d in er.depends_on(job))


def test_every_tpu_worker_group_agrees_with_its_node_pools(
    program_run: tuple[str, ProgramRun],
) -> None:
    _, rec = program_run
    cluster = rec.one("kubernetes:ray.io/v1:RayCluster")["inputs"]
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    tpu_pools = [r["inputs"] for r in rec.of_type("gcp:container/nodePool:NodePool") if r["inputs"]["name"] != "system"]
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for np in tpu_pools:
        by_pool.setdefault(np["nodeConfig"]["labels"]["tpuray.io/pool"], []).append(np)
    assert set(by_pool) == set(groups)
    for name, pools in by_pool.items():
        g = groups[name]
        pod = g["template"]["spec"]
        per_host = int(pod["containers"][0]["resources"]["limits"]["google.com/tpu"])
        accel = pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"]
        topo = pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
        gen = next(gn for gn in ("v4", "v5e", "v5p", "v6e", "tpu7x") if generation(gn).gke_accelerator == accel)
        for np in pools:
            # the node's chips (from its machine type) are what each Ray pod asks for
            assert generation(gen).machine_types[np["nodeConfig"]["machineType"]] == per_host
            size = np["autoscaling"]["maxNodeCount"] if "autoscaling" in np else np["nodeCount"]
            if g["numOfHosts"] > 1:  # one node pool per slice, as many nodes as hosts, compact or workload policy
                assert size == g["numOfHosts"]
                assert np["placementPolicy"].get("tpuTopology", topo) == topo
            else:
                assert size == g["maxReplicas"]
        assert g["maxReplicas"] == (len(pools) if g["numOfHosts"] > 1 else g["maxReplicas"])
    assert tpu_chip_mismatches(cluster["spec"]) == []


def test_manifests_are_schema_valid(program_run: tuple[str, ProgramRun]) -> None:
    _, rec = program_run
    manifests = [r["inputs"] for r in rec.resources if r["type"].startswith("kubernetes:ray.io/v1:")]
    assert len(manifests) == 2
    for m in manifests:
        assert schema_errors(m) == [], m["kind"]
    job = next(m for m in manifests if m["kind"] == "RayJob")
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": manifests[0]["metadata"]["name"]}


def test_outputs(program_run: tuple[str, ProgramRun]) -> None:
    stack, rec = program_run
    out = rec.outputs
    cfg = load_stack_file(er.ROOT / f"Pulumi.{stack}.yaml")
    assert out["clusterName"] == cfg.cluster.name
    assert "kubeconfig" in rec.secret_outputs
    assert "gke-gcloud-auth-plugin" in out["kubeconfig"]
    assert out["rayClusterName"] == cfg.cluster.name
    assert out["rayDashboardService"] == f"{cfg.ray.namespace}/{cfg.cluster.name}-head-svc"
    topo = out["topology"]
    assert topo["total_chips"] == sum(p.slices * p.tpu_slice.chips for p in cfg.slice_pools)
    assert topo["total_hosts"] == sum(p.slices * p.tpu_slice.hosts for p in cfg.slice_pools)
    assert [p["pool"] for p in topo["pools"]] == [p.name for p in cfg.slice_pools]


def test_runs_are_deterministic_and_config_may_come_from_the_environment(
    program_run: tuple[str, ProgramRun],
) -> None:
    stack, first = program_run
    again = run_program(stack, via="env" if stack == "dev" else "set_config")
    assert first.resources and snapshot(first) == snapshot(again)
    assert first.outputs == again.outputs


@pytest.mark.parametrize(
    ("key", "value", "path"),
    [
        (
            "tpuray:slicePools",
            json.dumps([{"name": "x", "generation": "v6e", "topology": "3x3"}]),
            "slicePools[0].topology",
        ),
        ("tpuray:slicePools", "[not json", "slicePools"),
        ("tpuray:project", "Bad_Project", "project"),
    ],
)
def test_config_errors_surface_before_any_resource(key: str, value: str, path: str) -> None:
    cfg = {**er.cli_config("dev"), key: value}
    with pytest.raises(ConfigError) as err:
        run_program("dev", config=cfg)
    assert any(p == path for p, _ in err.value.problems), err.value.problems
    assert err.value.registered == []  # type: ignore[attr-defined]


def test_missing_required_keys() -> None:
    with pytest.raises(ConfigError) as err:
        run_program("dev", config={})
    assert {p for p, _ in err.value.problems} >= {"project", "region", "slicePools"}
