"""Each security rule fails on a bad variant of a real resource of the plans and passes on both stacks.

Rules run through the CrossGuard policies (resource and stack policies), as ``pulumi preview --policy-pack`` would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from tests.support.policy_runs import BY_NAME, STACK_BY_NAME, stack_violations, violations
from tpuray.components.planning.kuberay import ray_cluster_manifest
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.review import resource_types as kinds
from tpuray.components.review.plan import Plan, render_stack
from tpuray.components.review.rules import RULES, STACK_RULES
from tpuray.components.review.security_rules import PROJECT_IAM_TYPES

Pick = Callable[[str, str, str | None], dict[str, Any]]


def test_security_rules_are_in_the_pack() -> None:
    names = {r.name for r in RULES}
    assert {
        "gke-control-plane-not-public",
        "gke-legacy-auth-off",
        "gke-shielded-nodes",
        "ray-token-auth",
        "ray-pod-security-restricted",
        "ray-namespace-not-system",
        "k8s-namespace-pod-security",
        "k8s-network-policy-scoped",
        "gcs-bucket-recoverable",
        "images-pinned-by-digest-production",
    } <= names
    assert BY_NAME["images-pinned-by-digest-production"].enforcement_level == EnforcementLevel.ADVISORY
    assert BY_NAME["ray-token-auth"].enforcement_level == EnforcementLevel.MANDATORY
    assert sorted(STACK_BY_NAME) == sorted(r.name for r in STACK_RULES)
    assert sorted(STACK_BY_NAME) == [
        "iam-no-project-wide-grants",
        "k8s-ray-namespace-default-deny",
        "one-listener-per-port",
        "ray-pods-fit-their-node-pools",
        "ray-tpu-metrics-egress",
        "serving-upgrade-capacity",
        "tpu-static-slices-maintenance-production",
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_both_stacks_pass_the_stack_policies(plans: dict[str, Plan], stack: str) -> None:
    for name in STACK_BY_NAME:
        assert stack_violations(name, plans[stack].resources) == []
    assert plans[stack].warnings == []  # prod pins its images by digest, dev is not production


def test_control_plane_rule(resource_of: Pick) -> None:
    policy = BY_NAME["gke-control-plane-not-public"]
    prod = resource_of("prod", kinds.CLUSTER, None)
    assert violations(policy, prod) == []
    prod["inputs"]["masterAuthorizedNetworksConfig"]["cidrBlocks"] = [{"cidrBlock": "0.0.0.0/0"}]
    assert any("every address" in m for m in violations(policy, prod))
    del prod["inputs"]["masterAuthorizedNetworksConfig"]
    assert any("no authorized networks" in m for m in violations(policy, prod))
    prod["inputs"]["privateClusterConfig"]["enablePrivateEndpoint"] = True  # a private endpoint needs no list
    assert violations(policy, prod) == []
    dev = resource_of("dev", kinds.CLUSTER, None)
    del dev["inputs"]["masterAuthorizedNetworksConfig"]
    assert violations(policy, dev) == []  # only production needs the list


def test_legacy_auth_rule(resource_of: Pick) -> None:
    policy = BY_NAME["gke-legacy-auth-off"]
    cluster = resource_of("prod", kinds.CLUSTER, None)
    assert violations(policy, cluster) == []
    del cluster["inputs"]["enableLegacyAbac"]  # left to the default is not "explicitly off"
    cluster["inputs"]["masterAuth"]["clientCertificateConfig"]["issueClientCertificate"] = True
    found = violations(policy, cluster)
    assert any("enableLegacyAbac" in m for m in found) and any("issueClientCertificate" in m for m in found)


def test_shielded_nodes_rule(resource_of: Pick) -> None:
    policy = BY_NAME["gke-shielded-nodes"]
    for stack, name in (("prod", "v5p-train-0"), ("prod", "v6e-flex-0"), ("dev", "v5e-dev"), ("prod", "system")):
        pool = resource_of(stack, kinds.NODE_POOL, name)
        assert violations(policy, pool) == []
        pool["inputs"]["nodeConfig"]["shieldedInstanceConfig"]["enableSecureBoot"] = False
        assert any("enableSecureBoot" in m for m in violations(policy, pool))
    cluster = resource_of("prod", kinds.CLUSTER, None)
    assert violations(policy, cluster) == []
    cluster["inputs"]["enableShieldedNodes"] = False
    assert any("enableShieldedNodes" in m for m in violations(policy, cluster))


def test_project_wide_grants_rule(plans: dict[str, Plan]) -> None:
    """GKE's node role passes; any other role granted project-wide fails, through the stack policy."""
    rs = copy.deepcopy(plans["dev"].resources)  # dev streams no images
    grants = [r for r in rs if r["type"] in PROJECT_IAM_TYPES]
    assert [g["inputs"]["role"] for g in grants] == ["roles/container.defaultNodeServiceAccount"]
    assert stack_violations("iam-no-project-wide-grants", rs) == []
    for role in ("roles/artifactregistry.reader", "roles/editor", "roles/storage.admin"):
        grants[0]["inputs"]["role"] = role
        (message,) = stack_violations("iam-no-project-wide-grants", rs)
        assert role in message and "grant it on the resource it is for" in message


