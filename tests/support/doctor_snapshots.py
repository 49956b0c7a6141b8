"""Snapshot directories for ``tpuray doctor``: a healthy cluster and one per failure, written once as the files
``kubectl get ... -o json`` saves; the fake API server serves the same files.

The CRDs are the pinned KubeRay and Kueue ones, as :mod:`tests.support.crds` finds them.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.crds import crd_folder, pinned
from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_TOPOLOGY_LABEL,
    IMAGE_RAY_VERSION_LABEL,
    IMAGE_TORCH_VERSION_LABEL,
    IMAGE_TORCH_XLA_VERSION_LABEL,
    TPU_RESOURCE,
)
from tpuray.components.config import StackConfig, load_stack_file
from tpuray.components.doctor.reader import GATEWAY_API_GROUP, LIST_FILES, OPTIONAL_LIST_FILES, VERSION_FILE

STACK_YAML = """\
# The doctor's test stack: a multi-host v6e pool (4 hosts) kept at one slice on flex-start, and single-host tpu7x on
# spot (flex-start does not serve tpu7x); each in a zone that offers its generation (Cloud TPU regions and zones page);
# the Helm KubeRay operator (token auth through authOptions) and Kueue.
config:
  tpuray:project: tpuray-doctor-test
  tpuray:region: us-central1
  tpuray:zone: us-central1-b
  tpuray:cluster:
    name: tpuray-doc
    regional: true
    deletionProtection: false
    masterAuthorizedNetworks:
      - cidr: 203.0.113.0/24
  tpuray:slicePools:
    - name: v6e-train
      generation: v6e
      topology: 4x4
      slices: 1
      capacity: {type: flex-start, maxRunDuration: 86400}
      autoscaling: {enabled: true, minSlices: 1}
    - name: tpu7x-spot
      generation: tpu7x
      topology: 2x2x1
      slices: 2
      zone: us-central1-c
      capacity: {type: spot}
  tpuray:ray:
    operator: helm
    workerImage: us-docker.pkg.dev/tpuray-doctor-test/tpuray/worker:0.1.0
  tpuray:kueue:
    enabled: true
"""
STACK = "doctor"


def write_stack(root: Path) -> Path:
    """A project root holding ``Pulumi.yaml`` and ``Pulumi.doctor.yaml``."""
    (root / "Pulumi.yaml").write_text("name: tpuray\nruntime: python\n")
    path = root / f"Pulumi.{STACK}.yaml"
    path.write_text(STACK_YAML)
    return path


def stack_config(root: Path) -> StackConfig:
    return load_stack_file(write_stack(root), STACK)


def _crds(folder: str) -> list[dict[str, Any]]:
    return copy.deepcopy(_read_crds(folder))


@functools.cache
def _read_crds(folder: str) -> list[dict[str, Any]]:
    d = crd_folder(folder)
    files = [d / name for name in pinned(folder)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: the CRDs are megabytes
    return [doc for f in files for doc in yaml.load_all(f.read_text(), Loader=loader) if isinstance(doc, dict)]


# ---- the healthy cluster --------------------------------------------------------------------------------------
READY = {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}


def gateway_api_crd(
    kind: str, plural: str, scope: str = "Namespaced", served: tuple[str, ...] = ("v1",)
) -> dict[str, Any]:
    """A Gateway API CRD as the doctor reads it (its name, kind and served versions; a schema that keeps all)."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    versions = [{"name": v, "served": True, "storage": i == 0, "schema": schema} for i, v in enumerate(served)]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GATEWAY_API_GROUP}"},
        "spec": {
            "group": GATEWAY_API_GROUP,
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List", "singular": kind.lower()},
            "scope": scope,
            "versions": versions,
        },
    }


GKE_GATEWAY_CLASSES = (
    "gke-l7-global-external-managed",
    "gke-l7-gxlb",
    "gke-l7-regional-external-managed",
    "gke-l7-rilb",
)
"""Single-cluster GatewayClasses GKE installs with its Gateway API
(https://cloud.google.com/kubernetes-engine/docs/concepts/gateway-api)."""


