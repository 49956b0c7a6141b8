"""The doctor on a stack that serves: the KubeRay gate an incremental upgrade needs, read from the operator as it
runs, and serving pods on node pools no training pod runs on."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.config.test_serving_config import stack
from tests.doctor.test_torch_tpu_checks import OPERATOR
from tpuray.components.catalog.names import GKE_NODEPOOL_LABEL, RAY_CLUSTER_LABEL, TPU_RESOURCE
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.doctor.checks import run_checks
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.serving_checks import check_serving_pools_apart, check_serving_upgrade_gate

INCREMENTAL = {"strategy": "NewClusterWithIncrementalUpgrade", "stepSlices": 1, "gatewayClassName": "gke-l7-rilb"}


def _cfg(upgrade: dict[str, Any] | None = None) -> StackConfig:
    serving: dict[str, Any] = {
        "replicas": 2,
        "minSlices": 1,
        "maxSlices": 3,
        **({"upgrade": upgrade} if upgrade else {}),
    }
    return parse_stack_config(stack(serving), stack="dev")


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
    deployments: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, nodes: dict[str, str] | None = None
) -> ClusterObjects:
    node_objs = tuple({"metadata": {"name": n, "labels": {GKE_NODEPOOL_LABEL: p}}} for n, p in (nodes or {}).items())
    return ClusterObjects(node_objs, tuple(pods or ()), tuple(deployments), (), (), "v1.34.1-gke.1829001", "test")


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


def test_no_operator_is_unknown_and_other_upgrades_need_no_gate() -> None:
    result = check_serving_upgrade_gate(_cfg(INCREMENTAL), _objects([]))
    assert result is not None and result.status == "warn" and "no kuberay-operator" in result.fact
    assert check_serving_upgrade_gate(_cfg(), _objects([])) is None  # NewCluster: no gate
    plain = parse_stack_config({k: v for k, v in stack({}).items() if k != "serving"}, stack="dev")
    assert check_serving_upgrade_gate(plain, _objects([])) is None


def test_serving_and_training_pods_on_one_node_pool_fail_naming_the_pool_and_pods() -> None:
    cfg = _cfg()
    assert cfg.serving is not None
    ns, service = cfg.ray.namespace, cfg.serving.service_name(cfg.cluster.name)
    nodes = {"n-serve": "serve-pool", "n-train": "train-pool"}
    apart = [
        _pod("s0", f"{service}-x7k2p", "n-serve", ns),
        _pod("t0", f"{cfg.cluster.name}", "n-train", ns),
    ]
    result = check_serving_pools_apart(cfg, _objects([], apart, nodes))
    assert result is not None and result.status == "pass" and "serve-pool" in result.fact
    shared = [*apart, _pod("t1", f"{cfg.cluster.name}", "n-serve", ns)]
    result = check_serving_pools_apart(cfg, _objects([], shared, nodes))
    assert result is not None and result.status == "fail"
    assert "node pool serve-pool" in result.fact and f"{ns}/t1 (training)" in result.fact and "s0" in result.fact
    elsewhere = [*apart, _pod("t2", f"{cfg.cluster.name}", "n-serve", "other-namespace")]
    result = check_serving_pools_apart(cfg, _objects([], elsewhere, nodes))
    assert result is not None and result.status == "pass"  # another namespace's pods are not the stack's


def test_run_checks_includes_the_serving_checks_only_where_the_stack_serves() -> None:
    objs = _objects([_operator("quay.io/kuberay/operator:v1.7.0", None)])
    ids = {r.id for r in run_checks(_cfg(INCREMENTAL), objs)}
    assert {"serving-upgrade-gate", "serving-pools-apart"} <= ids
    plain = parse_stack_config({k: v for k, v in stack({}).items() if k != "serving"}, stack="dev")
    assert not {r.id for r in run_checks(plain, objs)} & {"serving-upgrade-gate", "serving-pools-apart"}
