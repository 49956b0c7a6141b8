"""The hardening the pure planners write: ports, securityContext, token auth, NetworkPolicy and the pods' service
accounts (what the Pulumi components declare is tests/components/test_security.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.kuberay_schema import schema_errors
from tests.support.stacks import v6e_config
from tpuray.components.catalog.names import (
    HEAD_PORTS,
    RAY_CLUSTER_POD_LABEL,
    RAY_DASHBOARD_PORT,
    RAY_METRICS_PORT,
    RAY_NODE_PORTS,
    RAY_SERVICE_ACCOUNT,
    RAY_WORKER_PORT_RANGE,
    RAY_WORKER_SERVICE_ACCOUNT,
    SUBMITTER_ROLE_LABEL,
    TPU_PROCESS_BASE_PORT,
    WORKER_PORTS,
)
from tpuray.components.catalog.runtimes import RuntimeBackend, union_ports
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import load_stack_file
from tpuray.components.planning.kuberay import ray_cluster_manifest, ray_start_ports
from tpuray.components.planning.network_policy import (
    DEFAULT_DENY,
    NetworkPolicyParams,
    allowed_ingress_ports,
    network_policies,
)
from tpuray.components.planning.pod_security import restricted_problems
from tpuray.components.planning.stack_plan import plan_stack

ROOT = er.ROOT


def _pods(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = manifest["spec"].get("rayClusterSpec", manifest["spec"])
    if manifest["kind"] == "RayJob" and "rayClusterSpec" not in manifest["spec"]:
        return [("submitter", manifest["spec"]["submitterPodTemplate"]["spec"])]
    pods = [("head", spec["headGroupSpec"]["template"]["spec"])]
    pods += [(g["groupName"], g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    return pods


@pytest.mark.parametrize("env", ["dev", "prod"])
@pytest.mark.parametrize("auth_options", [True, False])
def test_every_container_meets_restricted_and_the_crds(env: str, auth_options: bool) -> None:
    # auth_options False: the token in env variables, which the planners still render for a component's own RayAuth
    # (the config refuses it for a stack: its RayJob's status calls would get 401)
    cfg = load_stack_file(ROOT / f"Pulumi.{env}.yaml")
    cfg = cfg.model_copy(update={"ray": cfg.ray.model_copy(update={"auth_options": auth_options})})
    for manifest in plan_stack(cfg, "test").manifests:
        assert schema_errors(manifest) == []
        for where, pod in _pods(manifest):
            # pod-level too (checkov CKV_K8S_29), for the containers KubeRay and GKE's webhooks add
            assert pod["securityContext"]["runAsNonRoot"] is True, where
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for c in pod["containers"]:
                assert restricted_problems(f"{where}/{c['name']}", c, pod) == []
                assert c["securityContext"]["runAsUser"] == 1000  # a numeric user the kubelet can check
        if manifest["kind"] == "RayCluster" and manifest["spec"]["enableInTreeAutoscaling"]:
            assert restricted_problems("autoscaler", manifest["spec"]["autoscalerOptions"]) == []


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_token_auth_by_auth_options_and_by_env_only_where_a_component_asks() -> None:
    cluster, job = plan_stack(v6e_config(), "test").manifests
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": "tpu-ray-auth"}
    for _, pod in _pods(cluster):  # KubeRay injects the variables
        assert "RAY_AUTH_MODE" not in _env(pod["containers"][0])
    # the submitter always carries them (KubeRay keeps variables that are already set)
    assert "RAY_AUTH_TOKEN" in _env(_pods(job)[0][1]["containers"][0])

    # the env path: what the planners render for a RayAuth without authOptions (no stack: see test_config_cloud_limits)
    params = plan_stack(v6e_config(), "test").ray.params
    assert params.auth is not None
    env_cluster = ray_cluster_manifest(replace(params, auth=replace(params.auth, auth_options=False)))
    assert "authOptions" not in env_cluster["spec"]
    for _, pod in _pods(env_cluster):
        env = _env(pod["containers"][0])
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "tpu-ray-auth", "key": "auth_token"}


def test_every_ray_port_is_pinned_and_allowed_between_the_pods_of_a_cluster() -> None:
    cluster, _job = plan_stack(v6e_config(), "test").manifests
    head = cluster["spec"]["headGroupSpec"]
    worker = cluster["spec"]["workerGroupSpecs"][0]
    for params in (head["rayStartParams"], worker["rayStartParams"]):
        assert ray_start_ports().items() <= params.items()
    policies = network_policies(
        NetworkPolicyParams(
            namespace="ray",
            cluster="tpu",
            runtime_ranges=((8081, 8081), (8471, 8471), (8476, 8479)),
            operator_namespace=None,
        )
    )
    peers = {RAY_CLUSTER_POD_LABEL: "tpu"}
    opened = allowed_ingress_ports(policies, peers)
    # every single port a Ray pod opens: what rayStartParams pins and what the containers declare
    pinned = {int(v) for k, v in worker["rayStartParams"].items() if k.endswith("-port") and "worker" not in k}
    declared = {p["containerPort"] for pod in (head, worker) for p in pod["template"]["spec"]["containers"][0]["ports"]}
    assert pinned | declared <= opened
    assert pinned == {port for _, port in RAY_NODE_PORTS}
    assert declared == {port for _, port in HEAD_PORTS} | {port for _, port in WORKER_PORTS}
    peer_rule = next(p for p in policies if p["metadata"]["name"] == "tpu-ray-peers")["spec"]["ingress"][0]
    # no port ranges (an engine that ignores endPort opens the first port only): every worker port and every
    # per-chip process port listed on its own
    rules = [r for p in policies for d in ("ingress", "egress") for r in p["spec"].get(d, [])]
    assert not [port for r in rules for port in r.get("ports", []) if "endPort" in port]
    lo, hi = RAY_WORKER_PORT_RANGE
    assert set(range(lo, hi + 1)) | set(range(TPU_PROCESS_BASE_PORT, TPU_PROCESS_BASE_PORT + 4)) <= opened
    assert [p["port"] for p in peer_rule["ports"]] == sorted({p["port"] for p in peer_rule["ports"]})
    assert peer_rule["from"] == [{"podSelector": {"matchLabels": peers}}]


def test_the_peers_rule_stays_small_enough_to_list_every_port() -> None:
    """Listing each port is only workable for a few hundred: the largest runtime set (TorchTPU on tpu7x, 8 devices
    a host, two multislice ports each) and PyTorch/XLA's on an 8-chip host stay under 300 per direction."""
    cases: tuple[tuple[str, RuntimeBackend], ...] = (
        ("tpu7x:2x2x2", "torch_tpu"),
        ("v5litepod:2x4", "xla"),
        ("v6e:16x16", "xla"),
    )
    for name, backend in cases:
        ranges = tuple(union_ports([TpuSlice.parse(name)], backend))
        (peers,) = [
            p
            for p in network_policies(NetworkPolicyParams(namespace="ray", cluster="tpu", runtime_ranges=ranges))
            if p["metadata"]["name"] == "tpu-ray-peers"
        ]
        for rule in (peers["spec"]["ingress"][0], peers["spec"]["egress"][0]):
            assert len(rule["ports"]) < 300
            assert {p["port"] for p in rule["ports"]} >= {port for r in ranges for port in range(r[0], r[1] + 1)}


