"""The NetworkPolicies of the Ray namespace, as plain ``networking.k8s.io/v1`` dicts. Pure data; imports no Pulumi.

Deny by default (ingress and egress), then allow exactly:

- among the pods of one RayCluster: the Ray ports (pinned on every node by
  :data:`~tpuray.components.catalog.names.RAY_NODE_PORTS`, the head's ports and the worker port range) and the TPU
  runtime's ports between the hosts of a slice and across slices, per process, as
  :mod:`tpuray.components.catalog.runtimes` derives them for the stack's backend (PyTorch/XLA: 8471, the
  per-chip PJRT process ports 8476+ and a megascale port per chip, 8081+; TorchTPU: a slice builder per device,
  8471+, the two megascale ports torch_tpu gives each device, 8080+, and its split compiler's handshake on the
  coordinator rank, 36423), every port listed on its own (below);
- to the head's dashboard/job port: the RayJob submitter pods and the KubeRay operator's namespace;
- to every Ray pod's metrics port: Managed Service for Prometheus collectors (tpuray's PodMonitoring);
- out of every Ray pod: DNS, the GKE metadata server (Workload Identity tokens, also for the GCS FUSE sidecar) and
  HTTPS (Google APIs for GCS FUSE, the Kubernetes API for the Ray autoscaler);
- out of the cluster's Ray pods to the GKE TPU device plugin's metrics port (2112) on the nodes, and only there:
  Ray's reporter agent reads each host's chip metrics at ``TPU_DEVICE_PLUGIN_ADDR`` (``<node IP>:2112``, which
  the GKE TPU webhook injects; ray-project/ray#57829) to export its ``ray_tpu_*`` gauges. The plugin serves on
  the node's own address (a host-network DaemonSet), which no pod selector matches: the rule names the nodes'
  subnet range.

A RayService's pods carry its own name as that label: :func:`ray_service_policies` gives them the same allowances
among themselves (no RayJob submitter calls their head), so they and the RayCluster's pods are not each other's peers.

What the collectors need needs nothing else here: Managed Service for Prometheus collectors are pods of the
``gmp-system`` DaemonSet ``collector`` on the pod network (GoogleCloudPlatform/prometheus-engine
``charts/operator/templates/collector.yaml`` sets no ``hostNetwork``), so the ingress rule above admits them by
their namespace; they scrape pods and the plugin on its node
(https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed), for tpuray's PodMonitoring as for the
Ray add-on's monitoring, which is one too (https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/how-to/
collect-view-logs-metrics); their egress to Cloud Monitoring is theirs, outside this namespace.

``kubectl port-forward`` enters the pod's network namespace through the kubelet, which NetworkPolicy does not
filter, so the documented port-forward + ``ray job submit`` path keeps working.
GKE Dataplane V2 enforces these without the Calico add-on:
https://cloud.google.com/kubernetes-engine/docs/how-to/network-policy

No rule uses a port range (``endPort``). GKE Dataplane V2 is Cilium
(https://cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2), and upstream Cilium before 1.16 did not
honour ``endPort``: its NetworkPolicy parser kept ``port`` and dropped ``endPort``, opening the first port only
(cilium/cilium ``pkg/k8s/network_policy.go``, ``parsePorts``; the issue "Cilium silently accepts k8s networkpolicy
with endPort without implementing it"), a later change refused such a policy outright ("Cilium will not process or
enforce network policies with port ranges"), and port ranges came with 1.16 ("policy: Add support for port ranges in
network policies", the v1.16.0-rc.1 notes). GKE publishes neither the Cilium release its ``anetd`` carries nor that
it honours ``endPort``, so no GKE version tpuray supports (1.30 and later) can be shown to; under the default deny a
range it ignored would cut Ray's calls between nodes. So every allowed port is listed on its own, and Ray's worker
ports are pinned to a small range (:data:`~tpuray.components.catalog.names.RAY_WORKER_PORT_RANGE`, 256 ports). The
peers rule lists the 9 head and node ports, the 256 worker ports and the runtime's (17 for PyTorch/XLA on an 8-chip
host, 25 for TorchTPU on a tpu7x host): at most 290 entries in each of its two directions, about 20 KB of the
policy object, far below the Kubernetes object size limit. Cilium makes each listed port a port rule of its own
(``parsePorts`` again), so its cap of 40 ports per port rule does not apply; it keeps a policy-map entry per allowed
peer identity and port on each pod, a number tpuray does not bound (the cluster's Ray pods times these ports).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.metric_names import TPU_DEVICE_PLUGIN_METRICS_PORT
from tpuray.components.catalog.names import (
    HEAD_PORTS,
    RAY_CLUSTER_POD_LABEL,
    RAY_DASHBOARD_PORT,
    RAY_METRICS_PORT,
    RAY_NODE_PORTS,
    RAY_WORKER_PORT_RANGE,
    SUBMITTER_ROLE_LABEL,
)

__all__ = [
    "DEFAULT_DENY",
    "DNS_PORT",
    "METADATA_SERVER",
    "NetworkPolicyParams",
    "allowed_ingress_ports",
    "network_policies",
    "ray_peer_ports",
    "ray_service_policies",
]

API_VERSION = "networking.k8s.io/v1"
DEFAULT_DENY = "default-deny-all"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
"""KubeRay's pod label: ``head`` or ``worker``."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DNS_PORT = 53
NODE_LOCAL_DNS = "169.254.20.10/32"
"""NodeLocal DNSCache's address (https://cloud.google.com/kubernetes-engine/docs/how-to/nodelocal-dns-cache)."""
METADATA_SERVER = (("169.254.169.254/32", 80), ("169.254.169.252/32", 988))
"""The GKE metadata server: pods dial .254:80; on the iptables dataplane it is DNATed to .252:988 before policy
(https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity)."""
HTTPS_PORT = 443
GMP_NAMESPACE = "gmp-system"
"""Where Google Cloud Managed Service for Prometheus runs its collectors, which scrape the Ray pods' metrics for
tpuray's PodMonitoring (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed)."""


