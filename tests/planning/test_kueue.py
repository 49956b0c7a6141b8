"""Kueue objects from the slice model: CRD-valid, quota = chips, flavors that Kueue assigns as intended, the
ephemeral RayJob Kueue admits, and the config rules that tie queued pools to Kueue (the ``KueueQueues`` component is
tests/components/test_kueue.py)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.support.kuberay_schema import schema_errors as kuberay_schema_errors
from tests.support.kueue_schema import cel_problems, schema_errors, scope_of
from tests.support.slices import ALL_SLICES, capacity_st, kueue_objects, kueue_of, node_pools, pool, supported
from tests.support.stacks import queued_values, shipped_config
from tpuray.components.catalog.cloud_limits import GKE_MAX_NODES_PER_CLUSTER
from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    TPU_RESOURCE,
)
from tpuray.components.catalog.tpu_locations import TPU_ZONES
from tpuray.components.config import ConfigError, StackConfig, parse_stack_config
from tpuray.components.planning.kuberay import ray_job_manifest
from tpuray.components.planning.kueue import DWS_PROVISIONING_CLASS
from tpuray.components.planning.kueue_checks import MAX_POD_SETS, check_kueue_ray_job
from tpuray.components.planning.pool_plan import pool_plan
from tpuray.components.planning.stack_plan import plan_stack


# ---- CRD validity ----------------------------------------------------------------------------------------
def test_every_object_of_the_dws_stack_is_crd_valid() -> None:
    plan = kueue_of(shipped_config("prod-dws"), {"app.kubernetes.io/managed-by": "pulumi"})
    kinds = {o["kind"] for o in plan.objects}
    assert kinds == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
        "WorkloadPriorityClass",
    }
    for obj in plan.objects:
        assert schema_errors(obj) == [], obj["metadata"]["name"]
        assert cel_problems(obj) == [], obj["metadata"]["name"]
        namespaced = scope_of(obj["kind"]) == "Namespaced"
        assert ("namespace" in obj["metadata"]) == namespaced, obj["kind"]


def test_schema_check_is_not_vacuous() -> None:
    plan = kueue_of(shipped_config("prod-dws"))
    cq = copy.deepcopy(kueue_objects(plan, "ClusterQueue")[0])
    cq["spec"]["admissionChecks"] = ["x"]  # v1beta1's field: gone in v1beta2
    assert schema_errors(cq)
    rf = copy.deepcopy(kueue_objects(plan, "ResourceFlavor")[1])
    rf["spec"]["tolerations"][0]["operator"] = "Exists"  # Exists with a value breaks a CEL rule
    assert cel_problems(rf)
    cq2 = copy.deepcopy(kueue_objects(plan, "ClusterQueue")[0])
    cq2["spec"]["resourceGroups"][0]["flavors"][1]["resources"].pop()
    assert cel_problems(cq2)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        # us-east5-a offers v5e, v5p and v6e (https://cloud.google.com/tpu/docs/regions-zones; tpu_locations)
        st.tuples(
            st.tuples(
                st.sampled_from([s for s in ALL_SLICES if s.generation in TPU_ZONES["us-east5-a"]]), capacity_st
            ).filter(lambda sc: supported(*sc)),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_quota_equals_each_pools_chips_at_maximum_size(pools: list[Any]) -> None:
    # a stack whose nodes at full scale overflow the Pod range or GKE's nodes per cluster (with the system node) is
    # refused by the config model (its own tests)
    assume(1 + sum(n * s.hosts for (s, _), n in pools) <= GKE_MAX_NODES_PER_CLUSTER)
    # the training job runs on the first pool, and a queued one of several slices is refused (its own tests)
    assume(not (pools[0][0][1] == "queued" and pools[0][1] > 1))
    configs = [pool(s, cap, n, name=f"p{i}") for i, ((s, cap), n) in enumerate(pools)]
    cfg = StackConfig.model_validate(
        {
            "project": "tpuray-test-proj",
            "region": "us-east5",
            "zone": "us-east5-a",
            "slicePools": [c.model_dump(by_alias=True) for c in configs],
            "network": {"podsCidr": "10.64.0.0/10"},  # room for the largest generated pools' nodes
            "kueue": {"enabled": True},
            "ray": {"jobMode": "ephemeral"},
        }
    )
    plan = kueue_of(cfg)
    cq = kueue_objects(plan, "ClusterQueue")[0]
    assert schema_errors(cq) == [] and cel_problems(cq) == []
    quota = {
        f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
        for f in cq["spec"]["resourceGroups"][0]["flavors"]
    }
    assert quota[plan.system_flavor][TPU_RESOURCE] == 0
    for p in configs:
        flavor = plan.quota_of(p.name).flavor
        assert quota[flavor][TPU_RESOURCE] == p.slices * p.tpu_slice.chips
        # every node of the pool at its largest holds exactly chips_per_host chips: the quota is the pool's nodes
        nodes = sum(np.max_nodes for np in node_pools(p, "us-east5-a", "tpuray"))
        assert quota[flavor][TPU_RESOURCE] == nodes * p.tpu_slice.chips_per_host
    order = [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
    assert order == [plan.system_flavor, *(plan.quota_of(p.name).flavor for p in configs)]  # config order
    queued = {plan.quota_of(p.name).flavor for p in configs if p.capacity.type == "queued"}
    checks = cq["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
    assert {f for c in checks for f in c["onFlavors"]} == queued


# ---- flavor assignment, as Kueue's flavor assigner does it ---------------------------------------------------
def assign(pod: Mapping[str, Any], flavors: Sequence[Mapping[str, Any]], quota: Mapping[str, Any]) -> str | None:
    """The first flavor (in order) whose node labels match the pod's nodeSelector on the flavors' label keys
    and whose TPU quota covers the pod's request (kueue pkg/scheduler/flavorassigner)."""
    keys = {k for f in flavors for k in f["spec"].get("nodeLabels", {})}
    selector = {k: v for k, v in (pod.get("nodeSelector") or {}).items() if k in keys}
    tpu = sum(int(c["resources"].get("requests", {}).get(TPU_RESOURCE, 0)) for c in pod["containers"])
    for f in flavors:
        labels = f["spec"].get("nodeLabels", {})
        if all(labels.get(k) == v for k, v in selector.items()) and quota[f["metadata"]["name"]] >= tpu:
            return str(f["metadata"]["name"])
    return None


