"""Every planned Ray pod against the node pool it is planned onto (``tpuray.components.review.pod_fit``): each rule
refuses a bad variant of a real plan, through the CrossGuard stack policy and ``tpuray plan``'s rules, and the
shipped stacks pass them all."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.policy_runs import stack_violations
from tpuray.components.catalog.machine_types import schedulable
from tpuray.components.review.plan import Plan, render_stack
from tpuray.components.review.pod_fit import check_pods_fit, node_pools_of
from tpuray.components.review.resource_types import NODE_POOL, RAY_CLUSTER, RAY_JOB, RAY_SERVICE
from tpuray.components.review.rule_types import Resource, RuleContext
from tpuray.components.review.rules import check_resources

RULE = "ray-pods-fit-their-node-pools"


def resources(plan: Plan) -> list[dict[str, Any]]:
    return copy.deepcopy(plan.resources)


def found(rs: list[dict[str, Any]]) -> list[str]:
    """The rule's findings through the policy pack, checked to be the same as ``tpuray plan``'s."""
    pack = stack_violations(RULE, rs)
    plan = [
        v.message
        for v in check_resources([Resource(r["type"], r["name"], r["inputs"], r["urn"]) for r in rs])
        if v.rule == RULE
    ]
    assert len(pack) == len(plan)
    return plan


def cluster_spec(rs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = [r for r in rs if r["type"] == RAY_CLUSTER]
    spec: dict[str, Any] = c["inputs"]["spec"]
    return spec


def head(rs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = cluster_spec(rs)["headGroupSpec"]["template"]
    return pod


def worker(rs: list[dict[str, Any]], i: int = 0) -> dict[str, Any]:
    pod: dict[str, Any] = cluster_spec(rs)["workerGroupSpecs"][i]["template"]
    return pod


def containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod["spec"]["containers"]


@pytest.mark.parametrize("stack", ["dev", "prod", "prod-dws"])
def test_every_shipped_stacks_pods_fit(plans: dict[str, Plan], stack: str) -> None:
    assert found(resources(plans[stack])) == []
    assert any(r["type"] in (RAY_CLUSTER, RAY_JOB) for r in plans[stack].resources)


def test_the_prod_head_as_shipped_until_now_never_schedules(plans: dict[str, Plan]) -> None:
    """8 CPUs and 32Gi, with KubeRay's autoscaler and the GCS FUSE sidecar, on an e2-standard-8."""
    rs = resources(plans["prod"])
    (c,) = containers(head(rs))
    c["resources"] = {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}}
    (message,) = found(rs)
    assert "headGroupSpec" in message and "e2-standard-8" in message
    assert "8750m CPU of 7410m" in message and "33536Mi memory of 27999Mi" in message
    assert "KubeRay's autoscaler 500m, 512Mi" in message and "GCS FUSE sidecar 250m, 256Mi" in message