def test_only_the_submitter_and_the_operator_reach_the_head_besides_its_peers() -> None:
    params = NetworkPolicyParams(
        namespace="ray",
        cluster="tpu",
        runtime_ranges=((8081, 8081), (8471, 8471), (8476, 8483)),
        operator_namespace="kuberay-system",
    )
    policies = network_policies(params)
    assert policies[0]["metadata"]["name"] == DEFAULT_DENY
    assert policies[0]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    head_rules = [
        rule
        for p in policies
        if p["spec"]["podSelector"].get("matchLabels", {}).get("ray.io/node-type") == "head"
        for rule in p["spec"].get("ingress", [])
    ]
    assert len(head_rules) == 1 and head_rules[0]["ports"] == [{"protocol": "TCP", "port": RAY_DASHBOARD_PORT}]
    sources = head_rules[0]["from"]
    assert {"podSelector": {"matchLabels": SUBMITTER_ROLE_LABEL}} in sources
    assert any(s.get("namespaceSelector") for s in sources)  # the Helm operator's namespace, for RayJob status
    no_operator = network_policies(
        NetworkPolicyParams(namespace="ray", cluster="tpu", runtime_ranges=((8081, 8081), (8471, 8471), (8476, 8483)))
    )
    job_api = next(p for p in no_operator if p["metadata"]["name"] == "tpu-ray-head-job-api")
    assert job_api["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": SUBMITTER_ROLE_LABEL}}]
    # the metrics port, to Managed Prometheus' collectors
    metrics = next(p for p in policies if p["metadata"]["name"] == "tpu-ray-metrics")["spec"]["ingress"]
    assert metrics[0]["ports"] == [{"protocol": "TCP", "port": RAY_METRICS_PORT}] and RAY_METRICS_PORT != 8080
    assert metrics[0]["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "gmp-system"}}
    # what leaves the namespace: DNS, the metadata server, HTTPS; nothing else
    egress = next(p for p in policies if p["metadata"]["name"] == "ray-platform-egress")["spec"]["egress"]
    assert sorted({port["port"] for rule in egress for port in rule["ports"]}) == [53, 80, 443, 988]


def test_ray_pods_reach_the_tpu_device_plugin_on_the_nodes_only() -> None:
    """Ray's reporter agent reads each host's chip metrics at ``<node IP>:2112``: one egress rule, from this
    cluster's pods, to the nodes' range on that port; none without a node range or without TPU workers."""
    params = NetworkPolicyParams(
        namespace="ray",
        cluster="tpu",
        runtime_ranges=((8081, 8081), (8471, 8471), (8476, 8479)),
        node_cidr="10.0.0.0/20",
    )
    (plugin,) = [p for p in network_policies(params) if p["metadata"]["name"] == "tpu-ray-tpu-device-plugin"]
    assert plugin["spec"]["podSelector"] == {"matchLabels": {RAY_CLUSTER_POD_LABEL: "tpu"}}
    assert plugin["spec"]["policyTypes"] == ["Egress"]
    assert plugin["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/20"}}], "ports": [{"protocol": "TCP", "port": 2112}]}
    ]
    for other in (
        NetworkPolicyParams(namespace="ray", cluster="tpu", runtime_ranges=((8081, 8081), (8471, 8471), (8476, 8479))),
        NetworkPolicyParams(namespace="ray", cluster="tpu", runtime_ranges=(), node_cidr="10.0.0.0/20"),
    ):
        assert not [p for p in network_policies(other) if "device-plugin" in p["metadata"]["name"]]


# ---- least privilege: the TPU workers run user code ---------------------------------------------------------------
@pytest.mark.parametrize("env", ["dev", "prod", "prod-dws"])
def test_workers_and_submitter_get_no_api_token_and_not_the_heads_account(env: str) -> None:
    for manifest in plan_stack(load_stack_file(ROOT / f"Pulumi.{env}.yaml"), "test").manifests:
        for where, pod in _pods(manifest):
            if where == "head":  # KubeRay binds this account to the autoscaler Role; the autoscaler needs it
                assert pod["serviceAccountName"] == RAY_SERVICE_ACCOUNT
            elif where == "submitter":
                assert pod["automountServiceAccountToken"] is False
            else:
                assert pod["serviceAccountName"] == RAY_WORKER_SERVICE_ACCOUNT != RAY_SERVICE_ACCOUNT
                assert pod["automountServiceAccountToken"] is False
        if "submitterPodTemplate" in manifest["spec"]:
            assert manifest["spec"]["submitterPodTemplate"]["spec"]["automountServiceAccountToken"] is False