def gateway_class(name: str, accepted: str | None = "True", reason: str = "Accepted") -> dict[str, Any]:
    """A GatewayClass of GKE's controller; ``accepted`` its Accepted condition's status (None: no condition)."""
    conditions = [] if accepted is None else [{"type": "Accepted", "status": accepted, "reason": reason}]
    return {
        "apiVersion": f"{GATEWAY_API_GROUP}/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": "networking.gke.io/gateway"},
        "status": {"conditions": conditions},
    }


def _node(name: str, pool: str, accelerator: str, topology: str, chips: int) -> dict[str, Any]:
    labels = {GKE_NODEPOOL_LABEL: pool, GKE_ACCELERATOR_LABEL: accelerator, GKE_TOPOLOGY_LABEL: topology}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "179", TPU_RESOURCE: str(chips)}, "conditions": READY["conditions"]},
    }


def _pod(namespace: str, name: str, labels: dict[str, str], node: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}], **spec},
        "status": copy.deepcopy(READY),
    }


def _worker(name: str, node: str, ray: str, torch: str, torch_xla: str) -> dict[str, Any]:
    pod = _pod("ray", name, {"app.kubernetes.io/name": "kuberay"}, node)
    pod["spec"]["containers"][0]["resources"] = {"limits": {TPU_RESOURCE: "4"}, "requests": {TPU_RESOURCE: "4"}}
    pod["metadata"]["annotations"] = {
        IMAGE_RAY_VERSION_LABEL: ray,
        IMAGE_TORCH_VERSION_LABEL: torch,
        IMAGE_TORCH_XLA_VERSION_LABEL: torch_xla,
    }
    return pod


def _deployment(namespace: str, name: str, image: str, container: str, *args: str) -> dict[str, Any]:
    main: dict[str, Any] = {"name": container, "image": image, **({"args": list(args)} if args else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": namespace, "name": name, "labels": {"app.kubernetes.io/name": name}},
        "spec": {"template": {"spec": {"containers": [main]}}},
        "status": {"replicas": 1, "readyReplicas": 1},
    }


OPERATOR_ARGS = ("--enable-leader-election=true", "--enable-metrics=true", "--feature-gates=RayMultiHostIndexing=false")
"""The args KubeRay 1.7.0's chart renders with the stack's values (``templates/deployment.yaml``, ``_helpers.tpl``)."""


def healthy() -> dict[str, Any]:
    """The objects of a cluster that meets the test stack: file name -> document."""
    nodes = [_node("gke-system-0", "system", "", "", 0)]
    del nodes[0]["metadata"]["labels"][GKE_ACCELERATOR_LABEL], nodes[0]["metadata"]["labels"][GKE_TOPOLOGY_LABEL]
    del nodes[0]["status"]["allocatable"][TPU_RESOURCE]
    nodes += [_node(f"gke-v6e-train-0-{i}", "v6e-train-0", "tpu-v6e-slice", "4x4", 4) for i in range(4)]
    nodes += [_node("gke-tpu7x-spot-0", "tpu7x-spot", "tpu7x", "2x2x1", 4)]
    tpu_nodes = [n["metadata"]["name"] for n in nodes[1:]]
    pods = [
        _pod("kube-system", f"tpu-device-plugin-{i}", {"k8s-app": "tpu-device-plugin"}, n)
        for i, n in enumerate(tpu_nodes)
    ]
    pods += [
        _pod("kube-system", f"anetd-{i}", {"k8s-app": "cilium"}, n["metadata"]["name"]) for i, n in enumerate(nodes)
    ]
    pods += [_worker(f"ray-worker-{i}", n, "2.60.0", "2.9.0", "2.9.0") for i, n in enumerate(tpu_nodes[:4])]
    deployments = [
        _deployment(
            "kuberay-system", "kuberay-operator", "quay.io/kuberay/operator:v1.7.0", "kuberay-operator", *OPERATOR_ARGS
        ),
        _deployment("kueue-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.19.2", "manager"),
        # the webhook's chart 0.3.1 (helm-chart/values.yaml and templates/deployment.yaml of
        # ai-on-gke/kuberay-tpu-webhook: its container is named after the chart)
        _deployment(
            "ray-system",
            "kuberay-tpu-webhook",
            "us-docker.pkg.dev/ai-on-gke/kuberay-tpu-webhook/tpu-webhook:v1.3.1-gke.2",
            "kuberay-tpu-webhook",
        ),
    ]
    webhook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kuberay-tpu-mutating-webhook-cfg"},
        "webhooks": [
            {
                "name": "kuberay-tpu-webhook.ray-system.svc",
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay"}},
            }
        ],
    }
    crds = _crds("kuberay-crds") + _crds("kueue-crds")
    # GKE's Gateway API (the standard channel serves v1 and v1beta1): a serving stack's incremental upgrade uses it
    crds += [
        gateway_api_crd("GatewayClass", "gatewayclasses", "Cluster", ("v1", "v1beta1")),
        gateway_api_crd("Gateway", "gateways", served=("v1", "v1beta1")),
        gateway_api_crd("HTTPRoute", "httproutes", served=("v1", "v1beta1")),
    ]

    def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}

    return {
        LIST_FILES["nodes"]: as_list(nodes),
        LIST_FILES["pods"]: as_list(pods),
        LIST_FILES["deployments"]: as_list(deployments),
        LIST_FILES["webhooks"]: as_list([webhook]),
        LIST_FILES["crds"]: as_list(crds),
        OPTIONAL_LIST_FILES["gateway_classes"]: as_list([gateway_class(n) for n in GKE_GATEWAY_CLASSES]),
        OPTIONAL_LIST_FILES["ray_clusters"]: as_list([]),
        VERSION_FILE: {
            "clientVersion": {"gitVersion": "v1.35.2"},
            # 1.35: the spot pool's 120 s graceful node shutdown needs 1.35.0-gke.1171000 (config.capacity.Spot)
            "serverVersion": {"major": "1", "minor": "35", "gitVersion": "v1.35.1-gke.1616000"},
        },
    }