STREAMING_ROLE = "roles/serviceusage.serviceUsageConsumer"


def test_image_streamings_role_is_allowed_exactly_where_a_pool_streams(plans: dict[str, Plan]) -> None:
    """prod streams its worker image: the node service account holds Service Usage Consumer (GKE's image streaming
    page, "Requirements") and passes; the same grant without a streaming pool, or to another member, fails."""
    rs = copy.deepcopy(plans["prod"].resources)
    grants = {r["inputs"]["role"]: r for r in rs if r["type"] in PROJECT_IAM_TYPES}
    assert sorted(grants) == sorted(["roles/container.defaultNodeServiceAccount", STREAMING_ROLE])
    assert stack_violations("iam-no-project-wide-grants", rs) == []

    other = copy.deepcopy(rs)
    grant = next(r for r in other if r["type"] in PROJECT_IAM_TYPES and r["inputs"]["role"] == STREAMING_ROLE)
    grant["inputs"]["member"] = "serviceAccount:someone@tpuray-prod-project.iam.gserviceaccount.com"
    (message,) = stack_violations("iam-no-project-wide-grants", other)
    assert STREAMING_ROLE in message and "not to the node service account" in message

    pools = [r for r in rs if r["type"] == kinds.NODE_POOL and "gcfsConfig" in r["inputs"]["nodeConfig"]]
    assert pools  # the TPU pools stream
    for r in pools:
        r["inputs"]["nodeConfig"]["gcfsConfig"] = {"enabled": False}
    (message,) = stack_violations("iam-no-project-wide-grants", rs)
    assert STREAMING_ROLE in message and "no planned node pool streams images" in message