@dataclass(frozen=True)
class NetworkPolicyParams:
    namespace: str
    cluster: str
    """The Ray cluster's name as tpuray labels its pods (``tpuray.io/ray-cluster``; a RayJob's own cluster gets a
    generated ``ray.io/cluster`` name, so KubeRay's label cannot be selected in advance)."""
    runtime_ranges: tuple[tuple[int, int], ...]
    """The TPU runtime's ports between hosts and slices, as merged ``(first, last)`` TCP ranges
    (:func:`tpuray.components.catalog.runtimes.union_ports` of the cluster's slices under the stack's backend);
    empty with no TPU worker group."""
    operator_namespace: str | None = None
    """Where the KubeRay operator runs, if in the cluster; it calls the head's job API for RayJob status."""
    labels: Mapping[str, str] = field(default_factory=dict)
    node_cidr: str | None = None
    """The nodes' subnet range: the TPU device plugin's metrics port is reachable there only. None: no such rule."""


def ray_peer_ports(runtime_ranges: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """Every port one pod of a RayCluster may open on another, as NetworkPolicy ports (TCP), each on its own and
    sorted: Ray's (head, node and worker ports) and the TPU runtime's. No ``endPort``: see the module docstring."""
    lo, hi = RAY_WORKER_PORT_RANGE
    ports = (
        {port for _, port in HEAD_PORTS}
        | {port for _, port in RAY_NODE_PORTS}
        | set(range(lo, hi + 1))
        | {port for first, last in runtime_ranges for port in range(first, last + 1)}
    )
    return [{"protocol": "TCP", "port": p} for p in sorted(ports)]


def _policy(p: NetworkPolicyParams, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": p.namespace, "labels": dict(p.labels)},
        "spec": spec,
    }


def _ray_pods(p: NetworkPolicyParams, **extra: str) -> dict[str, Any]:
    return {"matchLabels": {RAY_CLUSTER_POD_LABEL: p.cluster, **extra}}


def network_policies(p: NetworkPolicyParams) -> list[dict[str, Any]]:
    """The namespace's policies: default deny, then the allowances above for the RayCluster ``p.cluster`` and its
    RayJob submitters."""
    head = _ray_pods(p, **{RAY_NODE_TYPE_LABEL: "head"})
    submitters: dict[str, Any] = {"podSelector": {"matchLabels": dict(SUBMITTER_ROLE_LABEL)}}
    return [
        _policy(p, DEFAULT_DENY, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        *_ray_pod_policies(p, head_clients=[submitters]),
        _policy(
            p,
            f"{p.cluster}-ray-job-submitter",
            {
                "podSelector": submitters["podSelector"],
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": head}], "ports": _DASHBOARD}],
            },
        ),
        *_device_plugin_policy(p),
        _platform_egress(p),
    ]


def ray_service_policies(p: NetworkPolicyParams) -> list[dict[str, Any]]:
    """A RayService's own allowances, for pods labelled ``p.cluster`` (its name): Ray's and its runtime's ports among
    its own pods only, Managed Prometheus's scrape, the operator's calls to its head's dashboard (KubeRay's RayService
    controller reads Serve's status there: ``rayservice_controller.go``, ``FetchHeadServiceURL(..., DashboardPortName)``
    at v1.7.0) and the device plugin's port. Its pods are no Ray peers of the training cluster's, nor it of theirs; the
    namespace's default deny and egress (:func:`network_policies`) cover them as every pod."""
    return [*_ray_pod_policies(p, head_clients=[]), *_device_plugin_policy(p)]


_DASHBOARD = [{"protocol": "TCP", "port": RAY_DASHBOARD_PORT}]


def _ray_pod_policies(p: NetworkPolicyParams, head_clients: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Managed Prometheus's scrape, Ray's peers and who may call the head's dashboard: ``head_clients`` and the
    operator's namespace. No head policy without a client: an ingress rule with no ``from`` admits every source."""
    peers = ray_peer_ports(p.runtime_ranges)
    clients = list(head_clients)
    if p.operator_namespace:
        clients.append(
            {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: p.operator_namespace}}, "podSelector": {}}
        )
    gmp = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: GMP_NAMESPACE}}, "podSelector": {}}
    metrics_port = [{"protocol": "TCP", "port": RAY_METRICS_PORT}]
    return [
        _policy(
            p,
            f"{p.cluster}-ray-metrics",
            {
                "podSelector": _ray_pods(p),
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [gmp], "ports": metrics_port}],
            },
        ),
        _policy(
            p,
            f"{p.cluster}-ray-peers",
            {
                "podSelector": _ray_pods(p),
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": _ray_pods(p)}], "ports": peers}],
                "egress": [{"to": [{"podSelector": _ray_pods(p)}], "ports": peers}],
            },
        ),
        *(
            [
                _policy(
                    p,
                    f"{p.cluster}-ray-head-job-api",
                    {
                        "podSelector": _ray_pods(p, **{RAY_NODE_TYPE_LABEL: "head"}),
                        "policyTypes": ["Ingress"],
                        "ingress": [{"from": clients, "ports": _DASHBOARD}],
                    },
                )
            ]
            if clients
            else []
        ),
    ]


