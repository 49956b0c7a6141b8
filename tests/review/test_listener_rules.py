"""One port, one listener (``components/review/listener_rules.py``): every planned Ray pod of every shipped and test
stack, under each runtime, on one slice and across slices, has no two listeners at one port; and the rule names both
listeners of a clash, KubeRay's default metrics port against TorchTPU's multislice ports among them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.support.plans import ROOT
from tests.support.stacks import SERVING, serving_values
from tpuray.components.catalog.listeners import Listener, clashes, ray_listeners, runtime_listeners, webhook_listeners
from tpuray.components.catalog.names import KUBERAY_DEFAULT_METRICS_PORT, RAY_METRICS_PORT
from tpuray.components.catalog.runtime_ports import torch_tpu_coordinator_port, torch_tpu_megascale_ports
from tpuray.components.catalog.runtimes import RUNTIMES, XLA_SPMD
from tpuray.components.catalog.topology import GENERATIONS, TpuSlice, valid_topologies
from tpuray.components.config import ConfigError, stack_values
from tpuray.components.review.listener_rules import check_listeners, pod_listeners
from tpuray.components.review.plan import Plan, render_stack
from tpuray.components.review.rule_types import Resource, RuleContext

RULE = "one-listener-per-port"
STACK_FILES = {
    **{p.name.removeprefix("Pulumi.").removesuffix(".yaml"): p for p in sorted(ROOT.glob("Pulumi.*.yaml"))},
    **{
        p.name.removeprefix("Pulumi.").removesuffix(".yaml"): p
        for p in sorted((ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml"))
    },
}
STACK_FILES.pop("", None)  # Pulumi.yaml, the project file


def _write(values: dict[str, Any], tmp: Path, name: str) -> Path:
    path = tmp / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {f"tpuray:{k}": v for k, v in values.items()}}))
    return path


def _variant(name: str, backend: str, slices: int, tmp: Path) -> Plan:
    """The stack on ``backend`` with every pool at ``slices`` slices (a pool the config keeps to one slice, such as
    a queued pool's training job, stays at one), its images those of the runtime."""
    v = copy.deepcopy(stack_values(yaml.safe_load(STACK_FILES[name].read_text())["config"]))
    v.setdefault("workload", {})["backend"] = backend
    ray = v.setdefault("ray", {})
    suffix = RUNTIMES[backend].tag_suffix  # type: ignore[index]
    image = str(ray.get("workerImage") or ray.get("image") or "us-docker.pkg.dev/p/tpuray/worker:0.1.0")
    ray["workerImage"] = image.split("@")[0].rsplit(":", 1)[0] + ":0.1.0" + suffix
    if backend == "torch_tpu":  # the head runs the worker image on a TorchTPU stack (the config's rule)
        ray["image"] = ray["workerImage"]
    for pool in v["slicePools"]:
        pool["slices"] = slices
    if slices == 1:  # elastic training needs a pool of several slices; this shape has one
        v.get("workload", {}).pop("elastic", None)
    try:
        return render_stack(name, ROOT, stack_file=_write(v, tmp, name))
    except ConfigError as e:
        kept = {int(p.path.split("]")[0].removeprefix("slicePools[")) for p in e.problems if p.path.endswith(".slices")}
        if not kept or len(kept) != len(e.problems):
            raise
        for i in kept:
            v["slicePools"][i]["slices"] = 1
        assert len(kept) < len(v["slicePools"]), f"{name}: no pool may run {slices} slices"
        return render_stack(name, ROOT, stack_file=_write(v, tmp, name))


def _resources(plan: Plan) -> list[Resource]:
    return [Resource(type=r["type"], name=r["name"], props=r["inputs"], urn=r["urn"]) for r in plan.resources]


@pytest.mark.parametrize("slices", [1, 2], ids=["single-slice", "multislice"])
@pytest.mark.parametrize("backend", ["xla", "torch_tpu"])
@pytest.mark.parametrize("stack", sorted(STACK_FILES))
def test_no_planned_pod_has_two_listeners_at_one_port(stack: str, backend: str, slices: int, tmp_path: Path) -> None:
    plan = _variant(stack, backend, slices, tmp_path)
    assert [v.message for v in plan.violations if v.rule == RULE] == []
    pods = pod_listeners(_resources(plan))
    workers = [p for p in pods if p.runtime is not None]
    assert workers and {p.runtime for p in workers} == {backend}  # the runtime the plan's pods say they run
    megascale = {p.where for p in workers if any(x.what.endswith("tpu-megascale") for x in p.listeners)}
    spanning = _multislice_groups(plan)
    assert bool(spanning) == (slices > 1 and stack != "prod-dws")  # prod-dws's job runs on its queued pool
    # the multislice ports are there exactly on the groups that may span slices (a queued job's pool keeps one)
    assert {w.rsplit("[", 1)[1].rstrip("]") for w in megascale} == spanning
    for p in pods:  # Ray's metrics export is where the stack puts it on every pod, head included
        (metrics,) = [x for x in p.listeners if x.what.startswith("Ray's metrics export")]
        assert metrics.first == RAY_METRICS_PORT


def _multislice_groups(plan: Plan) -> set[str]:
    """The worker groups of the plan's Ray clusters that keep more than one slice."""
    out = set()
    for r in plan.resources:
        spec = r["inputs"].get("spec") or {}
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
        for g in cluster.get("workerGroupSpecs") or []:
            if max(g.get("maxReplicas", 0), g.get("replicas", 0)) > 1:
                out.add(g["groupName"])
    return out


def _torch_tpu_plan() -> list[Resource]:
    return _resources(render_stack("torch-tpu", ROOT, stack_file=STACK_FILES["torch-tpu"]))


def _ray_containers(resources: list[Resource]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(group spec, Ray container) of every head and worker group of the plan's RayClusters."""
    out = []
    for r in resources:
        if r.type.endswith(":RayCluster"):
            spec = r.props["spec"]
            for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
                out.append((g, g["template"]["spec"]["containers"][0]))
    return out


def test_kuberay_default_metrics_port_clashes_with_torch_tpu_across_slices() -> None:
    """Left to KubeRay (no metrics-export-port, no container port named metrics), Ray exports on 8080 on every pod,
    which torch_tpu gives local rank 0 of every host of a multislice job: the rule names both."""
    resources = copy.deepcopy(_torch_tpu_plan())
    for group, ray in _ray_containers(resources):
        del group["rayStartParams"]["metrics-export-port"]
        ray["ports"] = [p for p in ray["ports"] if p["name"] != "metrics"]
    found = [m for _, m in check_listeners(resources, RuleContext())]
    assert found == [
        "RayCluster tpuray-torchtpu spec.workerGroupSpecs[ironwood]: Ray's metrics export (metrics-export-port) "
        "(8080) and TorchTPU's tpu-megascale (8080-8095) both listen on port 8080 under torch_tpu: the second to "
        "start cannot bind it"
    ]


def test_the_policy_pack_runs_the_rule() -> None:
    """The same clash through the CrossGuard stack policy ``pulumi preview --policy-pack policy`` runs."""
    from tests.support.policy_runs import stack_violations

    resources = copy.deepcopy(_torch_tpu_plan())
    assert stack_violations(RULE, [_wire(r) for r in resources]) == []
    for group, _ in _ray_containers(resources):
        group["rayStartParams"]["metrics-export-port"] = "8094"
    found = stack_violations(RULE, [_wire(r) for r in resources])
    assert found[-1] == (
        "ray-raycluster: RayCluster tpuray-torchtpu spec.workerGroupSpecs[ironwood]: Ray's metrics export "
        "(metrics-export-port) (8094) and TorchTPU's tpu-megascale (8080-8095) both listen on port 8094 under "
        "torch_tpu: the second to start cannot bind it"
    )
    assert len(found) == 3
    assert all(f"port 'metrics' is {RAY_METRICS_PORT} but Ray exports its metrics on 8094" in m for m in found[:2])


def _wire(r: Resource) -> dict[str, Any]:
    return {"type": r.type, "inputs": r.props, "urn": r.urn, "name": r.name}


def test_a_metrics_port_that_is_not_rays_is_caught() -> None:
    resources = copy.deepcopy(_torch_tpu_plan())
    (_, ray), (_, wray) = _ray_containers(resources)
    (metrics,) = [p for p in ray["ports"] if p["name"] == "metrics"]
    metrics["containerPort"] = 9801
    wray["ports"] = [p for p in wray["ports"] if p["name"] != "metrics"]
    found = [m for _, m in check_listeners(resources, RuleContext())]
    assert found == [
        "RayCluster tpuray-torchtpu spec.headGroupSpec: its Ray container's port 'metrics' is 9801 but Ray exports "
        f"its metrics on {RAY_METRICS_PORT} (metrics-export-port)",
        "RayCluster tpuray-torchtpu spec.workerGroupSpecs[ironwood]: its Ray container has no port named 'metrics': "
        f"KubeRay v1.7.0 adds one at 8080 (DefaultMetricsPort), where Ray does not export (metrics-export-port "
        f"{RAY_METRICS_PORT}), and the head Service and anything scraping the port by name follow it",
    ]


def test_a_sidecar_port_on_a_runtime_port_is_caught() -> None:
    resources = copy.deepcopy(_torch_tpu_plan())
    _, (worker, _) = _ray_containers(resources)
    worker["template"]["spec"]["containers"].append(
        {"name": "proxy", "image": "envoy", "ports": [{"name": "admin", "containerPort": 8474}]}
    )
    worker["template"]["spec"]["initContainers"] = [
        {"name": "setup", "image": "x", "ports": [{"containerPort": 8081}]},  # exits before Ray starts
        {"name": "agent", "image": "x", "restartPolicy": "Always", "ports": [{"containerPort": 52365}]},
    ]
    found = [m for _, m in check_listeners(resources, RuleContext())]
    assert found == [
        "RayCluster tpuray-torchtpu spec.workerGroupSpecs[ironwood]: Ray's dashboard agent "
        "(dashboard-agent-listen-port) (52365) and container agent port 52365 (52365) both listen on port 52365 "
        "under torch_tpu: the second to start cannot bind it",
        "RayCluster tpuray-torchtpu spec.workerGroupSpecs[ironwood]: container proxy port admin (8474) and "
        "TorchTPU's tpu-slicebuilder (8471-8478) both listen on port 8474 under torch_tpu: the second to start "
        "cannot bind it",
    ]


def test_serve_listens_on_every_serving_pod_and_a_clash_with_it_is_caught(tmp_path: Path) -> None:
    plan = render_stack("dev", ROOT, stack_file=_write(serving_values(SERVING), tmp_path, "dev"))
    resources = _resources(plan)
    serving = [p for p in pod_listeners(resources) if p.where.startswith("RayService")]
    assert len(serving) == 2 and all(any(x.what.startswith("Serve's HTTP") for x in p.listeners) for p in serving)
    assert {p.runtime for p in serving} == {None, "xla (SPMD)"}
    # four slices, but each a Serve replica of its own: no process opens a multislice port
    assert not [x for p in serving for x in p.listeners if x.what.endswith("tpu-megascale")]
    assert [v.message for v in plan.violations if v.rule == RULE] == []
    (svc,) = [r for r in resources if r.type.endswith(":RayService")]
    svc.props["spec"]["serveConfigV2"] = svc.props["spec"]["serveConfigV2"].replace("8000", str(RAY_METRICS_PORT))
    found = [m for _, m in check_listeners(resources, RuleContext())]
    assert len(found) == 2 and all(
        f"Ray's metrics export (metrics-export-port) ({RAY_METRICS_PORT}) and Serve's HTTP proxy" in m for m in found
    )


# ---- the catalog's listener facts --------------------------------------------------------------------------------
def test_ray_listeners_take_kuberays_defaults_where_the_pod_sets_none() -> None:
    worker = {x.what: (x.first, x.last) for x in ray_listeners({}, head=False)}
    assert worker["Ray's metrics export (metrics-export-port)"] == (KUBERAY_DEFAULT_METRICS_PORT,) * 2
    assert worker["Ray's dashboard agent (dashboard-agent-listen-port)"] == (52365, 52365)
    assert worker["Ray's worker processes (min-worker-port..max-worker-port)"] == (10002, 19999)
    head = {x.first for x in ray_listeners({"metrics-export-port": "9800"}, head=True)}
    assert {6379, 8265, 10001, 9800} <= head and KUBERAY_DEFAULT_METRICS_PORT not in head
    with pytest.raises(ValueError, match="rayStartParams port: 'x' is not a port number"):
        ray_listeners({"port": "x"}, head=True)


def test_the_webhooks_ports_are_listed_but_never_bind() -> None:
    s = TpuSlice.parse("tpu7x:2x2x2")
    hooked = webhook_listeners(s, 0, {"MEGASCALE_NUM_SLICES": "2"})
    assert [(x.first, x.binds) for x in hooked] == [(8471, False), (8081, False)]
    assert webhook_listeners(TpuSlice.parse("v5p:2x2x2"), 0, {}) == []
    assert not clashes([*hooked, *runtime_listeners(RUNTIMES["torch_tpu"], s, multislice=True)])


def _every_slice() -> list[TpuSlice]:
    return [TpuSlice.parse(g.name, t) for g in GENERATIONS for t in valid_topologies(g.name)]


@pytest.mark.parametrize("runtime", [RUNTIMES["xla"], XLA_SPMD, RUNTIMES["torch_tpu"]], ids=["xla", "spmd", "tt"])
def test_rays_pinned_ports_are_clear_of_every_runtime_on_every_slice_shape(runtime: Any) -> None:
    from tpuray.components.planning.kuberay import ray_start_ports

    ray = ray_listeners(ray_start_ports(), head=False)
    for s in _every_slice():
        mine = runtime_listeners(runtime, s, multislice=True)
        assert not clashes([*ray, *mine]), s
        assert not clashes(mine), s


def test_the_torch_tpu_coordinator_is_rank_zeros_megascale_port() -> None:
    """torch_tpu overwrites rank 0's MEGASCALE_PORT with 8080 (its hint: <MASTER_ADDR>:8080); Ray's 8081 is then
    rank 0's debug port, and Ray's metrics port is neither."""
    port, debug = torch_tpu_megascale_ports(0)
    assert torch_tpu_coordinator_port() == port == 8080 and debug == 8081
    assert RAY_METRICS_PORT not in range(8080, 8080 + 2 * 8)
    assert Listener(port, port, "x").ports == range(8080, 8081)


@given(
    st.lists(
        st.tuples(st.integers(1, 60), st.integers(0, 5), st.booleans()).map(
            lambda t: Listener(t[0], t[0] + t[1], f"l{t}", binds=t[2])
        ),
        max_size=8,
    )
)
def test_clashes_are_exactly_the_binding_pairs_that_share_a_port(listeners: list[Listener]) -> None:
    found = {(a, b): ports for a, b, ports in clashes(listeners)}
    for i, a in enumerate(listeners):
        for b in listeners[i + 1 :]:
            shared = sorted(set(a.ports) & set(b.ports)) if a.binds and b.binds else []
            assert found.get((a, b), []) == shared
