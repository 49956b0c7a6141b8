"""The hardening the Pulumi components declare, under the SDK mock engine: the GKE cluster and its nodes, the
control plane's endpoints, shielded TPU node pools, who may call the Ray job API, and the workers' tokenless
service account (the pure planners' side is tests/planning/test_security.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.stacks import v6e_config
from tpuray.components.catalog.names import RAY_SERVICE_ACCOUNT, RAY_WORKER_SERVICE_ACCOUNT
from tpuray.components.config import StackConfig
from tpuray.components.gke_cluster import GkeCluster
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL


def build_cluster(cfg: StackConfig) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        c = GkeCluster("gke", plan_stack(cfg, "test").gke)
        return {"name": c.cluster_name}

    return build


def test_cluster_and_nodes_are_hardened() -> None:
    worker = "us-docker.pkg.dev/tpuray-test-proj/images/worker@sha256:" + "b" * 64
    rec, _ = er.run(build_cluster(v6e_config(ray={"workerImage": worker})))
    c = rec.one(CLUSTER)["inputs"]
    assert c["enableLegacyAbac"] is False
    assert c["masterAuth"]["clientCertificateConfig"]["issueClientCertificate"] is False
    assert c["enableShieldedNodes"] is True
    assert c["nodeConfig"]["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableIntegrityMonitoring": True}
    system = rec.one(NODE_POOL)["inputs"]
    assert system["nodeConfig"]["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableIntegrityMonitoring": True,
    }
    roles = [r["inputs"]["role"] for r in rec.of_type("gcp:projects/iAMMember:IAMMember")]
    assert roles == ["roles/container.defaultNodeServiceAccount"]
    (read,) = rec.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")  # the worker's repo only
    assert (
        read["inputs"]["project"],
        read["inputs"]["location"],
        read["inputs"]["repository"],
        read["inputs"]["role"],
    ) == (
        "tpuray-test-proj",
        "us",
        "images",
        "roles/artifactregistry.reader",
    )
    assert "controlPlaneEndpointsConfig" not in c and c["privateClusterConfig"]["enablePrivateEndpoint"] is False


@pytest.mark.parametrize("endpoint", ["private", "dns"])
def test_private_and_dns_control_plane_endpoints(endpoint: str) -> None:
    rec, _ = er.run(build_cluster(v6e_config(cluster={"name": "tpu", "controlPlaneEndpoint": endpoint})))
    c = rec.one(CLUSTER)["inputs"]
    if endpoint == "private":
        assert c["privateClusterConfig"]["enablePrivateEndpoint"] is True
    else:
        assert c["controlPlaneEndpointsConfig"] == {
            "dnsEndpointConfig": {"allowExternalTraffic": True},
            "ipEndpointsConfig": {"enabled": False},
        }
    assert "masterAuthorizedNetworksConfig" not in c


def test_tpu_node_pools_are_shielded() -> None:
    from tpuray.components.tpu_slice_pool import TpuSlicePool, TpuSlicePoolArgs

    cfg = v6e_config()

    def build() -> dict[str, Any]:
        TpuSlicePool(
            "v6e",
            TpuSlicePoolArgs(plan_stack(cfg, "test").pools[0].slice_pool, "tpu", "nodes@x.iam.gserviceaccount.com"),
        )
        return {}

    rec, _ = er.run(build)
    pools = rec.of_type(NODE_POOL)
    assert len(pools) == 2  # two multi-host slices: one pool each
    for p in pools:
        assert p["inputs"]["nodeConfig"]["shieldedInstanceConfig"] == {
            "enableSecureBoot": True,
            "enableIntegrityMonitoring": True,
        }


def test_which_operator_namespace_may_call_the_job_api() -> None:
    assert v6e_config().ray.job_api_namespace == "kuberay-system"  # where the Helm chart installs the operator
    assert v6e_config(ray={"operatorNamespace": "ray-operator"}).ray.job_api_namespace == "ray-operator"
    cfg = v6e_config()

    def build() -> dict[str, Any]:
        from tpuray.components.stack import deploy

        deploy(cfg, "test")
        return {}

    rec, _ = er.run(build)
    head = next(
        p["inputs"] for p in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy") if "head-job-api" in p["name"]
    )
    sources = head["spec"]["ingress"][0]["from"]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}},
        "podSelector": {},
    } in sources


def test_the_workers_account_is_declared_tokenless_and_bound_to_the_ray_identity() -> None:
    cfg = v6e_config()

    def build() -> dict[str, Any]:
        from tpuray.components.stack import deploy

        deploy(cfg, "test")
        return {}

    rec, _ = er.run(build)
    accounts = {a["inputs"]["metadata"]["name"]: a["inputs"] for a in rec.of_type("kubernetes:core/v1:ServiceAccount")}
    assert accounts[RAY_WORKER_SERVICE_ACCOUNT]["automountServiceAccountToken"] is False
    assert accounts[RAY_SERVICE_ACCOUNT].get("automountServiceAccountToken") is not False
    members = {m["inputs"]["member"] for m in rec.of_type("gcp:serviceaccount/iAMMember:IAMMember")}
    for ksa in (RAY_SERVICE_ACCOUNT, RAY_WORKER_SERVICE_ACCOUNT):
        assert f"serviceAccount:tpuray-test-proj.svc.id.goog[ray/{ksa}]" in members