def test_a_wide_grant_is_refused_in_a_first_preview_where_the_node_accounts_email_is_unknown(
    plans: dict[str, Plan],
) -> None:
    """In a stack's first preview the node service account's email, every grant's member, is unknown, and
    CrossGuard skips a policy that reads an unknown value: the roles are judged without reading a member."""
    from pulumi_policy import PolicyResource, StackValidationArgs
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

    found: list[str] = []
    for stack in ("dev", "prod"):
        rs = copy.deepcopy(plans[stack].resources)
        grants = [r for r in rs if r["type"] in PROJECT_IAM_TYPES]
        for g in grants:
            g["inputs"]["member"] = UNKNOWN_STRING_VALUE
        grants[0]["inputs"]["role"] = "roles/editor"
        args = StackValidationArgs(
            [
                PolicyResource(
                    r["type"],
                    unknown_checking_proxy(r["inputs"]),
                    r["urn"],
                    r["name"],
                    None,  # type: ignore[arg-type]
                    None,
                    None,
                    [],
                    {},
                )
                for r in rs
            ]
        )

        def report(message: str, urn: str | None = None) -> None:
            found.append(message)

        STACK_BY_NAME["iam-no-project-wide-grants"].validate(args, report)
    assert len(found) == 2 and all("'roles/editor'" in m for m in found)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_token_auth_rule(resource_of: Pick, plans: dict[str, Plan], stack: str) -> None:
    policy = BY_NAME["ray-token-auth"]
    ray = resource_of(stack, kinds.RAY_CLUSTER, None)
    assert ray["inputs"]["spec"]["authOptions"]["mode"] == "token"  # KubeRay injects the variables then
    assert violations(policy, ray) == []
    del ray["inputs"]["spec"]["authOptions"]
    assert any("headGroupSpec" in m and "RAY_AUTH_MODE" in m for m in violations(policy, ray))
    # the token by env variables: what the planners render for a component's own RayAuth without authOptions
    params = plan_stack(plans[stack].config, stack).ray.params
    assert params.auth is not None
    by_env = copy.deepcopy(ray)
    by_env["inputs"] = ray_cluster_manifest(replace(params, auth=replace(params.auth, auth_options=False)))
    assert "authOptions" not in by_env["inputs"]["spec"] and violations(policy, by_env) == []
    worker = copy.deepcopy(by_env)
    container = worker["inputs"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    token = next(e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN")
    token.pop("valueFrom")
    token["value"] = "in-plain-sight"
    assert any("from a Secret" in m for m in violations(policy, worker))
    if stack == "prod":  # the v6e pool autoscales: the autoscaler sidecar needs the token as well
        scaler = copy.deepcopy(by_env)
        del scaler["inputs"]["spec"]["autoscalerOptions"]["env"]
        assert any("autoscalerOptions" in m for m in violations(policy, scaler))


def test_pod_security_rule(resource_of: Pick) -> None:
    policy = BY_NAME["ray-pod-security-restricted"]
    ray = resource_of("prod", kinds.RAY_CLUSTER, None)
    assert violations(policy, ray) == []
    worker = ray["inputs"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["containers"][0]["securityContext"]["privileged"] = True
    worker["containers"][0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    found = violations(policy, ray)
    assert any("privileged is true" in m for m in found) and any("SYS_ADMIN" in m for m in found)
    assert any("drop does not hold ALL" in m for m in found)
    ray = resource_of("prod", kinds.RAY_CLUSTER, None)
    del ray["inputs"]["spec"]["autoscalerOptions"]["securityContext"]  # prod's v6e pool autoscales
    assert any("autoscalerOptions" in m for m in violations(policy, ray))
    ray["inputs"]["spec"]["headGroupSpec"]["template"]["spec"]["hostNetwork"] = True
    assert any("hostNetwork" in m for m in violations(policy, ray))
    job = resource_of("prod", kinds.RAY_JOB, None)
    assert violations(policy, job) == []
    job["inputs"]["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    assert any("submitterPodTemplate" in m and "runAsNonRoot" in m for m in violations(policy, job))
    del job["inputs"]["spec"]["submitterPodTemplate"]
    assert any("default submitter" in m for m in violations(policy, job))


def test_system_namespace_rule(resource_of: Pick) -> None:
    policy = BY_NAME["ray-namespace-not-system"]
    ns, ray = resource_of("dev", kinds.NAMESPACE, None), resource_of("dev", kinds.RAY_CLUSTER, None)
    assert violations(policy, ns) == [] and violations(policy, ray) == []
    ns["inputs"]["metadata"]["name"] = "kube-system"
    ray["inputs"]["metadata"]["namespace"] = "default"
    assert violations(policy, ns) and violations(policy, ray)


def test_namespace_pod_security_rule(resource_of: Pick) -> None:
    policy = BY_NAME["k8s-namespace-pod-security"]
    ns = resource_of("prod", kinds.NAMESPACE, None)
    assert violations(policy, ns) == []
    ns["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    assert any("'privileged'" in m for m in violations(policy, ns))


def test_network_policy_rule(resource_of: Pick) -> None:
    policy = BY_NAME["k8s-network-policy-scoped"]
    for name in (
        "tpuray-prod-ray-peers",
        "tpuray-prod-ray-head-job-api",
        "tpuray-prod-ray-tpu-device-plugin",
        "ray-platform-egress",
        "default-deny-all",
    ):
        assert violations(policy, resource_of("prod", kinds.NETWORK_POLICY, f"ray-netpol-{name}")) == [], name
    head = resource_of("prod", kinds.NETWORK_POLICY, "ray-netpol-tpuray-prod-ray-head-job-api")
    head["inputs"]["spec"]["ingress"][0].pop("from")
    assert any("every source" in m for m in violations(policy, head))
    head["inputs"]["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    assert any("0.0.0.0/0" in m for m in violations(policy, head))
    egress = resource_of("prod", kinds.NETWORK_POLICY, "ray-netpol-ray-platform-egress")
    egress["inputs"]["spec"]["egress"][-1].pop("ports")
    assert any("every port" in m for m in violations(policy, egress))


def test_default_deny_stack_rule(plans: dict[str, Plan]) -> None:
    resources = [r for r in plans["prod"].resources if r["name"] != "ray-netpol-default-deny-all"]
    assert len(resources) == len(plans["prod"].resources) - 1
    found = stack_violations("k8s-ray-namespace-default-deny", resources)
    assert len(found) == 2 and all("default-deny" in m for m in found)  # the RayCluster and the RayJob


@pytest.mark.parametrize("stack", ["prod", "prod-dws"])
def test_tpu_metrics_egress_stack_rule(plans: dict[str, Plan], stack: str) -> None:
    """A plan with monitoring on whose Ray pods cannot reach the device plugin's port 2112 fails; the port moved
    elsewhere fails too; the plan as rendered, or without monitoring, passes."""
    rule = "ray-tpu-metrics-egress"
    resources = plans[stack].resources
    (plugin,) = [r["name"] for r in resources if r["name"].endswith("-ray-tpu-device-plugin")]
    assert any(r["name"] == plugin for r in resources)
    assert stack_violations(rule, resources) == []
    blocked = [r for r in resources if r["name"] != plugin]
    found = stack_violations(rule, blocked)
    assert found and all("2112" in m for m in found)  # the RayCluster and the RayJob
    moved = copy.deepcopy(resources)
    (pol,) = [r for r in moved if r["name"] == plugin]
    pol["inputs"]["spec"]["egress"][0]["ports"][0]["port"] = 2113
    assert stack_violations(rule, moved)
    # monitoring is tpuray's PodMonitoring of the Ray pods (the stacks run no Ray add-on), or the add-on's
    assert [
        c["enabled"]
        for r in resources
        if r["type"] == kinds.CLUSTER
        for c in r["inputs"]["addonsConfig"]["rayOperatorConfigs"]
    ] == [False]
    off = [r for r in blocked if r["type"] != kinds.POD_MONITORING]
    assert len(off) < len(blocked) and stack_violations(rule, off) == []
    addon = copy.deepcopy(off)
    for r in addon:
        if r["type"] == kinds.CLUSTER:
            r["inputs"]["addonsConfig"]["rayOperatorConfigs"] = [
                {"enabled": True, "rayClusterMonitoringConfig": {"enabled": True}}
            ]
    assert stack_violations(rule, addon)


def test_bucket_rule(resource_of: Pick) -> None:
    policy = BY_NAME["gcs-bucket-recoverable"]
    bucket = resource_of("prod", kinds.BUCKET, None)
    assert violations(policy, bucket) == []
    bucket["inputs"]["softDeletePolicy"]["retentionDurationSeconds"] = 0
    assert violations(policy, bucket)
    bucket["inputs"]["versioning"] = {"enabled": True}
    assert violations(policy, bucket) == []


def test_mutable_tags_warn_in_production_only(resource_of: Pick) -> None:
    policy = BY_NAME["images-pinned-by-digest-production"]
    ray = resource_of("prod", kinds.RAY_CLUSTER, None)
    assert violations(policy, ray) == []
    worker = ray["inputs"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    worker["image"] = "us-docker.pkg.dev/tpuray-prod-project/tpuray/worker:0.1.0"
    assert any("mutable tag" in m for m in violations(policy, ray))
    dev = resource_of("dev", kinds.RAY_CLUSTER, None)
    assert ":" in dev["inputs"]["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert violations(policy, dev) == []


PUBLIC_PROD = """
config:
  tpuray:project: tpuray-prod-project
  tpuray:region: us-east5
  tpuray:zone: us-east5-a
  tpuray:cluster: {{name: tpuray-prod, masterAuthorizedNetworks: {networks}}}
  tpuray:slicePools: [{{name: v6e, generation: v6e, topology: 4x4}}]
"""


def plan_prod(root: Path, stack_file: Path, out: Path) -> int:
    """``tpuray plan`` of the prod stack from ``stack_file``, as a user runs it."""
    from tpuray.components.cli import main

    return main(["plan", "--stack", "prod", "--root", str(root), "--stack-file", str(stack_file), "--out", str(out)])


@pytest.mark.parametrize("networks", ["[]", "[{cidr: 0.0.0.0/0}]"])
def test_plan_of_an_open_prod_control_plane_fails_with_a_named_violation(
    root: Path, tmp_path: Path, networks: str, capsys: pytest.CaptureFixture[str]
) -> None:

    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(PUBLIC_PROD.format(networks=networks))
    code = plan_prod(root, stack_file, tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 1
    assert "cluster.masterAuthorizedNetworks" in err
    assert ("[gke-control-plane-not-public]" in err) if networks == "[]" else ("every address" in err)


def test_plan_never_prints_a_secret(root: Path, tmp_path: Path) -> None:
    stack_file = tmp_path / "Pulumi.dev.yaml"
    text = (root / "Pulumi.dev.yaml").read_text() + "  tpuray:rayAuthToken: do-not-print-me-0123456789abcdefghij\n"
    stack_file.write_text(text)
    plan = render_stack("dev", root, stack_file=stack_file)
    from tpuray.components.review.render import manifest_files, plan_json

    out = plan_json(plan.run, plan.violations) + "".join(manifest_files(plan.resources).values())
    assert "do-not-print-me" not in out
    secret = next(r for r in plan.resources if r["type"] == "kubernetes:core/v1:Secret")
    assert secret["inputs"]["stringData"] == "[secret]"
    assert not any(r["type"].startswith("random:") for r in plan.resources)  # the given token is used


def test_plan_warns_about_a_mutable_prod_tag_without_failing(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    text = (root / "Pulumi.prod.yaml").read_text()
    tagged = [line for line in text.splitlines() if "workerImage:" in line]
    assert len(tagged) == 1
    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(text.replace(tagged[0], "    workerImage: us-docker.pkg.dev/p/r/worker:0.1.0"))
    code = plan_prod(root, stack_file, tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 0
    assert "warning: [images-pinned-by-digest-production]" in err and "worker:0.1.0" in err
    assert '"warnings"' in (tmp_path / "out" / "plan.json").read_text()