def _device_plugin_policy(p: NetworkPolicyParams) -> list[dict[str, Any]]:
    if not (p.node_cidr and p.runtime_ranges):
        return []
    to_plugin = {
        "to": [{"ipBlock": {"cidr": p.node_cidr}}],
        "ports": [{"protocol": "TCP", "port": TPU_DEVICE_PLUGIN_METRICS_PORT}],
    }
    spec = {"podSelector": _ray_pods(p), "policyTypes": ["Egress"], "egress": [to_plugin]}
    return [_policy(p, f"{p.cluster}-ray-tpu-device-plugin", spec)]


def _platform_egress(p: NetworkPolicyParams) -> dict[str, Any]:
    """Out of every pod of the namespace: DNS, the metadata server and HTTPS."""
    dns_to = [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        },
        {"ipBlock": {"cidr": NODE_LOCAL_DNS}},
    ]
    return _policy(
        p,
        "ray-platform-egress",
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": dns_to, "ports": [{"protocol": proto, "port": DNS_PORT} for proto in ("UDP", "TCP")]},
                *(
                    {"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"protocol": "TCP", "port": port}]}
                    for cidr, port in METADATA_SERVER
                ),
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": HTTPS_PORT}]},
            ],
        },
    )


def allowed_ingress_ports(policies: Sequence[Mapping[str, Any]], pod_labels: Mapping[str, str]) -> set[int]:
    """Single TCP ports some policy lets into a pod with these labels (ranges, which tpuray never writes, left out:
    an engine may open only their first port); for checks and tests."""
    out: set[int] = set()
    for pol in policies:
        spec = pol.get("spec") or {}
        match = (spec.get("podSelector") or {}).get("matchLabels") or {}
        if any(pod_labels.get(k) != v for k, v in match.items()):
            continue
        for rule in spec.get("ingress") or []:
            for port in rule.get("ports") or []:
                if "endPort" not in port and isinstance(port.get("port"), int):
                    out.add(port["port"])
    return out