def test_the_gcs_fuse_sidecar_counts_only_where_gke_injects_it(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    (c,) = containers(head(rs))
    c["resources"] = {"requests": {"cpu": "6910m", "memory": "8Gi"}}  # 7410m less the autoscaler's 500m
    assert any("GCS FUSE" in m for m in found(rs))
    del head(rs)["metadata"]["annotations"]
    assert found(rs) == []


def test_a_node_selector_no_pool_has_is_refused(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    worker(rs)["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "8x8x8"
    (message,) = found(rs)
    assert "workerGroupSpecs[v5p-train]" in message and "no node pool of the plan admits it" in message


def test_a_taint_not_tolerated_is_refused(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    worker(rs)["spec"]["tolerations"] = []
    (message,) = found(rs)
    assert "google.com/tpu=present:NoSchedule is not tolerated" in message


def test_gkes_queued_taint_needs_its_toleration(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod-dws"])
    (job,) = [r for r in rs if r["type"] == RAY_JOB]
    group = job["inputs"]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    group["tolerations"] = [t for t in group["tolerations"] if t["key"] != "cloud.google.com/gke-queued"]
    (message,) = found(rs)
    assert "cloud.google.com/gke-queued=true:NoSchedule is not tolerated" in message


def test_more_chips_than_a_host_has_are_refused(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    (c,) = containers(worker(rs))
    for part in ("requests", "limits"):
        c["resources"][part]["google.com/tpu"] = "8"
    messages = found(rs)
    assert [m.split(":")[1] for m in messages] == [" on v5p-train-0", " on v5p-train-1"]  # each pool it may use
    assert all("8 google.com/tpu of 4" in m and "ct5p-hightpu-4t" in m for m in messages)


def test_an_unknown_machine_type_is_unknown_not_a_pass(plans: dict[str, Plan]) -> None:
    rs = resources(plans["dev"])
    (system,) = [r for r in rs if r["type"] == NODE_POOL and r["inputs"]["name"] == "system"]
    system["inputs"]["nodeConfig"]["machineType"] = "c4d-standard-8"
    assert any("does not know" in m and "c4d-standard-8" in m for m in found(rs))


def test_each_multi_host_replica_needs_a_node_pool_of_its_own(plans: dict[str, Plan]) -> None:
    """The webhook's affinity on cloud.google.com/gke-nodepool: two v5p-128 replicas, one node pool left."""
    rs = [r for r in resources(plans["prod"]) if r["inputs"].get("name") != "v5p-train-1"]
    (message,) = found(rs)
    assert "2 replica(s) of 16 hosts" in message and "v5p-train-0 (16)" in message


def test_a_required_pod_affinity_nothing_matches_is_refused_and_one_the_pod_meets_is_not(
    plans: dict[str, Plan],
) -> None:
    rs = resources(plans["prod"])
    term = {"labelSelector": {"matchLabels": {"app": "nothing"}}, "topologyKey": "kubernetes.io/hostname"}
    head(rs)["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    (message,) = found(rs)
    assert "required pod affinity" in message
    term["labelSelector"] = {"matchLabels": {"ray.io/node-type": "head"}}  # KubeRay's label on the head itself
    assert found(rs) == []


def test_two_mounts_at_one_path_are_refused(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    (c,) = containers(head(rs))
    c["volumeMounts"].append({"name": "compile-cache", "mountPath": "/checkpoints"})
    (message,) = found(rs)
    assert "both mounted at /checkpoints" in message and "unique" in message


@pytest.mark.parametrize(("path", "hidden"), [("/home/ray", "/home/ray"), ("/tmp", "/tmp"), ("/dev/shm/x", "/dev/shm")])
def test_a_mount_over_the_images_or_rays_paths_is_refused(plans: dict[str, Plan], path: str, hidden: str) -> None:
    rs = resources(plans["prod"])
    (c,) = containers(worker(rs))
    c["volumeMounts"].append({"name": "training-data", "mountPath": path})
    (message,) = found(rs)
    assert f"hides {hidden}" in message


def test_a_port_no_network_policy_admits_is_refused(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    (c,) = containers(head(rs))
    c["ports"].append({"name": "debug", "containerPort": 5678})
    (message,) = found(rs)
    assert "5678" in message and "NetworkPolicy" in message


def test_image_streaming_takes_its_memory_off_the_tpu_hosts(plans: dict[str, Plan]) -> None:
    rs = [Resource(r["type"], r["name"], r["inputs"]) for r in plans["prod"].resources]
    pools = {p.name: p for p in node_pools_of(rs)}
    assert pools["v5p-train-0"].node == schedulable("ct5p-hightpu-4t", image_streaming=True)  # gcfsConfig on
    plain = schedulable("ct5p-hightpu-4t")
    assert plain is not None and pools["v5p-train-0"].node is not None
    assert pools["v5p-train-0"].node.memory_mib < plain.memory_mib
    assert check_pods_fit([], RuleContext()) == []  # nothing planned, nothing to fit


def test_the_autoscaler_counts_with_the_resources_autoscaler_options_give_it(plans: dict[str, Plan]) -> None:
    rs = resources(plans["prod"])
    cluster_spec(rs)["autoscalerOptions"]["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}}
    (message,) = found(rs)
    assert "KubeRay's autoscaler 2000m, 1024Mi" in message and "8250m CPU of 7410m" in message


# ---- a RayService's pods --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serving_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    """The dev stack serving from a pool of v5e 1x1 slices (one chip on a ct5lp-hightpu-1t host), its workers at
    ``ray.workerMemory``'s default 64Gi: the RayService's worker group is the only pod on that pool."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"]["tpuray:slicePools"].append(
        {"name": "v5e-serve", "generation": "v5e", "topology": "1x1", "slices": 2, "capacity": {"type": "spot"}}
    )
    doc["config"]["tpuray:serving"] = {"name": "chat", "importPath": "chat.app:app", "slicePool": "v5e-serve"}
    stack_file: Path = tmp_path_factory.mktemp("serving") / "Pulumi.dev.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    return render_stack("dev", ROOT, stack_file=stack_file)


def service_spec(rs: list[dict[str, Any]]) -> dict[str, Any]:
    (s,) = [r for r in rs if r["type"] == RAY_SERVICE]
    spec: dict[str, Any] = s["inputs"]["spec"]["rayClusterConfig"]
    return spec


def test_a_serving_worker_larger_than_its_host_is_refused_as_a_ray_cluster_worker_is(serving_plan: Plan) -> None:
    """64Gi and the GCS FUSE sidecar's 256Mi on a host that offers its pods less: the RayService's worker group
    fails the rule through the policy pack and ``tpuray plan``, and only it (its head and the training pods fit)."""
    host = schedulable("ct5lp-hightpu-1t", image_streaming=False)
    assert host is not None and host.memory_mib < 64 * 1024 + 256  # the case holds on the catalog's figures
    rs = resources(serving_plan)
    (message,) = found(rs)
    assert "RayService tpuray-dev-chat spec.rayClusterConfig.workerGroupSpecs[v5e-serve]" in message
    assert f"{64 * 1024 + 256}Mi memory of {host.memory_mib}Mi" in message and "ct5lp-hightpu-1t" in message
    assert "GCS FUSE sidecar 250m, 256Mi" in message
    assert [v.rule for v in serving_plan.violations] == [RULE]  # tpuray plan refuses the stack on it

    # the same group, asked to fit, passes: the rule reads the RayService's requests, not a fixed verdict
    (c,) = service_spec(rs)["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    room = f"{host.memory_mib - 256}Mi"
    c["resources"] = {part: {**c["resources"][part], "memory": room} for part in ("requests", "limits")}
    assert found(rs) == []


def test_a_serving_head_goes_through_the_same_rule(serving_plan: Plan) -> None:
    rs = resources(serving_plan)
    service_spec(rs)["workerGroupSpecs"] = []
    head_spec = service_spec(rs)["headGroupSpec"]["template"]["spec"]
    head_spec["nodeSelector"] = {"cloud.google.com/gke-nodepool": "nowhere"}
    (message,) = found(rs)
    assert message.startswith("RayService tpuray-dev-chat spec.rayClusterConfig.headGroupSpec:")
    assert "no node pool of the plan admits it" in message