def test_head_submitter_and_each_worker_group_land_on_the_intended_flavor() -> None:
    cfg = shipped_config("prod-dws")
    plan = kueue_of(cfg)
    cq = kueue_objects(plan, "ClusterQueue")[0]["spec"]["resourceGroups"][0]["flavors"]
    quota = {f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == TPU_RESOURCE) for f in cq}
    flavors = sorted(
        kueue_objects(plan, "ResourceFlavor"), key=lambda f: [c["name"] for c in cq].index(f["metadata"]["name"])
    )
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    spec = job["spec"]["rayClusterSpec"]
    assert assign(spec["headGroupSpec"]["template"]["spec"], flavors, quota) == plan.system_flavor
    submitter = {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]}  # KubeRay's default: no selector
    assert assign(submitter, flavors, quota) == plan.system_flavor
    for g in spec["workerGroupSpecs"]:
        assert assign(g["template"]["spec"], flavors, quota) == plan.quota_of(g["groupName"]).flavor
    # a pod that asks only for a v6e 4x4 slice (no pool) falls back to the first v6e 4x4 flavor with quota
    shape_only = {
        "nodeSelector": {GKE_ACCELERATOR_LABEL: "tpu-v6e-slice", GKE_TOPOLOGY_LABEL: "4x4"},
        "containers": [{"resources": {"requests": {TPU_RESOURCE: "4"}}}],
    }
    assert assign(shape_only, flavors, quota) == plan.quota_of("v6e-dws").flavor


def test_flavor_labels_are_the_labels_the_pools_nodes_carry() -> None:
    cfg = shipped_config("prod-dws")
    plan = kueue_of(cfg)
    flavors = {f["metadata"]["name"]: f["spec"] for f in kueue_objects(plan, "ResourceFlavor")}
    for p in cfg.slice_pools:
        spec = flavors[plan.quota_of(p.name).flavor]
        for np in pool_plan(cfg, p).node_pools:
            # GKE sets the accelerator/topology labels on TPU nodes; tpuray's labels come from the node config
            node_labels = {**np.labels, GKE_ACCELERATOR_LABEL: p.tpu_slice.gke_accelerator}
            node_labels[GKE_TOPOLOGY_LABEL] = p.tpu_slice.topology
            assert spec["nodeLabels"].items() <= node_labels.items()
        taints = {(t["key"], t.get("effect")) for t in spec["tolerations"]}
        assert ("google.com/tpu", "NoSchedule") in taints
        assert (("cloud.google.com/gke-queued", "NoSchedule") in taints) == (p.capacity.type == "queued")


