"""The doctor on a stack that serves: the KubeRay gate an incremental upgrade needs, read from the operator as it
runs, the Gateway API it routes through (the CRDs, the GatewayClass), and serving pods on node pools no training pod
runs on."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.doctor_objects import OPERATOR
from tests.support.doctor_snapshots import GKE_GATEWAY_CLASSES, gateway_api_crd, gateway_class, write_snapshot
from tests.support.fake_kube_api import GATEWAY_CLASSES_PATH, RAY_CLUSTERS_PATH, serve, write_kubeconfig
from tests.support.stacks import serving_values
from tpuray.components.catalog.names import GKE_NODEPOOL_LABEL, RAY_CLUSTER_LABEL, TPU_RESOURCE
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.doctor.checks import run_checks
from tpuray.components.doctor.gateway_checks import check_serving_gateway_api, check_serving_gateway_class
from tpuray.components.doctor.reader import (
    GATEWAY_CLASS_CRD,
    LIST_FILES,
    OPTIONAL_LIST_FILES,
    ClusterObjects,
    LiveReader,
    SnapshotReader,
)
from tpuray.components.doctor.serving_checks import check_serving_pools_apart, check_serving_upgrade_gate

INCREMENTAL = {"strategy": "NewClusterWithIncrementalUpgrade", "stepSlices": 1, "gatewayClassName": "gke-l7-rilb"}


def _cfg(upgrade: dict[str, Any] | None = None) -> StackConfig:
    serving: dict[str, Any] = {
        "replicas": 2,
        "minSlices": 1,
        "maxSlices": 3,
        **({"upgrade": upgrade} if upgrade else {}),
    }
    return parse_stack_config(serving_values(serving), stack="dev")


def _operator(image: str, args: list[str] | None) -> dict[str, Any]:
    op = copy.deepcopy(OPERATOR)
    container = op["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    container.pop("args")
    if args is not None:
        container["args"] = args
    return op


def _pod(name: str, cluster: str, node: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": {RAY_CLUSTER_LABEL: cluster}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "ray-worker", "resources": {"limits": {TPU_RESOURCE: "4"}}}],
        },
        "status": {"phase": "Running"},
    }


def _objects(
    deployments: list[dict[str, Any]],
    pods: list[dict[str, Any]] | None = None,
    nodes: dict[str, str] | None = None,
    *,
    crds: list[dict[str, Any]] | None = None,
    gateway_classes: list[dict[str, Any]] | None = None,
    ray_clusters: list[dict[str, Any]] | None = None,
) -> ClusterObjects:
    node_objs = tuple({"metadata": {"name": n, "labels": {GKE_NODEPOOL_LABEL: p}}} for n, p in (nodes or {}).items())
    return ClusterObjects(
        node_objs,
        tuple(pods or ()),
        tuple(deployments),
        (),
        tuple(crds or ()),
        "v1.34.1-gke.1829001",
        "test",
        None if gateway_classes is None else tuple(gateway_classes),
        None if ray_clusters is None else tuple(ray_clusters),
    )


@pytest.mark.parametrize(
    ("image", "args", "status", "said"),
    [
        ("quay.io/kuberay/operator:v1.7.0", None, "pass", "on: its default"),  # Beta, on from 1.7
        ("quay.io/kuberay/operator:v1.6.1", None, "fail", "off: its default"),  # Alpha, off in 1.5 and 1.6
        ("quay.io/kuberay/operator:v1.7.0", ["--feature-gates=RayServiceIncrementalUpgrade=false"], "fail", "=false"),
        ("quay.io/kuberay/operator:v1.6.1", ["--feature-gates", "RayServiceIncrementalUpgrade=T"], "pass", "=T"),
        ("quay.io/kuberay/operator:v1.9.0", None, "warn", "not known"),  # a release whose default is not read here
    ],
)
def test_an_incremental_upgrade_needs_the_operators_gate_as_it_runs(
    image: str, args: list[str] | None, status: str, said: str
) -> None:
    result = check_serving_upgrade_gate(_cfg(INCREMENTAL), _objects([_operator(image, args)]))
    assert result is not None
    assert (result.status, result.id) == (status, "serving-upgrade-gate")
    assert said in result.fact and "RayServiceIncrementalUpgrade" in result.fact


def test_the_upgrade_gate_follows_the_image_not_the_chart_s_label() -> None:
    """A v1.7.0 chart running a v1.6.2 image: its label says 1.7.0 (the gate on by default), the image runs 1.6.2,
    where RayServiceIncrementalUpgrade is Alpha and off; a digest alone says no release: unknown."""
    op = _operator("quay.io/kuberay/operator:v1.6.2", None)
    op["metadata"]["labels"] = {"app.kubernetes.io/version": "v1.7.0"}
    result = check_serving_upgrade_gate(_cfg(INCREMENTAL), _objects([op]))
    assert result is not None
    assert result.status == "fail", result.fact
    assert "RayServiceIncrementalUpgrade off: its default" in result.fact and "label says v1.7.0" in result.fact
    op = _operator("quay.io/kuberay/operator@sha256:" + "ef" * 32, None)
    op["metadata"]["labels"] = {"app.kubernetes.io/version": "v1.7.0"}
    result = check_serving_upgrade_gate(_cfg(INCREMENTAL), _objects([op]))
    assert result is not None
    assert result.status == "warn" and "not known" in result.fact, result.fact


def test_no_operator_is_unknown_and_other_upgrades_need_no_gate() -> None:
    result = check_serving_upgrade_gate(_cfg(INCREMENTAL), _objects([]))
    assert result is not None and result.status == "warn" and "no kuberay-operator" in result.fact
    assert check_serving_upgrade_gate(_cfg(), _objects([])) is None  # NewCluster: no gate
    plain = parse_stack_config({k: v for k, v in serving_values({}).items() if k != "serving"}, stack="dev")
    assert check_serving_upgrade_gate(plain, _objects([])) is None


def _ray_cluster(name: str, namespace: str, owner: str | None) -> dict[str, Any]:
    """A RayCluster; with ``owner``, as KubeRay makes it for that RayService (a controller owner reference)."""
    refs = [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": owner, "uid": "u", "controller": True}]
    return {"metadata": {"namespace": namespace, "name": name, **({"ownerReferences": refs} if owner else {})}}


def test_serving_and_training_pods_on_one_node_pool_fail_naming_the_pool_and_pods() -> None:
    cfg = _cfg()
    assert cfg.serving is not None
    ns, service = cfg.ray.namespace, cfg.serving.service_name(cfg.cluster.name)
    nodes = {"n-serve": "serve-pool", "n-train": "train-pool"}
    clusters = [_ray_cluster(f"{service}-x7k2p", ns, service), _ray_cluster(cfg.cluster.name, ns, None)]
    apart = [
        _pod("s0", f"{service}-x7k2p", "n-serve", ns),
        _pod("t0", f"{cfg.cluster.name}", "n-train", ns),
    ]
    result = check_serving_pools_apart(cfg, _objects([], apart, nodes, ray_clusters=clusters))
    assert result is not None and result.status == "pass" and "serve-pool" in result.fact
    shared = [*apart, _pod("t1", f"{cfg.cluster.name}", "n-serve", ns)]
    result = check_serving_pools_apart(cfg, _objects([], shared, nodes, ray_clusters=clusters))
    assert result is not None and result.status == "fail"
    assert "node pool serve-pool" in result.fact and f"{ns}/t1 (RayCluster {cfg.cluster.name})" in result.fact
    assert "s0" in result.fact
    elsewhere = [*apart, _pod("t2", f"{cfg.cluster.name}", "n-serve", "other-namespace")]
    result = check_serving_pools_apart(cfg, _objects([], elsewhere, nodes, ray_clusters=clusters))
    assert result is not None and result.status == "pass"  # another namespace's pods are not the stack's


@pytest.mark.parametrize(
    ("canary", "owner", "read", "status"),
    [
        ("{service}-canary", None, True, "fail"),  # a team's own cluster on the serving pool
        ("{service}-x7k2q", None, True, "fail"),  # KubeRay's name form, but no RayService owns it
        ("{service}-x7k2q", "{service}-old", True, "fail"),  # owned by another RayService
        ("{service}-x7k2q", "{service}", True, "pass"),  # the RayService's second cluster (an upgrade)
        ("{service}-canary", None, False, "fail"),  # unread: not KubeRay's name form (vowels, six letters)
        ("{service}-x7k2a", None, False, "fail"),  # unread: "a" is no letter of rand.String
        ("{service}-x7k2q", None, False, "warn"),  # unread: the name form alone cannot tell
    ],
)
def test_only_clusters_the_rayservice_owns_count_as_serving(
    canary: str, owner: str | None, read: bool, status: str
) -> None:
    """KubeRay names a RayService's clusters ``<service>-`` plus five random letters and makes the RayService their
    controller owner (v1.7.0: ``GenerateRayClusterName``, ``constructRayClusterForRayService``): the owner decides;
    a name starting ``<service>-`` does not."""
    cfg = _cfg()
    assert cfg.serving is not None
    ns, service = cfg.ray.namespace, cfg.serving.service_name(cfg.cluster.name)
    other = canary.format(service=service)
    clusters = [
        _ray_cluster(f"{service}-x7k2p", ns, service),
        _ray_cluster(other, ns, owner.format(service=service) if owner else None),
    ]
    pods = [_pod("s0", f"{service}-x7k2p", "n-serve", ns), _pod("c0", other, "n-serve", ns)]
    objs = _objects([], pods, {"n-serve": "serve-pool"}, ray_clusters=clusters if read else None)
    result = check_serving_pools_apart(cfg, objs)
    assert result is not None
    assert result.status == status, result.fact
    if status == "fail":
        assert f"{ns}/c0 (RayCluster {other})" in result.fact and "node pool serve-pool" in result.fact
    if not read:
        assert "RayClusters not read" in result.fact


SERVING_IDS = {"serving-upgrade-gate", "serving-pools-apart", "serving-gateway-api", "serving-gateway-class"}
GATEWAY_IDS = {"serving-gateway-api", "serving-gateway-class"}


def test_run_checks_includes_the_serving_checks_only_where_the_stack_serves() -> None:
    objs = _objects([_operator("quay.io/kuberay/operator:v1.7.0", None)])
    assert {r.id for r in run_checks(_cfg(INCREMENTAL), objs)} >= SERVING_IDS
    ids = {r.id for r in run_checks(_cfg(), objs)}  # NewCluster: no Gateway
    assert "serving-pools-apart" in ids and not ids & GATEWAY_IDS
    plain = parse_stack_config({k: v for k, v in serving_values({}).items() if k != "serving"}, stack="dev")
    assert not {r.id for r in run_checks(plain, objs)} & SERVING_IDS


# ---- the Gateway API of an incremental upgrade --------------------------------------------------------------------
GATEWAY_CRDS = [gateway_api_crd("Gateway", "gateways"), gateway_api_crd("HTTPRoute", "httproutes")]
"""What KubeRay v1.7.0 creates for an incremental upgrade, at the version it creates them (v1)."""


@pytest.mark.parametrize(
    ("crds", "status", "said"),
    [
        (GATEWAY_CRDS, "pass", "gateways.gateway.networking.k8s.io serves v1"),
        ([], "fail", "no CRD gateways.gateway.networking.k8s.io; no CRD httproutes.gateway.networking.k8s.io"),
        (GATEWAY_CRDS[:1], "fail", "no CRD httproutes.gateway.networking.k8s.io"),
        (  # an old experimental install: HTTPRoute only at v1beta1, which KubeRay's v1 client cannot reach
            [GATEWAY_CRDS[0], gateway_api_crd("HTTPRoute", "httproutes", served=("v1beta1",))],
            "fail",
            "httproutes.gateway.networking.k8s.io serves v1beta1",
        ),
    ],
)
def test_an_incremental_upgrade_needs_the_gateway_and_httproute_crds_at_v1(
    crds: list[dict[str, Any]], status: str, said: str
) -> None:
    result = check_serving_gateway_api(_cfg(INCREMENTAL), _objects([], crds=crds))
    assert result is not None
    assert (result.id, result.status) == ("serving-gateway-api", status)
    assert said in result.fact, result.fact
    assert "--gateway-api=standard" in result.fix and result.source.startswith("https://cloud.google.com/")


def _class_result(classes: list[dict[str, Any]] | None, name: str = "gke-l7-rilb") -> tuple[str, str, str]:
    upgrade = {**INCREMENTAL, "gatewayClassName": name}
    result = check_serving_gateway_class(_cfg(upgrade), _objects([], crds=GATEWAY_CRDS, gateway_classes=classes))
    assert result is not None and result.id == "serving-gateway-class"
    return result.status, result.fact, result.fix


def test_the_gateway_class_the_stack_names_exists_and_is_accepted() -> None:
    gke = [gateway_class(n) for n in GKE_GATEWAY_CLASSES]
    status, fact, _ = _class_result(gke)
    assert status == "pass" and "gke-l7-rilb (networking.gke.io/gateway): Accepted True" in fact


def test_a_missing_gateway_class_fails_naming_it_and_the_classes_there_are() -> None:
    gke = [gateway_class(n) for n in GKE_GATEWAY_CLASSES]
    status, fact, fix = _class_result(gke, "istio")
    assert status == "fail" and "no GatewayClass istio" in fact
    assert "the cluster has " + ", ".join(sorted(GKE_GATEWAY_CLASSES)) in fact
    assert "serving.upgrade.gatewayClassName" in fix and "--gateway-api=standard" in fix
    status, fact, _ = _class_result([])
    assert status == "fail" and "no GatewayClass gke-l7-rilb: the cluster has none" in fact


@pytest.mark.parametrize(
    ("accepted", "said"),
    [
        ("False", "Accepted False (InvalidParameters)"),
        ("Unknown", "Accepted Unknown (Pending)"),  # the spec's default before a controller answers
        (None, "no Accepted condition"),
    ],
)
def test_a_gateway_class_not_accepted_warns(accepted: str | None, said: str) -> None:
    reason = "InvalidParameters" if accepted == "False" else "Pending"
    status, fact, fix = _class_result([gateway_class("gke-l7-rilb", accepted, reason)])
    assert status == "warn" and said in fact, fact
    assert "kubectl describe gatewayclass gke-l7-rilb" in fix


def test_unread_gateway_classes_are_unknown_never_a_pass() -> None:
    status, fact, fix = _class_result(None)
    assert status == "warn" and "not read" in fact and "unknown" in fact
    assert OPTIONAL_LIST_FILES["gateway_classes"] in fix


def test_a_gateway_class_field_of_the_wrong_type_fails_naming_it() -> None:
    bad = gateway_class("gke-l7-rilb")
    bad["status"]["conditions"] = {"type": "Accepted"}  # the API returns an array
    objs = _objects([], crds=GATEWAY_CRDS, gateway_classes=[bad])
    [result] = [r for r in run_checks(_cfg(INCREMENTAL), objs) if r.id == "serving-gateway-class"]
    assert result.status == "fail" and "status.conditions is a JSON object, not an array" in result.fact


@pytest.mark.parametrize("upgrade", [None, {"strategy": "None"}])
def test_the_gateway_checks_apply_only_to_an_incremental_upgrade(upgrade: dict[str, Any] | None) -> None:
    objs = _objects([], crds=[], gateway_classes=[])
    assert check_serving_gateway_api(_cfg(upgrade), objs) is None
    assert check_serving_gateway_class(_cfg(upgrade), objs) is None
    plain = parse_stack_config({k: v for k, v in serving_values({}).items() if k != "serving"}, stack="dev")
    assert check_serving_gateway_api(plain, objs) is None and check_serving_gateway_class(plain, objs) is None


def test_a_snapshot_without_gatewayclasses_json_still_reads_and_says_unknown(tmp_path: Path) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    objs = SnapshotReader(snapshot).read()
    assert objs.gateway_classes is not None and {c["metadata"]["name"] for c in objs.gateway_classes} == set(
        GKE_GATEWAY_CLASSES
    )
    results = {r.id: r.status for r in run_checks(_cfg(INCREMENTAL), objs)}
    assert (results["serving-gateway-api"], results["serving-gateway-class"]) == ("pass", "pass")
    (snapshot / OPTIONAL_LIST_FILES["gateway_classes"]).unlink()  # a snapshot saved before the file existed
    objs = SnapshotReader(snapshot).read()
    assert objs.gateway_classes is None
    results = {r.id: r.status for r in run_checks(_cfg(INCREMENTAL), objs)}
    assert (results["serving-gateway-api"], results["serving-gateway-class"]) == ("pass", "warn")


def _without_gateway_class_crd(snapshot: Path) -> None:
    f = snapshot / LIST_FILES["crds"]
    doc = json.loads(f.read_text())
    doc["items"] = [c for c in doc["items"] if c["metadata"]["name"] != GATEWAY_CLASS_CRD]
    f.write_text(json.dumps(doc))


def test_a_live_reader_not_let_list_gateway_classes_reads_the_rest_and_says_unknown(tmp_path: Path) -> None:
    """RBAC may forbid listing GatewayClasses: only a serving stack's check needs them, so the read goes on and that
    check warns that it could not tell."""
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    with serve(snapshot, forbidden={GATEWAY_CLASSES_PATH}) as api:
        objs = LiveReader(str(write_kubeconfig(tmp_path / "kubeconfig", api.server)), "fake").read()
    assert GATEWAY_CLASSES_PATH in api.gets and objs.gateway_classes is None and objs.nodes
    results = {r.id: r.status for r in run_checks(_cfg(INCREMENTAL), objs)}
    assert results["serving-gateway-class"] == "warn"


@pytest.mark.parametrize(
    ("edit", "listed", "classes"),
    [
        ("none", True, set(GKE_GATEWAY_CLASSES)),
        ("no-crd", False, set()),  # no GatewayClass CRD: nothing to list, and none exist
        ("not-served", True, set()),  # the CRD is there but the path 404s (not v1): none to find
    ],
)
def test_the_live_reader_lists_gateway_classes_only_where_their_crd_is(
    tmp_path: Path, edit: str, listed: bool, classes: set[str]
) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    if edit == "no-crd":
        _without_gateway_class_crd(snapshot)
    if edit != "none":
        (snapshot / OPTIONAL_LIST_FILES["gateway_classes"]).unlink()
    with serve(snapshot) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.server)
        objs = LiveReader(str(kubeconfig), "fake").read()
    assert api.writes == []
    assert (GATEWAY_CLASSES_PATH in api.gets) == listed
    assert objs.gateway_classes is not None
    assert {c["metadata"]["name"] for c in objs.gateway_classes} == classes


@pytest.mark.parametrize("forbidden", [False, True])
def test_the_live_reader_lists_ray_clusters_and_a_refusal_leaves_them_unread(tmp_path: Path, forbidden: bool) -> None:
    """RayClusters are listed cluster-wide through ray.io/v1 where their CRD is installed; an identity RBAC does
    not let list them reads the rest, and serving-pools-apart then says it read no owner."""
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    with serve(snapshot, forbidden={RAY_CLUSTERS_PATH} if forbidden else set()) as api:
        objs = LiveReader(str(write_kubeconfig(tmp_path / "kubeconfig", api.server)), "fake").read()
    assert RAY_CLUSTERS_PATH in api.gets and api.writes == [] and objs.nodes
    assert objs.ray_clusters == (None if forbidden else ())
    [result] = [r for r in run_checks(_cfg(), objs) if r.id == "serving-pools-apart"]
    assert ("RayClusters not read" in result.fact) == forbidden, result.fact
