"""``infra/__main__.py`` end to end under the mock engine, with config set the way the Pulumi CLI sets it."""

from __future__ import annotations

import json
import runpy
from collections import Counter
from typing import Any

import pytest
import tpuray_mocks as tm  # installs the mocks first
from kuberay_schema import schema_errors, tpu_chip_mismatches

from tpuray.components.config import ConfigError, load_stack_file
from tpuray.components.planning.node_pools import slice_pool_node_pools
from tpuray.components.topology import generation

PROGRAM = tm.ROOT / "infra" / "__main__.py"
STACKS = ("dev", "prod")


def run_program(
    stack: str, via: str = "set_config", config: dict[str, str] | None = None
) -> tuple[tm.Recorder, dict[str, Any]]:
    cfg = config if config is not None else tm.cli_config(stack)

    def build() -> dict[str, Any]:
        runpy.run_path(str(PROGRAM), run_name="__main__")
        outputs = tm.stack_outputs()
        return {**outputs, "kubeconfig_secret": outputs["kubeconfig"].is_secret()}

    if via == "env":  # PULUMI_CONFIG: the JSON bag the CLI hands a program
        with tm.env(PULUMI_CONFIG=json.dumps(cfg)):
            return tm.run(build, stack=stack, config={})
    return tm.run(build, stack=stack, config=cfg)


@pytest.fixture(
    scope="module", params=[(s, via) for s in STACKS for via in ("set_config", "env")], ids=lambda p: f"{p[0]}-{p[1]}"
)
def program_run(request: pytest.FixtureRequest) -> tuple[str, tm.Recorder, dict[str, Any]]:
    stack, via = request.param
    rec, out = run_program(stack, via)
    return stack, rec, out


def test_registers_the_expected_resources(program_run: tuple[str, tm.Recorder, dict[str, Any]]) -> None:
    stack, rec, _ = program_run
    cfg = load_stack_file(tm.ROOT / f"Pulumi.{stack}.yaml")
    plans = [p for pool in cfg.slice_pools for p in slice_pool_node_pools(pool, cfg.pool_zone(pool), cfg.cluster.name)]
    counts = Counter(rec.types())
    assert counts["tpuray:index:GkeCluster"] == 1
    assert counts["tpuray:index:TpuSlicePool"] == len(cfg.slice_pools)
    assert counts["tpuray:index:RayTpuCluster"] == counts["tpuray:index:RayTpuJob"] == 1
    assert counts["gcp:container/nodePool:NodePool"] == 1 + len(plans)  # system pool + TPU pools
    assert counts["gcp:container/cluster:Cluster"] == 1
    assert counts["kubernetes:ray.io/v1:RayCluster"] == counts["kubernetes:ray.io/v1:RayJob"] == 1
    assert counts["pulumi:providers:gcp"] == counts["pulumi:providers:kubernetes"] == 1
    assert counts["gcp:compute/resourcePolicy:ResourcePolicy"] == len({p.workload_policy for p in plans} - {None})
    # every GCP resource uses the explicit provider (no gcp:project needed in stack config)
    gcp_provider = next(r for r in rec.registered if r.type == "pulumi:providers:gcp")
    assert gcp_provider.inputs["project"] == cfg.project and gcp_provider.inputs["region"] == cfg.region
    for r in rec.registered:
        if r.custom and r.type.startswith("gcp:"):
            assert "pulumi:providers:gcp::gcp" in r.provider, r
        if r.custom and r.type.startswith("kubernetes:"):
            assert "pulumi:providers:kubernetes" in r.provider, r
    assert not rec.calls  # no data source look-ups: the program needs no cloud


def test_creation_order(program_run: tuple[str, tm.Recorder, dict[str, Any]]) -> None:
    _, rec, _ = program_run
    # the Workload Identity pool exists only once the cluster does
    wi = rec.one("gcp:serviceaccount/iAMMember:IAMMember")
    assert any(d.endswith("::gke-cluster") for d in wi.dependencies), wi.dependencies
    # the RayCluster waits for its identity, its bucket access and every TPU node pool
    rc = rec.one("kubernetes:ray.io/v1:RayCluster")
    tpu_pools = [r.name for r in rec.of_type("gcp:container/nodePool:NodePool") if r.inputs["name"] != "system"]
    for name in ("ray-ray-ksa", "ray-checkpoints-object-user", "ray-ray-workload-identity", *tpu_pools):
        assert any(d.endswith(f"::{name}") for d in rc.dependencies), (name, rc.dependencies)
    job = rec.one("kubernetes:ray.io/v1:RayJob")
    assert any(d.endswith("::ray-raycluster") for d in job.dependencies)


def test_every_tpu_worker_group_agrees_with_its_node_pools(
    program_run: tuple[str, tm.Recorder, dict[str, Any]],
) -> None:
    _, rec, _ = program_run
    cluster = tm.wire_plain(rec.one("kubernetes:ray.io/v1:RayCluster").inputs)
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    tpu_pools = [
        tm.wire_plain(r.inputs) for r in rec.of_type("gcp:container/nodePool:NodePool") if r.inputs["name"] != "system"
    ]
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


def test_manifests_are_schema_valid(program_run: tuple[str, tm.Recorder, dict[str, Any]]) -> None:
    _, rec, _ = program_run
    manifests = [tm.wire_plain(r.inputs) for r in rec.registered if r.type.startswith("kubernetes:ray.io/v1:")]
    assert len(manifests) == 2
    for m in manifests:
        assert schema_errors(m) == [], m["kind"]
    job = next(m for m in manifests if m["kind"] == "RayJob")
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": manifests[0]["metadata"]["name"]}


def test_outputs(program_run: tuple[str, tm.Recorder, dict[str, Any]]) -> None:
    stack, _, out = program_run
    cfg = load_stack_file(tm.ROOT / f"Pulumi.{stack}.yaml")
    assert out["clusterName"] == cfg.cluster.name
    assert out["kubeconfig_secret"] is True
    assert "gke-gcloud-auth-plugin" in out["kubeconfig"]
    assert out["rayClusterName"] == cfg.cluster.name
    assert out["rayDashboardService"] == f"{cfg.ray.namespace}/{cfg.cluster.name}-head-svc"
    topo = out["topology"]
    assert topo["total_chips"] == sum(p.slices * p.tpu_slice.chips for p in cfg.slice_pools)
    assert topo["total_hosts"] == sum(p.slices * p.tpu_slice.hosts for p in cfg.slice_pools)
    assert [p["pool"] for p in topo["pools"]] == [p.name for p in cfg.slice_pools]


@pytest.mark.parametrize("stack", STACKS)
def test_runs_are_deterministic(stack: str) -> None:
    def snapshot() -> list[tuple[str, str, str]]:
        rec, _ = run_program(stack)
        return sorted((r.type, r.name, json.dumps(tm.wire_plain(r.inputs), sort_keys=True)) for r in rec.registered)

    first = snapshot()
    assert first and first == snapshot()


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
    cfg = {**tm.cli_config("dev"), key: value}
    with pytest.raises(ConfigError) as err:
        run_program("dev", config=cfg)
    assert any(p == path for p, _ in err.value.problems), err.value.problems
    assert tm.current is not None and tm.current.registered == []


def test_missing_required_keys() -> None:
    with pytest.raises(ConfigError) as err:
        run_program("dev", config={})
    assert {p for p, _ in err.value.problems} >= {"project", "region", "slicePools"}