def test_queued_pool_gets_a_provisioning_request_check() -> None:
    plan = kueue_of(shipped_config("prod-dws"))
    [prc] = kueue_objects(plan, "ProvisioningRequestConfig")
    [ac] = kueue_objects(plan, "AdmissionCheck")
    assert prc["spec"]["provisioningClassName"] == DWS_PROVISIONING_CLASS == "queued-provisioning.gke.io"
    assert prc["spec"]["managedResources"] == [TPU_RESOURCE]
    assert prc["spec"]["parameters"] == {"maxRunDurationSeconds": str(7 * 86400)}
    assert ac["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert ac["spec"]["parameters"]["name"] == prc["metadata"]["name"]
    cq = kueue_objects(plan, "ClusterQueue")[0]
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": ac["metadata"]["name"], "onFlavors": [plan.quota_of("v6e-dws").flavor]}
    ]
    assert plan.quota_of("v5p-train").admission_check is None


def test_quota_sums_pod_sizes_in_any_quantity_form_the_config_accepts() -> None:
    v = queued_values(ray={"jobMode": "ephemeral", "workerCpu": "7500m", "workerMemory": "68719476736", "headCpu": "2"})
    plan = kueue_of(parse_stack_config(v))
    # v6e 4x4 pool: 1 slice x 4 hosts = 4 worker pods of 7.5 CPU and 64Gi
    assert (plan.quota_of("dws").cpu, plan.quota_of("dws").memory) == ("30", "256Gi")
    assert plan.quota_of("res").cpu == "15"  # v5p 2x2x2: 1 slice x 2 hosts
    with pytest.raises(ConfigError, match="workerMemory"):
        parse_stack_config(queued_values(ray={"jobMode": "ephemeral", "workerMemory": "lots"}))


# ---- the ephemeral RayJob ----------------------------------------------------------------------------------
def test_ephemeral_job_is_queue_labelled_suspended_and_carries_the_training_pool() -> None:
    cfg = shipped_config("prod-dws")
    plan = kueue_of(cfg)
    [job] = plan_stack(cfg, "test").manifests  # no shared RayCluster in ephemeral mode
    assert job["kind"] == "RayJob" and kuberay_schema_errors(job) == []
    labels = job["metadata"]["labels"]
    assert (
        labels[KUEUE_QUEUE_NAME_LABEL] == plan.local_queue == kueue_objects(plan, "LocalQueue")[0]["metadata"]["name"]
    )
    assert labels[KUEUE_PRIORITY_CLASS_LABEL] in {
        o["metadata"]["name"] for o in kueue_objects(plan, "WorkloadPriorityClass")
    }
    assert job["metadata"]["namespace"] == kueue_objects(plan, "LocalQueue")[0]["metadata"]["namespace"]
    spec = job["spec"]
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True and "clusterSelector" not in spec
    cluster = spec["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is False
    [group] = cluster["workerGroupSpecs"]
    assert group["groupName"] == "v6e-dws"
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1
    assert check_kueue_ray_job(job) == []


def test_kueue_job_checks_catch_what_kueue_rejects() -> None:
    job = ray_job_manifest(plan_stack(shipped_config("prod-dws"), "test").job)
    cases: list[tuple[str, Any]] = [
        ("enableInTreeAutoscaling", lambda j: j["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True)),
        ("shutdownAfterJobFinishes", lambda j: j["spec"].update(shutdownAfterJobFinishes=False)),
        ("reserved", lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(groupName="head")),
        (
            "pod sets",
            lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"].extend(
                [copy.deepcopy(j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]) for _ in range(MAX_POD_SETS)]
            ),
        ),
        ("existing cluster", lambda j: j["spec"].update(clusterSelector={"ray.io/cluster": "x"})),
    ]
    for needle, mutate in cases:
        bad = copy.deepcopy(job)
        mutate(bad)
        assert any(needle in p for p in check_kueue_ray_job(bad)), needle


def test_shared_mode_leaves_queued_pools_out_of_the_long_lived_cluster() -> None:
    v = queued_values(ray={"jobMode": "shared"}, workload={"slicePool": "res"})
    cfg = parse_stack_config(v)
    planned = plan_stack(cfg, "test")
    assert not planned.ephemeral and [g.name for g in planned.ray.params.groups] == ["res"]
    cluster, job = planned.manifests
    assert [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]] == ["res"]
    assert "suspend" not in job["spec"] and KUEUE_QUEUE_NAME_LABEL not in job["metadata"]["labels"]


