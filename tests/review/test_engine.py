"""The mock-engine runner on a small stand-in program: config as the CLI passes it, parents, stand-ins,
stable order, two programs in one process, and a failing program."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpuray.components.review.engine import STANDIN_ENDPOINT, RunError, config_from_stack_file, plain, run_program

PROGRAM = """
import json
import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

cfg = pulumi.Config("tpuray")
pools = cfg.require_object("slicePools")
cluster = gcp.container.Cluster("cluster", name=cfg.get_object("cluster")["name"], location=cfg.require("region"),
                                initial_node_count=1, remove_default_node_pool=True)
class Pool(pulumi.ComponentResource):
    def __init__(self, name, slices, opts=None):
        super().__init__("test:index:Pool", name, None, opts)
        for i in range(slices):
            gcp.container.NodePool(f"{name}-{i}", cluster=cluster.name, node_count=4,
                                   node_config={"machine_type": "ct5lp-hightpu-4t"},
                                   opts=pulumi.ResourceOptions(parent=self))
for p in pools:
    Pool(p["name"], p["slices"])
kubeconfig = pulumi.Output.all(cluster.endpoint, cluster.master_auth).apply(
    lambda a: json.dumps({"server": a[0], "ca": a[1]["cluster_ca_certificate"]}))
provider = k8s.Provider("k8s", kubeconfig=kubeconfig)
k8s.core.v1.Namespace("ray", metadata={"name": cfg.get("namespace") or "unset"},
                      opts=pulumi.ResourceOptions(provider=provider))
if cfg.get_bool("explode"):
    raise ValueError("boom")
pulumi.export("endpoint", cluster.endpoint)
pulumi.export("zone", cfg.get("zone"))
"""

STACK = """config:
  tpuray:region: us-west4
  tpuray:cluster: {name: c1}
  tpuray:slicePools: [{name: b, slices: 2}, {name: a, slices: 1}]
  gcp:project: not-ours
"""

PROJECT = """name: tpuray
runtime: python
config:
  tpuray:zone: {type: string, default: us-west4-a}
  tpuray:namespace: {type: string, default: ray}
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "prog").mkdir()
    (tmp_path / "prog" / "__main__.py").write_text(PROGRAM)
    (tmp_path / "Pulumi.dev.yaml").write_text(STACK)
    (tmp_path / "Pulumi.yaml").write_text(PROJECT)
    return tmp_path


def test_config_as_the_cli_passes_it(program: Path) -> None:
    cfg = config_from_stack_file(program / "Pulumi.dev.yaml", "tpuray", program / "Pulumi.yaml")
    assert cfg["tpuray:region"] == "us-west4"
    assert json.loads(cfg["tpuray:slicePools"]) == [{"name": "b", "slices": 2}, {"name": "a", "slices": 1}]
    assert cfg["tpuray:zone"] == "us-west4-a"  # Pulumi.yaml default, applied as the CLI would
    assert "gcp:project" not in cfg and "tpuray:project" not in cfg


def test_run_collects_every_resource_with_parents_and_stand_ins(program: Path) -> None:
    cfg = config_from_stack_file(program / "Pulumi.dev.yaml", "tpuray", program / "Pulumi.yaml")
    run = run_program(program / "prog", project="tpuray", stack="dev", config=cfg)
    urns = [r["urn"] for r in run.resources]
    assert urns == sorted(urns)
    pools = [r for r in run.resources if r["type"] == "gcp:container/nodePool:NodePool"]
    assert sorted(p["name"] for p in pools) == ["a-0", "b-0", "b-1"]
    assert all(p["parent"].endswith("test:index:Pool::" + p["name"][0]) for p in pools)
    assert pools[0]["urn"].startswith("urn:pulumi:dev::tpuray::test:index:Pool$gcp:container/nodePool:NodePool::")
    assert all(p["inputs"]["nodeCount"] == 4 and isinstance(p["inputs"]["nodeCount"], int) for p in pools)
    assert all(p["inputs"]["cluster"] == "c1" for p in pools)
    provider = next(r for r in run.resources if r["type"] == "pulumi:providers:kubernetes")
    assert json.loads(provider["inputs"]["kubeconfig"])["server"] == STANDIN_ENDPOINT
    ns = next(r for r in run.resources if r["type"] == "kubernetes:core/v1:Namespace")
    assert ns["inputs"]["metadata"] == {"name": "ray"}
    assert ns["provider"] == provider["urn"]
    assert run.outputs == {"endpoint": STANDIN_ENDPOINT, "zone": "us-west4-a"}


def test_two_programs_in_one_process_do_not_leak(program: Path) -> None:
    cfg = config_from_stack_file(program / "Pulumi.dev.yaml", "tpuray", program / "Pulumi.yaml")
    first = run_program(program / "prog", project="tpuray", stack="dev", config=cfg).to_json()
    small = {**cfg, "tpuray:slicePools": json.dumps([{"name": "z", "slices": 1}])}
    other = run_program(program / "prog", project="tpuray", stack="prod", config=small).to_json()
    assert [r["name"] for r in other["resources"] if "nodePool" in r["type"]] == ["z-0"]
    assert all(r["urn"].startswith("urn:pulumi:prod::") for r in other["resources"])
    again = run_program(program / "prog", project="tpuray", stack="dev", config=cfg).to_json()
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_a_failing_program_raises_run_error(program: Path) -> None:
    cfg = {**config_from_stack_file(program / "Pulumi.dev.yaml", "tpuray"), "tpuray:explode": "true"}
    with pytest.raises(RunError, match="boom"):
        run_program(program / "prog", project="tpuray", stack="dev", config=cfg)
    # and the runtime is usable again afterwards
    ok = run_program(program / "prog", project="tpuray", stack="dev", config={**cfg, "tpuray:explode": "false"})
    assert ok.resources


def test_plain_turns_wire_floats_into_ints() -> None:
    assert plain({"a": 4.0, "b": 0.5, "__defaults": [], "c": [1.0, True]}) == {"a": 4, "b": 0.5, "c": [1, True]}