# ---- one fixture per failure ----------------------------------------------------------------------------------
def _items(docs: dict[str, Any], field: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = docs[LIST_FILES[field]]["items"]
    return items


def _missing_webhook(docs: dict[str, Any]) -> None:
    _items(docs, "webhooks").clear()


def _wrong_topology_label(docs: dict[str, Any]) -> None:
    node = next(n for n in _items(docs, "nodes") if n["metadata"]["name"] == "gke-v6e-train-0-2")
    node["metadata"]["labels"][GKE_TOPOLOGY_LABEL] = "2x2"


def _too_few_nodes(docs: dict[str, Any]) -> None:
    nodes = _items(docs, "nodes")
    nodes.remove(next(n for n in nodes if n["metadata"]["name"] == "gke-v6e-train-0-3"))
    pods = _items(docs, "pods")
    pods[:] = [p for p in pods if p["spec"]["nodeName"] != "gke-v6e-train-0-3"]


def _old_gke(docs: dict[str, Any]) -> None:
    docs[VERSION_FILE]["serverVersion"].update(minor="31", gitVersion="v1.31.1-gke.1678000")


def _old_kuberay(docs: dict[str, Any]) -> None:
    dep = next(d for d in _items(docs, "deployments") if d["metadata"]["name"] == "kuberay-operator")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "quay.io/kuberay/operator:v1.4.2"
    crd = next(c for c in _items(docs, "crds") if c["metadata"]["name"] == "rayclusters.ray.io")
    for version in crd["spec"]["versions"]:  # the KubeRay 1.4 CRD had no authOptions
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("authOptions", None)


def _kueue_missing(docs: dict[str, Any]) -> None:
    deployments, crds = _items(docs, "deployments"), _items(docs, "crds")
    deployments[:] = [d for d in deployments if d["metadata"]["name"] != "kueue-controller-manager"]
    crds[:] = [c for c in crds if c["spec"]["group"] != "kueue.x-k8s.io"]


def _torch_mismatch(docs: dict[str, Any]) -> None:
    pod = next(p for p in _items(docs, "pods") if p["metadata"]["name"] == "ray-worker-1")
    pod["metadata"]["annotations"][IMAGE_TORCH_XLA_VERSION_LABEL] = "2.8.0"


def _v6e_node(docs: dict[str, Any], name: str = "gke-v6e-train-0-2") -> dict[str, Any]:
    return next(n for n in _items(docs, "nodes") if n["metadata"]["name"] == name)


def _cordoned_host(docs: dict[str, Any]) -> None:
    _v6e_node(docs)["spec"] = {"unschedulable": True}  # kubectl cordon


def _not_ready_host(docs: dict[str, Any]) -> None:
    _v6e_node(docs)["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]


def _host_listed_twice(docs: dict[str, Any]) -> None:
    """Three hosts of the 4-host slice, one of them listed twice: still 4 entries, 3 hosts."""
    _too_few_nodes(docs)
    _items(docs, "nodes").append(copy.deepcopy(_v6e_node(docs)))


def _spec_schema_without_properties(docs: dict[str, Any]) -> None:
    crd = next(c for c in _items(docs, "crds") if c["metadata"]["name"] == "rayjobs.ray.io")
    for version in crd["spec"]["versions"]:  # {type: object} alone: the API server prunes every field of spec
        version["schema"]["openAPIV3Schema"]["properties"]["spec"] = {"type": "object"}


def _operator_elsewhere(docs: dict[str, Any]) -> None:
    dep = next(d for d in _items(docs, "deployments") if d["metadata"]["name"] == "kuberay-operator")
    dep["metadata"]["namespace"] = "ray-operators"


def _indexing_operator(docs: dict[str, Any]) -> None:
    """KubeRay v1.7.0 installed with its chart's own values: RayMultiHostIndexing on, with webhook 1.3.1."""
    dep = next(d for d in _items(docs, "deployments") if d["metadata"]["name"] == "kuberay-operator")
    del dep["spec"]["template"]["spec"]["containers"][0]["args"]


FIXTURES: dict[str, tuple[Callable[[dict[str, Any]], None] | None, set[str], int]] = {
    "healthy": (None, set(), 0),
    "missing-webhook": (_missing_webhook, {"tpu-webhook"}, 1),
    "wrong-topology-label": (_wrong_topology_label, {"tpu-node-labels.v6e-train"}, 1),
    "too-few-nodes": (_too_few_nodes, {"tpu-node-count.v6e-train"}, 1),
    "old-gke": (
        _old_gke,
        {"gke-version.v6e", "gke-version.tpu7x", "gke-version.flex-start", "gke-version.spot-shutdown"},
        1,
    ),
    "old-kuberay": (_old_kuberay, {"kuberay-operator", "kuberay-crds"}, 1),
    "kueue-missing": (_kueue_missing, {"kueue-controller", "kueue-crds"}, 1),
    "torch-mismatch": (_torch_mismatch, {"worker-torch-pair"}, 1),
    "cordoned-host": (_cordoned_host, {"tpu-node-count.v6e-train"}, 1),
    "not-ready-host": (_not_ready_host, {"tpu-node-count.v6e-train"}, 1),
    "host-listed-twice": (_host_listed_twice, {"tpu-node-count.v6e-train"}, 1),
    "spec-schema-without-properties": (_spec_schema_without_properties, {"kuberay-crds"}, 1),
    "operator-elsewhere": (_operator_elsewhere, {"kuberay-operator-namespace"}, 1),
    "indexing-operator": (_indexing_operator, {"tpu-webhook-version"}, 1),
}
"""Fixture -> (how it differs from the healthy cluster, the check ids that fail, the exit code)."""


@functools.cache
def _healthy_docs() -> dict[str, Any]:
    """:func:`healthy`, built once, to compare against: never changed, never handed out."""
    return healthy()


@functools.cache
def _snapshot_texts(name: str) -> dict[str, str]:
    """The files of fixture ``name``, file name -> text: built once per process (the CRDs are megabytes of JSON,
    seconds to copy and indent), then only written; a file the fixture leaves as it is shares the healthy text."""
    docs = healthy()
    change = FIXTURES[name][0]
    if change is None:
        return {file: json.dumps(doc, indent=1) for file, doc in docs.items()}
    change(docs)
    base = _healthy_docs()
    texts = _snapshot_texts("healthy")
    return {file: texts[file] if doc == base[file] else json.dumps(doc, indent=1) for file, doc in docs.items()}


def write_snapshot(directory: Path, name: str) -> Path:
    """The snapshot directory of fixture ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    for file, text in _snapshot_texts(name).items():
        (directory / file).write_text(text)
    return directory