# ---- config rules -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "path", "needle"),
    [
        ({"kueue": {"enabled": False}, "ray": {"jobMode": "shared"}}, "slicePools[1].capacity", "only reachable"),
        ({"kueue": {"enabled": False}}, "kueue.enabled", "only Kueue admits"),
        ({"ray": {"jobMode": "shared"}}, "ray.jobMode", "ephemeral"),
        (
            {
                "cluster": {"name": "tpu", "releaseChannel": "UNSPECIFIED"},
                "maintenance": {
                    "exclusions": [{"name": "x", "start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}]
                },
            },
            "maintenance.exclusions[0].scope",
            "release channel",
        ),
        (
            {
                "maintenance": {
                    "window": {
                        "start": "2026-01-03T02:00:00Z",
                        "end": "2026-01-03T03:00:00Z",
                        "recurrence": "FREQ=WEEKLY;BYDAY=SA",
                    }
                }
            },
            "maintenance.window.end",
            "4 hours",
        ),
        (
            {
                "maintenance": {
                    "exclusions": [
                        {
                            "name": "x",
                            "start": "2026-01-01T00:00:00Z",
                            "end": "2026-03-01T00:00:00Z",
                            "scope": "NO_UPGRADES",
                        }
                    ]
                }
            },
            "maintenance.exclusions[0].end",
            "30 days",
        ),
        (
            {
                "maintenance": {
                    "exclusions": [
                        {"name": "x", "start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
                        {"name": "x", "start": "2026-02-01T00:00:00Z", "end": "2026-02-02T00:00:00Z"},
                    ]
                }
            },
            "maintenance.exclusions[1].name",
            "duplicate",
        ),
        (
            {
                "maintenance": {
                    "window": {"start": "2026-01-03 02:00", "end": "2026-01-03T09:00:00Z", "recurrence": "FREQ=WEEKLY"}
                }
            },
            "maintenance.window.start",
            "an RFC 3339 UTC time",
        ),
        (
            {
                "maintenance": {
                    "window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T09:00:00Z", "recurrence": "weekly"}
                }
            },
            "maintenance.window.recurrence",
            "FREQ=WEEKLY;BYDAY=SA,SU",
        ),
    ],
)
def test_capacity_and_maintenance_rules_name_their_path(overrides: dict[str, Any], path: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(queued_values(**overrides))
    found = [(p, m) for p, m in err.value.problems if p == path]
    assert found and any(needle in m for _, m in found), err.value.problems


def test_pool_rules_name_their_pool() -> None:
    v = queued_values()
    v["slicePools"][0]["autoUpgrade"] = False
    v["slicePools"][0]["name"] = "head"
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    paths = {p for p, _ in err.value.problems}
    assert {"slicePools[0].autoUpgrade", "slicePools[0].name"} <= paths
    v["slicePools"][0]["name"] = "res"
    v["cluster"]["releaseChannel"] = "UNSPECIFIED"
    assert not parse_stack_config(v).slice_pools[0].auto_upgrade


def test_every_pool_queued_still_renders_in_ephemeral_mode() -> None:
    """A shared RayCluster would have no worker group; ephemeral mode declares none and still has its job."""
    v = queued_values(workload={})
    v["slicePools"] = [v["slicePools"][1]]
    cfg = parse_stack_config(v)
    planned = plan_stack(cfg, "test")
    assert planned.ephemeral and not planned.ray.declare_cluster
    assert [g.name for g in planned.ray.params.groups] == ["dws"]  # the job's own cluster, not a shared one
    [job] = planned.manifests
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] == "dws"
    with pytest.raises(ConfigError, match=r"ray\.jobMode"):
        parse_stack_config({**v, "ray": {"jobMode": "shared"}})


def test_rules_run_even_when_another_section_is_invalid() -> None:
    v = queued_values(kueue={"enabled": False}, region="Nowhere")
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    paths = {p for p, _ in err.value.problems}
    assert "region" in paths and "slicePools[1].capacity" in paths
