"""Each component under the SDK mock engine: what it registers and with which inputs (wire values)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from tests.support import engine_run as er
from tests.support.kuberay_schema import schema_errors, tpu_chip_mismatches
from tests.support.slices import CAPACITIES, pool
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.catalog.tpu_locations import TPU_ZONES, zones_of
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.config.value_types import MIN_RAY_TOKEN_LENGTH
from tpuray.components.gke_cluster import NODE_SA_ROLES, GkeCluster
from tpuray.components.planning.kuberay import RayJobParams
from tpuray.components.planning.pool_plan import pool_plan
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.ray_cluster import RayTpuCluster, RayTpuClusterArgs, RayTpuJob, RayTpuJobArgs
from tpuray.components.ray_platform import RayPlatform, RayPlatformArgs
from tpuray.components.review.engine import STANDIN_ENDPOINT, ProgramRun
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_CLUSTER, RAY_JOB
from tpuray.components.tpu_slice_pool import TpuSlicePool, TpuSlicePoolArgs


def stack(**overrides: Any) -> StackConfig:
    base: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "cluster": {"name": "tpu", "masterAuthorizedNetworks": [{"cidr": "198.51.100.0/24", "name": "ops"}]},
        "slicePools": [{"name": "v6e", "generation": "v6e", "topology": "4x4"}],
    }
    base.update(overrides)
    return parse_stack_config(base)


def assert_parented(rec: ProgramRun, component_type: str, expected_children: int) -> None:
    assert rec.of_type(component_type), f"no {component_type} registered"
    kids = er.children_of(rec, component_type)
    assert len(kids) == expected_children, [r["type"] for r in kids]
    # parent=self on every child: nothing but the components (and an explicit provider) sits at the top
    top = [r for r in rec.resources if not r["parent"] or "::pulumi:pulumi:Stack::" in r["parent"]]
    assert top and all(r["type"].startswith(("tpuray:index:", "pulumi:providers:")) for r in top), top


# ---- GkeCluster ---------------------------------------------------------------------------------------
def build_cluster(cfg: StackConfig) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        c = GkeCluster("gke", plan_stack(cfg, "test").gke)
        return {"kubeconfig": c.kubeconfig, "name": c.cluster_name}

    return build


def test_gke_cluster_new_private_network() -> None:
    rec, out = er.run(build_cluster(stack()))
    assert rec.types().count("gcp:projects/iAMMember:IAMMember") == len(NODE_SA_ROLES)
    for t in (
        "gcp:compute/network:Network",
        "gcp:compute/subnetwork:Subnetwork",
        "gcp:compute/router:Router",
        "gcp:compute/routerNat:RouterNat",
        "gcp:serviceaccount/account:Account",
        CLUSTER,
        NODE_POOL,
        "pulumi:providers:kubernetes",
    ):
        assert len(rec.of_type(t)) == 1, t
    assert_parented(rec, "tpuray:index:GkeCluster", 8 + len(NODE_SA_ROLES))

    c = rec.one(CLUSTER)["inputs"]
    assert c["name"] == "tpu" and c["location"] == "us-east5-a"
    # KubeRay comes from its Helm chart: the add-on is declared off, so a cluster that had it loses it
    assert c["addonsConfig"]["rayOperatorConfigs"] == [{"enabled": False}]
    assert c["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    assert c["workloadIdentityConfig"] == {"workloadPool": "tpuray-test-proj.svc.id.goog"}
    assert c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert c["removeDefaultNodePool"] is True and c["initialNodeCount"] == 1.0
    assert c["deletionProtection"] is True
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    # nothing requested: GKE creates the channel's default; the floor v6e needs (1.31.2-gke.1115000) is checked
    assert "minMasterVersion" not in c
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert c["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [{"cidrBlock": "198.51.100.0/24", "displayName": "ops"}]
    assert c["ipAllocationPolicy"] == {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"}
    sa = rec.one("gcp:serviceaccount/account:Account")["inputs"]
    email = f"{sa['accountId']}@tpuray-test-proj.iam.gserviceaccount.com"
    assert c["nodeConfig"]["serviceAccount"] == email  # never the default compute service account

    sub = rec.one("gcp:compute/subnetwork:Subnetwork")["inputs"]
    assert {r["rangeName"]: r["ipCidrRange"] for r in sub["secondaryIpRanges"]} == {
        "pods": "10.16.0.0/14",
        "services": "10.20.0.0/20",
    }
    assert rec.one("gcp:compute/routerNat:RouterNat")["inputs"]["sourceSubnetworkIpRangesToNat"] == (
        "ALL_SUBNETWORKS_ALL_IP_RANGES"
    )

    system = rec.one(NODE_POOL)["inputs"]
    assert system["name"] == "system" and system["nodeCount"] == 1.0
    assert system["nodeConfig"]["serviceAccount"] == email
    assert system["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    roles = sorted(r["inputs"]["role"] for r in rec.of_type("gcp:projects/iAMMember:IAMMember"))
    assert roles == sorted(NODE_SA_ROLES)
    members = {r["inputs"]["member"] for r in rec.of_type("gcp:projects/iAMMember:IAMMember")}
    assert members == {f"serviceAccount:{email}"}

    assert rec.secret_outputs == ["kubeconfig"] and out["name"] == "tpu"
    kc = json.loads(out["kubeconfig"])
    assert kc["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert kc["clusters"][0]["cluster"]["server"] == f"https://{STANDIN_ENDPOINT}"


def test_gke_cluster_existing_network_public_nodes() -> None:
    cfg = stack(
        network={"create": False, "name": "shared", "subnetwork": "gke"},
        cluster={"name": "tpu", "privateNodes": False, "regional": True},
    )
    rec, _ = er.run(build_cluster(cfg))
    assert not rec.of_type("gcp:compute/network:Network") and not rec.of_type("gcp:compute/routerNat:RouterNat")
    c = rec.one(CLUSTER)["inputs"]
    assert c["network"] == "projects/tpuray-test-proj/global/networks/shared"
    assert c["subnetwork"] == "projects/tpuray-test-proj/regions/us-east5/subnetworks/gke"
    assert c["location"] == "us-east5"
    assert "privateClusterConfig" not in c


def test_gke_cluster_existing_network_private_nats_only_its_subnet() -> None:
    cfg = stack(network={"create": False, "name": "shared", "subnetwork": "gke"})
    rec, _ = er.run(build_cluster(cfg))
    nat = rec.one("gcp:compute/routerNat:RouterNat")["inputs"]
    assert nat["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS"
    assert nat["subnetworks"][0]["name"].endswith("/subnetworks/gke")


@pytest.mark.parametrize("streaming", [True, False])
def test_gke_cluster_grants_image_streamings_role_only_where_the_worker_image_streams(streaming: bool) -> None:
    """GKE's image streaming page ("Requirements"): a node service account other than the default needs Service
    Usage Consumer in the project that hosts the images; the worker image lives in a project of its own here."""
    cfg = stack(
        ray={"workerImage": "us-docker.pkg.dev/tpuray-images/tpuray/worker:0.1.0"},
        startup={"images": {"streaming": streaming, "containerFileSystemApiEnabled": True}},
    )
    rec, _ = er.run(build_cluster(cfg))
    grants = {
        (r["inputs"]["role"], r["inputs"]["project"]): r["inputs"]["member"]
        for r in rec.of_type("gcp:projects/iAMMember:IAMMember")
    }
    node_role = ("roles/container.defaultNodeServiceAccount", "tpuray-test-proj")
    streaming_role = ("roles/serviceusage.serviceUsageConsumer", "tpuray-images")
    assert sorted(grants) == sorted([node_role, streaming_role] if streaming else [node_role])
    assert len(set(grants.values())) == 1  # both to the node service account
    assert all(r["parent"].endswith("GkeCluster::gke") for r in rec.of_type("gcp:projects/iAMMember:IAMMember"))


# ---- TpuSlicePool -------------------------------------------------------------------------------------
def build_pool(cfg: StackConfig, index: int = 0) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        p = plan_stack(cfg, "test").pools[index].slice_pool
        comp = TpuSlicePool(p.name, TpuSlicePoolArgs(p, "tpu", "nodes@tpuray-test-proj.iam.gserviceaccount.com"))
        return {"names": comp.pool_names}

    return build


def pool_cfg(
    generation: str,
    topology: str,
    capacity: str = "on-demand",
    slices: int = 1,
    machine_type: str | None = None,
    autoscaling: dict[str, Any] | None = None,
) -> StackConfig:
    s = TpuSlice.parse(generation, topology, machine_type)
    p = pool(s, capacity, slices, name="tpu", autoscaling=autoscaling)
    # A zone that offers the generation (the Cloud TPU regions and zones page, tpu_locations): us-east5-a if it does.
    zone = next(z for z in ["us-east5-a", *zones_of(s.generation)] if s.generation in TPU_ZONES[z])
    where = {"region": zone.rsplit("-", 1)[0], "zone": zone}
    if capacity == "queued":  # a queued pool is only reachable through Kueue
        return stack(
            slicePools=[p.model_dump(by_alias=True)], kueue={"enabled": True}, ray={"jobMode": "ephemeral"}, **where
        )
    return stack(slicePools=[p.model_dump(by_alias=True)], **where)


CASES = {
    "single-host-spot": ("v5e", "2x2", "spot", 3, None),
    "multi-host-reservation": ("v5p", "2x2x4", "shared-reservation", 1, None),
    "multislice-on-demand": ("v6e", "4x4", "on-demand", 3, None),
    "multi-host-2x4-flex": ("v6e", "2x4", "flex-start", 2, "ct6e-standard-4t"),
    "multi-host-queued": ("v5e", "4x8", "queued", 1, None),
    "tpu7x-multislice": ("tpu7x", "4x4x4", "reservation", 2, None),
    "tpu7x-single-host": ("tpu7x", "2x2x1", "on-demand", 2, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_slice_pool_registers_what_the_plan_says(case: str) -> None:
    gen, topo, cap, slices, machine = CASES[case]
    cfg = pool_cfg(gen, topo, cap, slices, machine)
    rec, out = er.run(build_pool(cfg))
    plans = pool_plan(cfg, cfg.slice_pools[0]).node_pools
    s = cfg.slice_pools[0].tpu_slice
    by_name = {p["inputs"]["name"]: p for p in rec.of_type(NODE_POOL)}  # registration order is not deterministic
    assert [p.name for p in plans] == out["names"] and sorted(by_name) == sorted(out["names"])
    pools = [by_name[p.name] for p in plans]
    assert len(pools) == (slices if s.multi_host else 1)
    policies = rec.of_type("gcp:compute/resourcePolicy:ResourcePolicy")
    assert len(policies) == (1 if s.placement == "workload-policy" else 0)
    assert_parented(rec, "tpuray:index:TpuSlicePool", len(pools) + len(policies))

    for reg, plan in zip(pools, plans, strict=True):
        i = reg["inputs"]
        nc = i["nodeConfig"]
        assert i["cluster"] == "tpu" and i["location"] == cfg.zone
        assert i["nodeLocations"] == [cfg.zone]
        assert nc["machineType"] == s.machine_type
        assert nc["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}]
        assert nc["labels"]["tpuray.io/pool"] == "tpu"
        assert nc["gvnic"] == {"enabled": True}
        assert nc["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        assert nc["serviceAccount"] == "nodes@tpuray-test-proj.iam.gserviceaccount.com"
        hosts = s.hosts if s.multi_host else slices
        if "autoscaling" in i:
            assert i["autoscaling"]["maxNodeCount"] == float(hosts)
            assert "totalMaxNodeCount" not in i["autoscaling"]  # total limits fail for TPU slices
            assert "nodeCount" not in i
        else:
            assert i["nodeCount"] == float(hosts)
        if s.placement == "compact":
            assert i["placementPolicy"] == {"type": "COMPACT", "tpuTopology": topo}
            assert i["autoscaling"]["locationPolicy"] == "ANY"
        elif s.placement == "workload-policy":
            wp = policies[0]["inputs"]
            assert wp["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": topo}
            assert wp["region"] == cfg.region
            # a workload policy, no COMPACT type: GKE rejects the pair (what GKE stores: policyName + tpuTopology)
            assert i["placementPolicy"] == {"type": "", "policyName": wp["name"], "tpuTopology": topo}
        else:
            assert "placementPolicy" not in i  # GKE rejects tpu_topology on single-host pools
        _capacity_inputs(cap, i)
        assert plan.name == i["name"]


def _capacity_inputs(cap: str, i: dict[str, Any]) -> None:
    nc = i["nodeConfig"]
    assert nc.get("spot", False) == (cap == "spot")
    assert nc.get("flexStart", False) == (cap in ("flex-start", "queued"))
    assert ("queuedProvisioning" in i) == (cap == "queued")
    ra = nc.get("reservationAffinity")
    if cap in ("reservation", "shared-reservation"):
        assert ra["consumeReservationType"] == "SPECIFIC_RESERVATION"
        assert ra["key"] == "compute.googleapis.com/reservation-name"
        name = CAPACITIES[cap]["name"]
        proj = CAPACITIES[cap].get("project")
        assert ra["values"] == [f"projects/{proj}/reservations/{name}" if proj else name]
    elif cap in ("flex-start", "queued"):
        assert ra == {"consumeReservationType": "NO_RESERVATION"}
        assert i["autoscaling"]["minNodeCount"] == 0.0 and i["initialNodeCount"] == 0.0
        assert i["management"]["autoRepair"] is False
    else:
        assert ra is None
    if cap == "flex-start":
        assert nc["maxRunDuration"] == "21600s"
    if cap == "queued":
        assert i["queuedProvisioning"] == {"enabled": True}
    # spot pools ask GKE for the longer graceful node shutdown after a preemption notice (config.capacity.Spot)
    shutdown = {"shutdownGracePeriodSeconds": 120.0, "shutdownGracePeriodCriticalPodsSeconds": 15.0}
    assert nc.get("kubeletConfig") == (shutdown if cap == "spot" else None)


def test_a_spot_pool_on_gkes_default_shutdown_declares_no_kubelet_config() -> None:
    p = pool(TpuSlice.parse("v5e", "2x2"), "spot", name="tpu").model_dump(by_alias=True)
    p["capacity"]["shutdownGracePeriod"] = 30
    cfg = stack(slicePools=[p], region="us-east5", zone="us-east5-a")
    rec, _ = er.run(build_pool(cfg))
    [reg] = rec.of_type(NODE_POOL)
    assert reg["inputs"]["nodeConfig"]["spot"] is True and "kubeletConfig" not in reg["inputs"]["nodeConfig"]


# ---- RayPlatform / RayTpuCluster / RayTpuJob -----------------------------------------------------------
def build_ray(cfg: StackConfig) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        planned = plan_stack(cfg, "test").ray
        platform = RayPlatform("ray", RayPlatformArgs(planned, depends_on=[]))
        ray = RayTpuCluster("ray", RayTpuClusterArgs(planned, platform))
        job = RayTpuJob(
            "job",
            RayTpuJobArgs(
                RayJobParams(
                    name="train",
                    namespace=cfg.ray.namespace,
                    entrypoint="python -m tpuray.workloads.train",
                    cluster=planned.params,
                    backoff_limit=1,
                ),
                depends_on=list(platform.prerequisites),
            ),
        )
        holder.update(ray=ray, job=job)
        return {"bucket": platform.bucket_name, "gsa": platform.google_service_account_email}

    holder: dict[str, Any] = {}
    build.holder = holder  # type: ignore[attr-defined]
    return build


def test_ray_cluster_and_job() -> None:
    cfg = stack(
        slicePools=[
            {"name": "v6e", "generation": "v6e", "topology": "4x4", "slices": 2},
            {"name": "v5e", "generation": "v5e", "topology": "2x2", "capacity": {"type": "spot"}},
        ]
    )
    build = build_ray(cfg)
    rec, out = er.run(build)
    ray, job = build.holder["ray"], build.holder["job"]  # type: ignore[attr-defined]
    # namespace, bucket, GSA, bucket grant, WI binding, KSA, token + Secret, 6 NetworkPolicies
    # +1 service account, +1 binding: the workers'; +1 NetworkPolicy (egress to the TPU device plugin's metrics port)
    # and +1 PodMonitoring (the training metrics); +1 the KubeRay operator's Helm release (ray.operator: helm)
    assert_parented(rec, "tpuray:index:RayPlatform", 19)
    assert_parented(rec, "tpuray:index:RayTpuCluster", 1)  # the RayCluster
    (rc_reg,) = er.children_of(rec, "tpuray:index:RayTpuCluster")
    platform_urns = {r["urn"] for r in er.children_of(rec, "tpuray:index:RayPlatform")}
    kinds = {r["type"] for r in er.children_of(rec, "tpuray:index:RayPlatform") if r["urn"] in er.depends_on(rc_reg)}
    # the RayCluster waits for the namespace, accounts, token, grants and the operator, all of the platform
    assert set(er.depends_on(rc_reg)) <= platform_urns and "kubernetes:helm.sh/v3:Release" in kinds
    assert_parented(rec, "tpuray:index:RayTpuJob", 1)
    assert len(rec.of_type("kubernetes:helm.sh/v3:Release")) == 1

    bucket = rec.one("gcp:storage/bucket:Bucket")["inputs"]
    assert bucket["name"] == cfg.checkpoint_bucket == out["bucket"]
    assert bucket["uniformBucketLevelAccess"] is True and bucket["publicAccessPrevention"] == "enforced"
    assert bucket["lifecycleRules"][0]["condition"]["age"] == 30.0
    iam = rec.one("gcp:storage/bucketIAMMember:BucketIAMMember")["inputs"]
    assert (iam["bucket"], iam["role"], iam["member"]) == (
        bucket["name"],
        "roles/storage.objectUser",
        f"serviceAccount:{out['gsa']}",
    )
    wis = [r["inputs"] for r in rec.of_type("gcp:serviceaccount/iAMMember:IAMMember")]
    assert {wi["role"] for wi in wis} == {"roles/iam.workloadIdentityUser"}
    assert sorted(wi["member"] for wi in wis) == [
        "serviceAccount:tpuray-test-proj.svc.id.goog[ray/ray-worker]",  # the workers' own account
        "serviceAccount:tpuray-test-proj.svc.id.goog[ray/ray]",
    ]
    for ksa in rec.of_type("kubernetes:core/v1:ServiceAccount"):
        assert ksa["inputs"]["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": out["gsa"]}
    ns = rec.one("kubernetes:core/v1:Namespace")["inputs"]["metadata"]
    assert ns["name"] == "ray" and ns["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert bucket["softDeletePolicy"]["retentionDurationSeconds"] == 7 * 86400
    secret = rec.one("kubernetes:core/v1:Secret")["inputs"]
    assert secret["metadata"] == {
        "name": "tpu-ray-auth",
        "namespace": "ray",
        "labels": plan_stack(cfg, "test").k8s_labels,
    }
    assert rec.one("random:index/randomPassword:RandomPassword")["inputs"]["length"] >= MIN_RAY_TOKEN_LENGTH
    policies = {p["inputs"]["metadata"]["name"] for p in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert "default-deny-all" in policies and "tpu-ray-tpu-device-plugin" in policies and len(policies) == 7

    rc = rec.one(RAY_CLUSTER)["inputs"]
    assert rc["apiVersion"] == "ray.io/v1" and rc["kind"] == "RayCluster"
    assert rc == ray.manifest  # what is declared is exactly the pure manifest
    assert schema_errors(ray.manifest) == [] and tpu_chip_mismatches(ray.manifest["spec"]) == []
    groups = {g["groupName"]: g for g in ray.manifest["spec"]["workerGroupSpecs"]}
    assert (groups["v6e"]["replicas"], groups["v6e"]["numOfHosts"]) == (2, 4)
    assert (groups["v5e"]["replicas"], groups["v5e"]["numOfHosts"]) == (1, 1)

    rj = rec.one(RAY_JOB)["inputs"]
    assert rj == job.manifest
    assert schema_errors(job.manifest) == []
    assert job.manifest["spec"]["backoffLimit"] == 1


def test_helm_operator_mode_installs_the_pinned_chart() -> None:
    cfg = stack(ray={"helmChartVersion": "1.6.0"})
    rec, _ = er.run(build_ray(cfg))
    rel = rec.one("kubernetes:helm.sh/v3:Release")["inputs"]
    assert (rel["chart"], rel["version"], rel["repositoryOpts"]["repo"]) == (
        "kuberay-operator",
        "1.6.0",
        "https://ray-project.github.io/kuberay-helm/",
    )


def test_mocks_are_live() -> None:
    """Guard against the vacuous pass: a build that declares something must be seen by the engine."""
    rec, out = er.run(lambda: {"x": pulumi.Output.from_input(1)})
    assert rec.resources == [] and out == {"x": 1}
    rec, _ = er.run(build_pool(pool_cfg("v5e", "2x2")))
    assert rec.types() == [NODE_POOL, "tpuray:index:TpuSlicePool"]


# ---- maintenance ------------------------------------------------------------------------------------------
def test_cluster_maintenance_window_exclusions_and_pool_auto_upgrade() -> None:
    window = {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T08:00:00Z", "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"}
    exclusion = {
        "name": "launch",
        "start": "2026-03-01T00:00:00Z",
        "end": "2026-03-20T00:00:00Z",
        "scope": "NO_UPGRADES",
    }
    cfg = stack(
        cluster={"name": "tpu", "releaseChannel": "UNSPECIFIED"},
        maintenance={"window": window, "exclusions": [exclusion]},
        slicePools=[{"name": "v6e", "generation": "v6e", "topology": "4x4", "autoUpgrade": False}],
    )
    rec, _ = er.run(build_cluster(cfg))
    policy = rec.one(CLUSTER)["inputs"]["maintenancePolicy"]
    assert policy["recurringWindow"] == {
        "startTime": window["start"],
        "endTime": window["end"],
        "recurrence": window["recurrence"],
    }
    assert policy["maintenanceExclusions"] == [
        {
            "exclusionName": "launch",
            "startTime": exclusion["start"],
            "endTime": exclusion["end"],
            "exclusionOptions": {"scope": "NO_UPGRADES"},
        }
    ]
    assert rec.one(CLUSTER)["inputs"]["releaseChannel"] == {"channel": "UNSPECIFIED"}
    rec, _ = er.run(build_pool(cfg))
    assert all(p["inputs"]["management"]["autoUpgrade"] is False for p in rec.of_type(NODE_POOL))
    # the default: no policy (GKE's any-time maintenance), pools auto-upgraded
    rec, _ = er.run(build_cluster(stack()))
    assert "maintenancePolicy" not in rec.one(CLUSTER)["inputs"]
    rec, _ = er.run(build_pool(stack()))
    assert all(p["inputs"]["management"]["autoUpgrade"] is True for p in rec.of_type(NODE_POOL))
