"""tpuray's security rules: the GKE hardening guide and CIS GKE Benchmark items the stacks implement, as policy
rules over one resource's inputs (plus one rule over the whole stack).

Same shape as :mod:`tpuray.components.review.policy_rules` (``(resource, context) -> violation messages``, Pulumi
wire values, no Pulumi import, types from :mod:`.rule_types`); :mod:`.rules` adds these to ``RULES``. Sources:

- GKE hardening guide: https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster
- CIS GKE Benchmark item numbers as in v1.x (e.g. 5.5.7 Secure Boot), node service account as in v2.0.0 5.2.1.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from tpuray.components.catalog.images import parse_image
from tpuray.components.catalog.metric_names import TPU_DEVICE_PLUGIN_METRICS_PORT
from tpuray.components.catalog.names import (
    IMAGE_STREAMING_NODE_ROLE,
    NODE_SERVICE_ACCOUNT_ROLE,
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_TOKEN_ENV,
    RAY_CLUSTER_POD_LABEL,
)
from tpuray.components.catalog.wire import as_list, get_path
from tpuray.components.config import SYSTEM_NAMESPACE_PREFIXES, SYSTEM_NAMESPACES
from tpuray.components.planning.pod_security import PSA_LEVEL, restricted_problems
from tpuray.components.review.resource_types import (
    BUCKET,
    CLUSTER,
    NAMESPACE,
    NETWORK_POLICY,
    NODE_POOL,
    POD_MONITORING,
    RAY_CLUSTER,
    RAY_JOB,
)
from tpuray.components.review.rule_types import Resource, Rule, RuleContext, StackRule

__all__ = [
    "BUCKET",
    "NAMESPACE",
    "NETWORK_POLICY",
    "PROJECT_IAM_TYPES",
    "RAY_JOB",
    "SECURITY_RULES",
    "SECURITY_STACK_RULES",
]

PROJECT_IAM_TYPES = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding")
MIN_SOFT_DELETE_SECONDS = 7 * 86400


# ---- control plane ------------------------------------------------------------------------------------------
def check_control_plane(res: Resource, ctx: RuleContext) -> list[str]:
    """No authorized network opens the control plane to every address; a production control plane is private,
    DNS-only, or public to a non-empty list of networks (hardening guide; CIS GKE 5.6.3, 5.6.4)."""
    cidrs = [
        str(get_path(b, "cidrBlock"))
        for b in as_list(get_path(res.props, "masterAuthorizedNetworksConfig", "cidrBlocks"))
        if get_path(b, "cidrBlock")
    ]
    found = []
    for cidr in cidrs:
        try:
            everyone = ipaddress.ip_network(cidr, strict=False).prefixlen == 0
        except ValueError:
            everyone = False
        if everyone:
            found.append(f"masterAuthorizedNetworks holds {cidr}: the control plane is open to every address")
    private = get_path(res.props, "privateClusterConfig", "enablePrivateEndpoint") is True
    dns_only = get_path(res.props, "controlPlaneEndpointsConfig", "ipEndpointsConfig", "enabled") is False
    if ctx.production and not (private or dns_only or cidrs):
        found.append(
            f"production stack {ctx.stack!r}: the control plane's public endpoint has no authorized networks; "
            "list them, or use a private or DNS-only endpoint"
        )
    return found


def check_legacy_auth_off(res: Resource, ctx: RuleContext) -> list[str]:
    """Legacy ABAC and client certificates are explicitly off (CIS GKE 5.8.4, 5.8.1)."""
    found = []
    if res.props.get("enableLegacyAbac") is not False:
        found.append("enableLegacyAbac is not set to false")
    if get_path(res.props, "masterAuth", "clientCertificateConfig", "issueClientCertificate") is not False:
        found.append("masterAuth.clientCertificateConfig.issueClientCertificate is not set to false")
    return found


# ---- nodes ----------------------------------------------------------------------------------------------------
def check_shielded_nodes(res: Resource, ctx: RuleContext) -> list[str]:
    """Shielded nodes with secure boot and integrity monitoring on every pool (CIS GKE 5.5.5, 5.5.6, 5.5.7)."""
    found = []
    if res.type == CLUSTER and res.props.get("enableShieldedNodes") is False:
        found.append("enableShieldedNodes is false")
    node_config = res.props.get("nodeConfig")
    if res.type == CLUSTER and node_config is None:
        return found  # no nodes of its own (the default pool is removed); the node pools are checked
    shielded = get_path(node_config, "shieldedInstanceConfig") or {}
    if shielded.get("enableSecureBoot") is not True:
        found.append("nodeConfig.shieldedInstanceConfig.enableSecureBoot is not true")
    if shielded.get("enableIntegrityMonitoring") is False:
        found.append("nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring is false")
    return found


def _streams(resources: Sequence[Resource]) -> bool:
    """A planned node pool streams its images (``nodeConfig.gcfsConfig.enabled``)."""
    return any(
        r.type == NODE_POOL and get_path(r.props, "nodeConfig", "gcfsConfig", "enabled") is True for r in resources
    )


def check_project_roles(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    """Project-wide grants are limited to GKE's node role, and, where a node pool streams images, image streaming's
    role to the same member (the node service account); everything else is granted on the resource (the image
    repository, the bucket) it is for (CIS GKE v2.0.0 5.2.1; hardening guide, least-privilege service account;
    GKE's image streaming page, "Requirements")."""
    grants = [r for r in resources if r.type in PROJECT_IAM_TYPES]
    streaming = [r for r in grants if r.props.get("role") == IMAGE_STREAMING_NODE_ROLE]
    found = [
        (
            r.urn or r.name,
            f"project-wide role {r.props.get('role')!r}: grant it on the resource it is for (only "
            f"{NODE_SERVICE_ACCOUNT_ROLE}, and {IMAGE_STREAMING_NODE_ROLE} to the node service account where a node "
            "pool streams images, are granted project-wide)",
        )
        for r in grants
        if r.props.get("role") not in (NODE_SERVICE_ACCOUNT_ROLE, IMAGE_STREAMING_NODE_ROLE)
    ]
    if streaming and not _streams(resources):
        why = "no planned node pool streams images (nodeConfig.gcfsConfig), so nothing needs it"
        found += [(r.urn or r.name, f"project-wide role {IMAGE_STREAMING_NODE_ROLE!r}: {why}") for r in streaming]
    elif streaming and not found:
        # The members are the node service account's email, unknown in the first preview of a stack; CrossGuard
        # skips a policy that reads an unknown value, so they are read last, once nothing else is wrong.
        nodes = [r.props.get("member") for r in grants if r.props.get("role") == NODE_SERVICE_ACCOUNT_ROLE]
        for r in streaming:
            member = r.props.get("member")
            if member not in nodes:
                found.append(
                    (
                        r.urn or r.name,
                        f"project-wide role {IMAGE_STREAMING_NODE_ROLE!r}: granted to {member!r}, not to the node "
                        f"service account ({NODE_SERVICE_ACCOUNT_ROLE}'s member)",
                    )
                )
    return found


# ---- Ray pods ---------------------------------------------------------------------------------------------------
def _cluster_specs(res: Resource) -> list[tuple[str, Mapping[str, Any]]]:
    spec = res.props.get("spec") or {}
    if res.type == RAY_CLUSTER:
        return [("spec", spec)]
    inner = spec.get("rayClusterSpec")
    return [("spec.rayClusterSpec", inner)] if isinstance(inner, Mapping) else []


def _ray_pods(spec: Mapping[str, Any], at: str) -> list[tuple[str, Mapping[str, Any]]]:
    pods = [(f"{at}.headGroupSpec", get_path(spec, "headGroupSpec", "template", "spec") or {})]
    for i, g in enumerate(as_list(spec.get("workerGroupSpecs"))):
        pods.append((f"{at}.workerGroupSpecs[{g.get('groupName', i)}]", get_path(g, "template", "spec") or {}))
    return pods


def check_token_auth(res: Resource, ctx: RuleContext) -> list[str]:
    """Every Ray cluster requires the token: KubeRay's authOptions, or RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from a
    Secret in every Ray container (https://docs.ray.io/en/latest/ray-security/token-auth.html)."""
    found = []
    for at, spec in _cluster_specs(res):
        if get_path(spec, "authOptions", "mode") == "token":
            continue
        checked = [(where, (as_list(pod.get("containers")) or [{}])[0]) for where, pod in _ray_pods(spec, at)]
        if spec.get("enableInTreeAutoscaling"):  # the autoscaler sidecar talks to the GCS too
            checked.append((f"{at}.autoscalerOptions", spec.get("autoscalerOptions") or {}))
        for where, container in checked:
            env = {e.get("name"): e for e in as_list(container.get("env"))}
            if get_path(env.get(RAY_AUTH_MODE_ENV), "value") != "token":
                found.append(f"{where}: no authOptions and the Ray container lacks {RAY_AUTH_MODE_ENV}=token")
            if not get_path(env.get(RAY_AUTH_TOKEN_ENV), "valueFrom", "secretKeyRef", "name"):
                found.append(f"{where}: the Ray container does not read {RAY_AUTH_TOKEN_ENV} from a Secret")
    return found


def _pod_problems(where: str, pod: Mapping[str, Any]) -> list[str]:
    found = [f"{where}: {key} is true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key) is True]
    for kind in ("initContainers", "containers"):
        for c in as_list(pod.get(kind)):
            found += restricted_problems(f"{where}.{kind}[{c.get('name')}]", c, pod)
    return found


def check_pod_security(res: Resource, ctx: RuleContext) -> list[str]:
    """Every Ray container, the autoscaler sidecar and the job submitter meet the restricted Pod Security
    Standard (CIS GKE 4.2, 4.6.2; https://kubernetes.io/docs/concepts/security/pod-security-standards/)."""
    found = []
    for at, spec in _cluster_specs(res):
        for where, pod in _ray_pods(spec, at):
            found += _pod_problems(where, pod)
        if spec.get("enableInTreeAutoscaling"):
            found += restricted_problems(f"{at}.autoscalerOptions", spec.get("autoscalerOptions") or {})
    submitter = get_path(res.props, "spec", "submitterPodTemplate", "spec")
    if res.type == RAY_JOB and get_path(res.props, "spec", "submissionMode") in (None, "K8sJobMode"):
        if not isinstance(submitter, Mapping):
            found.append(
                "spec.submitterPodTemplate: unset, so KubeRay's default submitter runs without a securityContext"
            )
        else:
            found += _pod_problems("spec.submitterPodTemplate", submitter)
    return found


def _system_namespace(name: Any) -> bool:
    return isinstance(name, str) and (name in SYSTEM_NAMESPACES or name.startswith(SYSTEM_NAMESPACE_PREFIXES))


def check_not_system_namespace(res: Resource, ctx: RuleContext) -> list[str]:
    """Ray runs in a namespace of its own, never one Kubernetes, GKE or the KubeRay operator owns."""
    key = "name" if res.type == NAMESPACE else "namespace"
    ns = get_path(res.props, "metadata", key)
    if res.type == NAMESPACE and ns is not None and not _system_namespace(ns):
        return []
    if _system_namespace(ns):
        return [f"metadata.{key} {ns!r} is a system namespace"]
    return []


def check_namespace_pod_security(res: Resource, ctx: RuleContext) -> list[str]:
    """The namespace enforces the restricted Pod Security Standard through Pod Security Admission (CIS GKE 4.2)."""
    labels = get_path(res.props, "metadata", "labels") or {}
    level = labels.get("pod-security.kubernetes.io/enforce")
    if level != PSA_LEVEL:
        return [f"label pod-security.kubernetes.io/enforce is {level!r}, not {PSA_LEVEL!r}"]
    return []


def check_network_policy_scoped(res: Resource, ctx: RuleContext) -> list[str]:
    """No NetworkPolicy rule lets in everyone (an ingress rule without sources, or from 0.0.0.0/0), nor lets out
    to every address on every port (CIS GKE 5.6.7; the Ray head is reachable only as the policies allow)."""
    found = []
    spec = res.props.get("spec") or {}
    for i, rule in enumerate(as_list(spec.get("ingress"))):
        sources = as_list(get_path(rule, "from"))
        if not sources:
            found.append(f"spec.ingress[{i}] has no 'from': it admits every source")
        for s in sources:
            cidr = get_path(s, "ipBlock", "cidr")
            if isinstance(cidr, str) and cidr.endswith("/0"):
                found.append(f"spec.ingress[{i}] admits {cidr}")
    for i, rule in enumerate(as_list(spec.get("egress"))):
        wide = not as_list(get_path(rule, "to")) or any(
            str(get_path(t, "ipBlock", "cidr") or "").endswith("/0") for t in as_list(get_path(rule, "to"))
        )
        if wide and not as_list(get_path(rule, "ports")):
            found.append(f"spec.egress[{i}] lets out to every address on every port")
    return found


# ---- data ---------------------------------------------------------------------------------------------------------
def check_bucket_recoverable(res: Resource, ctx: RuleContext) -> list[str]:
    """Deleted or overwritten objects stay restorable: soft delete for at least 7 days, or versioning
    (https://cloud.google.com/storage/docs/soft-delete)."""
    seconds = get_path(res.props, "softDeletePolicy", "retentionDurationSeconds")
    soft = isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= MIN_SOFT_DELETE_SECONDS
    if soft or get_path(res.props, "versioning", "enabled") is True:
        return []
    return [f"neither soft delete for at least {MIN_SOFT_DELETE_SECONDS // 86400} days nor versioning is on"]


def _images(res: Resource) -> list[tuple[str, str]]:
    out = []
    for at, spec in _cluster_specs(res):
        for where, pod in _ray_pods(spec, at):
            out += [(where, str(c.get("image"))) for c in as_list(pod.get("containers")) if c.get("image")]
        image = get_path(spec, "autoscalerOptions", "image")
        if image:
            out.append((f"{at}.autoscalerOptions", str(image)))
    for c in as_list(get_path(res.props, "spec", "submitterPodTemplate", "spec", "containers")):
        if c.get("image"):
            out.append(("spec.submitterPodTemplate", str(c["image"])))
    return out


def check_images_pinned(res: Resource, ctx: RuleContext) -> list[str]:
    """In production, images are pinned by digest: a tag can be moved to other content (advisory)."""
    if not ctx.production:
        return []
    found = []
    for where, image in _images(res):
        try:
            pinned = parse_image(image).pinned
        except ValueError:
            pinned = False
        if not pinned:
            found.append(f"{where}: image {image!r} is a mutable tag; pin it by digest (@sha256:...)")
    return found


SECURITY_RULES: tuple[Rule, ...] = (
    Rule(
        "gke-control-plane-not-public",
        "No authorized network is 0.0.0.0/0; production control planes are private, DNS-only, or limited to "
        "listed networks.",
        (CLUSTER,),
        check_control_plane,
    ),
    Rule(
        "gke-legacy-auth-off",
        "Legacy ABAC and client certificates are explicitly off.",
        (CLUSTER,),
        check_legacy_auth_off,
    ),
    Rule(
        "gke-shielded-nodes",
        "Every node pool runs shielded nodes with secure boot and integrity monitoring.",
        (CLUSTER, NODE_POOL),
        check_shielded_nodes,
    ),
    Rule(
        "ray-token-auth",
        "Every Ray cluster requires Ray's auth token.",
        (RAY_CLUSTER, RAY_JOB),
        check_token_auth,
    ),
    Rule(
        "ray-pod-security-restricted",
        "Every Ray container, the autoscaler and the job submitter meet the restricted Pod Security Standard.",
        (RAY_CLUSTER, RAY_JOB),
        check_pod_security,
    ),
    Rule(
        "ray-namespace-not-system",
        "Ray never runs in a system namespace.",
        (NAMESPACE, RAY_CLUSTER, RAY_JOB),
        check_not_system_namespace,
    ),
    Rule(
        "k8s-namespace-pod-security",
        "Namespaces enforce the restricted Pod Security Standard.",
        (NAMESPACE,),
        check_namespace_pod_security,
    ),
    Rule(
        "k8s-network-policy-scoped",
        "No NetworkPolicy admits every source or lets out everywhere on every port.",
        (NETWORK_POLICY,),
        check_network_policy_scoped,
    ),
    Rule(
        "gcs-bucket-recoverable",
        "Buckets keep deleted objects restorable (soft delete >= 7 days, or versioning).",
        (BUCKET,),
        check_bucket_recoverable,
    ),
    Rule(
        "images-pinned-by-digest-production",
        "Production images are pinned by digest (advisory).",
        (RAY_CLUSTER, RAY_JOB),
        check_images_pinned,
        True,
    ),
)


# ---- the whole stack ------------------------------------------------------------------------------------------
def _deny_all(policy: Mapping[str, Any]) -> bool:
    spec = policy.get("spec") or {}
    return (
        not (get_path(spec, "podSelector", "matchLabels") or get_path(spec, "podSelector", "matchExpressions"))
        and {"Ingress", "Egress"} <= set(as_list(spec.get("policyTypes")))
        and not as_list(spec.get("ingress"))
        and not as_list(spec.get("egress"))
    )


def check_default_deny(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    """Every namespace that runs a Ray cluster has a deny-all NetworkPolicy (CIS GKE 4.3.2: every namespace has
    network policies; default deny, then allow what is needed)."""
    denied = {
        get_path(r.props, "metadata", "namespace") for r in resources if r.type == NETWORK_POLICY and _deny_all(r.props)
    }
    found = []
    for r in resources:
        ns = get_path(r.props, "metadata", "namespace")
        if r.type in (RAY_CLUSTER, RAY_JOB) and ns not in denied:
            found.append((r.urn or r.name, f"namespace {ns!r} has no default-deny NetworkPolicy (ingress and egress)"))
    return found


def _monitoring_on(resources: Sequence[Resource]) -> bool:
    """Something scrapes the Ray pods' metrics port, where Ray's reporter agent exports the chips' metrics: a
    Managed Prometheus PodMonitoring of a Ray cluster's pods (tpuray's own), or the Ray add-on's cluster monitoring
    on some GKE cluster of the stack."""
    for r in resources:
        if r.type == POD_MONITORING and RAY_CLUSTER_POD_LABEL in (
            get_path(r.props, "spec", "selector", "matchLabels") or {}
        ):
            return True
        if r.type != CLUSTER:
            continue
        for cfg in as_list(get_path(r.props, "addonsConfig", "rayOperatorConfigs")):
            if get_path(cfg, "rayClusterMonitoringConfig", "enabled") is True:
                return True
    return False


def _lets_out_to_device_plugin(policy: Mapping[str, Any]) -> bool:
    """An egress rule to an address range (the plugin serves on the node's own address) on TCP 2112."""
    for rule in as_list(get_path(policy, "spec", "egress")):
        to_nodes = any(get_path(t, "ipBlock", "cidr") for t in as_list(rule.get("to")))
        ports = as_list(rule.get("ports"))
        on_port = any(
            pt.get("protocol", "TCP") == "TCP"
            and isinstance(pt.get("port"), int)
            and pt["port"] <= TPU_DEVICE_PLUGIN_METRICS_PORT <= int(pt.get("endPort", pt["port"]))
            for pt in ports
        )
        if to_nodes and on_port:
            return True
    return False


def check_tpu_metrics_egress(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    """With monitoring on, Ray pods in a namespace whose NetworkPolicies deny egress by default may reach the GKE
    TPU device plugin's metrics port (2112) on the nodes: Ray's reporter agent reads every chip's metrics there
    (``TPU_DEVICE_PLUGIN_ADDR``), and without it the TPU panels stay empty."""
    if not _monitoring_on(resources):
        return []
    policies: dict[Any, list[Mapping[str, Any]]] = {}
    for r in resources:
        if r.type == NETWORK_POLICY:
            policies.setdefault(get_path(r.props, "metadata", "namespace"), []).append(r.props)
    found = []
    for r in resources:
        ns = get_path(r.props, "metadata", "namespace")
        if r.type not in (RAY_CLUSTER, RAY_JOB) or not policies.get(ns):
            continue
        if not any(_lets_out_to_device_plugin(p) for p in policies[ns]):
            found.append(
                (
                    r.urn or r.name,
                    f"namespace {ns!r}: no NetworkPolicy lets Ray pods out to the TPU device plugin's metrics port "
                    f"{TPU_DEVICE_PLUGIN_METRICS_PORT} on the nodes, so Ray's TPU metrics stay empty",
                )
            )
    return found


SECURITY_STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "iam-no-project-wide-grants",
        "Project-wide IAM grants are limited to GKE's node service account role, and, where a node pool streams "
        "images, image streaming's Service Usage Consumer role to the node service account.",
        check_project_roles,
    ),
    StackRule(
        "k8s-ray-namespace-default-deny",
        "Every namespace with a Ray cluster denies all ingress and egress by default.",
        check_default_deny,
    ),
    StackRule(
        "ray-tpu-metrics-egress",
        "With monitoring on, Ray pods may reach the TPU device plugin's metrics port (2112) on the nodes.",
        check_tpu_metrics_egress,
    ),
)
