"""``tpuray plan`` of a tpu7x variant of prod: the placement form, the GKE version and the policies all hold.

Sources of the facts checked here: https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood (a workload
policy applied through the placement policy, GKE >= 1.34.0-gke.2201000) and
https://github.com/vllm-project/ci-infra/pull/547 (GKE stores policyName + tpuTopology with no type).
"""

from __future__ import annotations

import pytest

from tests.support.plans import ROOT
from tpuray.components.config import gke_version_key
from tpuray.components.review.plan import Plan, render_stack
from tpuray.components.review.resource_types import NODE_POOL, RESOURCE_POLICY


@pytest.fixture(scope="module")
def tpu7x_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    assert "generation: v5p" in text
    variant = tmp_path_factory.mktemp("tpu7x") / "Pulumi.prod.yaml"
    # tpu7x is offered in us-central1-c and v6e in us-central1-b (https://cloud.google.com/tpu/docs/regions-zones).
    for old, new in (
        ("generation: v5p", "generation: tpu7x"),
        ("tpuray:region: us-east5", "tpuray:region: us-central1"),
        ("tpuray:zone: us-east5-a", "tpuray:zone: us-central1-c"),
        ("zone: us-east5-b", "zone: us-central1-b"),
    ):
        assert old in text
        text = text.replace(old, new)
    variant.write_text(text)
    return render_stack("prod", ROOT, stack_file=variant)


def test_tpu7x_pools_reference_their_workload_policy_without_compact(tpu7x_plan: Plan) -> None:
    policies = {r["inputs"]["name"]: r["inputs"] for r in tpu7x_plan.resources if r["type"] == RESOURCE_POLICY}
    pools = [r["inputs"] for r in tpu7x_plan.resources if r["type"] == NODE_POOL]
    tpu7x = [p for p in pools if p["nodeConfig"]["machineType"] == "tpu7x-standard-4t"]
    assert len(tpu7x) == 2  # two 4x4x4 slices, one node pool each
    for p in tpu7x:
        placement = p["placementPolicy"]
        assert placement == {"type": "", "policyName": placement["policyName"], "tpuTopology": "4x4x4"}
        policy = policies[placement["policyName"]]
        assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "4x4x4"}
        assert policy["region"] == "us-central1"
    v6e = [p for p in pools if p["nodeConfig"]["machineType"] == "ct6e-standard-4t"]
    assert v6e and all(p["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"} for p in v6e)


def test_tpu7x_variant_passes_every_policy_and_serves_every_pool(tpu7x_plan: Plan) -> None:
    assert tpu7x_plan.violations == []
    (cluster,) = [r["inputs"] for r in tpu7x_plan.resources if r["type"] == "gcp:container/cluster:Cluster"]
    # no version is requested (GKE offers its channel's default); the floor the config checks and the doctor
    # compares with the live control plane is tpu7x's own minimum, above flex-start's 1.33.0-gke.1712000
    assert "minMasterVersion" not in cluster
    version = tpu7x_plan.config.master_version
    assert version == "1.34.0-gke.2201000"
    assert all(gke_version_key(version) >= gke_version_key(p.min_gke_version) for p in tpu7x_plan.config.slice_pools)


def test_workers_leave_the_tpu_env_to_the_device_plugin(tpu7x_plan: Plan) -> None:
    (ray,) = [r["inputs"] for r in tpu7x_plan.resources if r["type"] == "kubernetes:ray.io/v1:RayCluster"]
    for group in ray["spec"]["workerGroupSpecs"]:
        for c in group["template"]["spec"]["containers"]:
            names = {e["name"] for e in c.get("env", [])}
            assert not names & {"TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY"}, group["groupName"]
