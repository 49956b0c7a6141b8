"""Every Ray pod of a plan, as KubeRay, the TPU webhook and GKE will make it, against the node pool it is planned onto.

A stack rule (it reads the node pools, the RayClusters, RayJobs and RayServices, and the NetworkPolicies of one
plan); same shape as the other rule modules (Pulumi wire values, no Pulumi import, types from :mod:`.rule_types`), and
:mod:`.rules` adds it to ``STACK_RULES``, so ``tpuray plan`` and the policy pack run it.

The pods: each RayCluster's (and each RayJob's or RayService's own cluster's) head and worker groups, and a
RayJob's submitter. Each gets what is added to it before the scheduler sees it:

- KubeRay's labels (ray-project/kuberay v1.7.0 ray-operator/controllers/ray/common/pod.go, ``labelPod``:
  ``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group``, ...) and, on a head with in-tree autoscaling, the
  autoscaler container (``BuildAutoscalerContainer``, :data:`~..catalog.machine_types.KUBERAY_AUTOSCALER_REQUESTS`);
- the TPU webhook's, on a multi-host worker (ai-on-gke/kuberay-tpu-webhook 5da78aa main.go): the ``replicaIndex``
  label (``injectReplicaLabel``) and a required pod affinity to the pods of its replica and RayCluster with
  topologyKey ``cloud.google.com/gke-nodepool``, beside an anti-affinity to other replicas (``injectAffinity``);
  its hostname, subdomain and env change nothing the scheduler reads;
- GKE's GCS FUSE sidecar on a pod annotated ``gke-gcsfuse/volumes: "true"`` (and its metadata prefetch sidecar).

Then each pod is checked against the node pools, one rule per scheduler or API-server behaviour (cited at each).
Not checked: the other pods a node runs beside the Ray pod (the system pool's controllers), beyond the DaemonSet
headroom :func:`~..catalog.machine_types.schedulable` keeps; ephemeral storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.container_paths import SHM_PATH, reserved_path_clash
from tpuray.components.catalog.machine_types import (
    GCSFUSE_METADATA_PREFETCH_REQUESTS,
    GCSFUSE_SIDECAR_REQUESTS,
    KUBERAY_AUTOSCALER_REQUESTS,
    Allocatable,
    schedulable,
)
from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_QUEUED_TAINT_KEY,
    GKE_TOPOLOGY_LABEL,
    RAY_CLUSTER_LABEL,
    TPU_RESOURCE,
)
from tpuray.components.catalog.quantity import parse_quantity
from tpuray.components.catalog.wire import as_int, as_list, get_path
from tpuray.components.planning.network_policy import allowed_ingress_ports
from tpuray.components.review.policy_rules import slice_of, tpu_pool
from tpuray.components.review.resource_types import NETWORK_POLICY, NODE_POOL, RAY_CLUSTER, RAY_JOB, RAY_SERVICE
from tpuray.components.review.rule_types import Resource, RuleContext, StackRule

__all__ = ["POD_FIT_STACK_RULES", "NodePoolView", "PlannedPod", "node_pools_of", "planned_pods", "pod_problems"]

REPLICA_INDEX_LABEL = "replicaIndex"
"""The TPU webhook's label of a multi-host replica (``<group>-<index>``)."""
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""Well-known node label: the machine type (https://kubernetes.io/docs/reference/labels-annotations-taints/)."""


# ---- the node pools -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodePoolView:
    """A planned node pool as its nodes will be: every label and taint, how many nodes, what each offers."""

    urn: str
    name: str
    machine_type: str
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect in Kubernetes spelling)."""
    max_nodes: int | None
    node: Allocatable | None
    """What one node offers the pods tpuray plans (``schedulable``); None: an unknown machine type."""


def _k8s_effect(effect: str) -> str:
    return "".join(part.capitalize() for part in effect.split("_")) if "_" in effect or effect.isupper() else effect


def node_pools_of(resources: Sequence[Resource]) -> list[NodePoolView]:
    out = []
    for r in resources:
        if r.type != NODE_POOL:
            continue
        machine = str(get_path(r.props, "nodeConfig", "machineType") or "")
        name = str(r.props.get("name") or r.name)
        declared = get_path(r.props, "nodeConfig", "labels")
        # GKE labels every node with its pool's name and the machine type, and a TPU node with its accelerator and
        # topology (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus)
        labels = {**(declared if isinstance(declared, Mapping) else {}), GKE_NODEPOOL_LABEL: name}
        labels[INSTANCE_TYPE_LABEL] = machine
        pool = tpu_pool(r)
        s = slice_of(pool) if pool is not None else None
        if s is not None:
            labels |= {GKE_ACCELERATOR_LABEL: s.gke_accelerator, GKE_TOPOLOGY_LABEL: s.topology}
        taints = [
            (str(t.get("key")), str(t.get("value") or ""), _k8s_effect(str(t.get("effect"))))
            for t in as_list(get_path(r.props, "nodeConfig", "taints"))
            if isinstance(t, Mapping)
        ]
        if get_path(r.props, "queuedProvisioning", "enabled") is True:
            # GKE taints a queued-provisioning pool's nodes until a ProvisioningRequest claims them (names.py)
            taints.append((GKE_QUEUED_TAINT_KEY, "true", "NoSchedule"))
        auto = get_path(r.props, "autoscaling")
        nodes = None
        if isinstance(auto, Mapping):
            nodes = as_int(auto.get("maxNodeCount")) or as_int(auto.get("totalMaxNodeCount"))
        nodes = nodes or as_int(r.props.get("nodeCount")) or as_int(r.props.get("initialNodeCount"))
        streaming = get_path(r.props, "nodeConfig", "gcfsConfig", "enabled") is True
        out.append(
            NodePoolView(
                urn=r.urn or r.name,
                name=name,
                machine_type=machine,
                labels={str(k): str(v) for k, v in labels.items()},
                taints=tuple(taints),
                max_nodes=nodes,
                node=schedulable(machine, image_streaming=streaming),
            )
        )
    return out


# ---- the pods ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedPod:
    """One pod template of a plan with what KubeRay, the webhook and GKE add before the scheduler sees it."""

    urn: str
    where: str
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    added: tuple[tuple[str, Allocatable], ...] = ()
    """Containers others add, with their requests."""
    affinity: tuple[Mapping[str, Any], ...] = ()
    """Required pod affinity terms: the template's and the webhook's."""
    hosts: int = 1
    """Pods of one replica that must share a node pool (``numOfHosts`` of a multi-host group)."""
    replicas: int = 1
    ray: bool = True
    """A Ray node (head or worker), whose ports the NetworkPolicy must admit."""
    own_mounts: frozenset[str] = field(default_factory=frozenset)
    """Mount paths tpuray itself gives every Ray pod (the shared memory), not the stack's to choose."""


def _requests_of(container: Any) -> Allocatable:
    """A container's requests (its limits where it sets none: the API server defaults requests to limits)."""
    req = get_path(container, "resources", "requests") or get_path(container, "resources", "limits") or {}
    cpu = parse_quantity(str(req.get("cpu", "0"))) * 1000
    mem = parse_quantity(str(req.get("memory", "0"))) / (1024 * 1024)
    tpu = parse_quantity(str(req.get(TPU_RESOURCE, "0")))
    return Allocatable(
        int(cpu.to_integral_value("ROUND_CEILING")), int(mem.to_integral_value("ROUND_CEILING")), int(tpu)
    )


def _gcsfuse(template: Mapping[str, Any]) -> list[tuple[str, Allocatable]]:
    annotations = get_path(template, "metadata", "annotations") or {}
    if not isinstance(annotations, Mapping) or annotations.get("gke-gcsfuse/volumes") != "true":
        return []
    out = [("GKE's GCS FUSE sidecar", GCSFUSE_SIDECAR_REQUESTS)]
    attrs = [get_path(v, "csi", "volumeAttributes") or {} for v in as_list(get_path(template, "spec", "volumes"))]
    if any(isinstance(a, Mapping) and a.get("gcsfuseMetadataPrefetchOnMount") == "true" for a in attrs):
        out.append(("GKE's GCS FUSE metadata prefetch sidecar", GCSFUSE_METADATA_PREFETCH_REQUESTS))
    return out


def _template_labels(template: Mapping[str, Any]) -> dict[str, str]:
    labels = get_path(template, "metadata", "labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _kuberay_labels(template: Mapping[str, Any], cluster: str, node_type: str, group: str) -> dict[str, str]:
    """``labelPod``: KubeRay's labels win over the template's for cluster, node type and group."""
    return {
        "ray.io/is-ray-node": "yes",
        "ray.io/identifier": f"{cluster}-{node_type}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
        **_template_labels(template),
        RAY_CLUSTER_LABEL: cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
    }


def _template_affinity(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    terms = get_path(spec, "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    return [t for t in as_list(terms) if isinstance(t, Mapping)]


def _cluster_pods(urn: str, at: str, cluster: str, spec: Mapping[str, Any]) -> list[PlannedPod]:
    head = get_path(spec, "headGroupSpec", "template") or {}
    added = _gcsfuse(head)
    if spec.get("enableInTreeAutoscaling"):
        # KubeRay's defaults, or the resources autoscalerOptions gives it
        own = get_path(spec, "autoscalerOptions", "resources")
        autoscaler = KUBERAY_AUTOSCALER_REQUESTS if not own else _requests_of({"resources": own})
        added.insert(0, ("KubeRay's autoscaler", autoscaler))
    head_spec = head.get("spec") or {}
    pods = [
        PlannedPod(
            urn=urn,
            where=f"{at}.headGroupSpec",
            spec=head_spec,
            labels=_kuberay_labels(head, cluster, "head", "headgroup"),
            added=tuple(added),
            affinity=tuple(_template_affinity(head_spec)),
            own_mounts=frozenset({SHM_PATH}),
        )
    ]
    for i, g in enumerate(as_list(spec.get("workerGroupSpecs"))):
        if not isinstance(g, Mapping):
            continue
        group = str(g.get("groupName", i))
        template = g.get("template") or {}
        wspec = template.get("spec") or {}
        hosts = as_int(g.get("numOfHosts")) or 1
        replicas = max(as_int(g.get("maxReplicas")) or 0, as_int(g.get("replicas")) or 0, 1)
        labels = _kuberay_labels(template, cluster, "worker", group)
        affinity = _template_affinity(wspec)
        if hosts > 1:  # the webhook's injectReplicaLabel and injectAffinity
            labels[REPLICA_INDEX_LABEL] = f"{group}-0"
            affinity.append(
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": REPLICA_INDEX_LABEL, "operator": "In", "values": [f"{group}-0"]},
                            {"key": RAY_CLUSTER_LABEL, "operator": "In", "values": [cluster]},
                        ]
                    },
                    "topologyKey": GKE_NODEPOOL_LABEL,
                }
            )
        pods.append(
            PlannedPod(
                urn=urn,
                where=f"{at}.workerGroupSpecs[{group}]",
                spec=wspec,
                labels=labels,
                added=tuple(_gcsfuse(template)),
                affinity=tuple(affinity),
                hosts=hosts,
                replicas=replicas,
                own_mounts=frozenset({SHM_PATH}),
            )
        )
    return pods


_CLUSTER_SPECS: tuple[tuple[str, str, str], ...] = (
    (RAY_CLUSTER, "RayCluster", ""),
    (RAY_JOB, "RayJob", "rayClusterSpec"),
    (RAY_SERVICE, "RayService", "rayClusterConfig"),
)
"""Each KubeRay kind that makes a RayCluster, and where its spec holds that cluster's spec ("": the spec is it).
KubeRay names the cluster of a RayJob or a RayService ``<name>-`` plus five random characters (v1.7.0
ray-operator/controllers/ray/utils/util.go ``GenerateRayClusterName``; rayservice_controller.go
``constructRayClusterForRayService`` copies ``rayClusterConfig`` into it as it is, and a NewCluster upgrade makes a
second cluster of the same spec)."""


def planned_pods(resources: Sequence[Resource]) -> list[PlannedPod]:
    """Every Ray pod the plan's RayClusters, RayJobs and RayServices make, and each RayJob's submitter."""
    out: list[PlannedPod] = []
    for r in resources:
        spec = r.props.get("spec") or {}
        name = str(get_path(r.props, "metadata", "name") or r.name)
        for kind_type, kind, inner_key in _CLUSTER_SPECS:
            if r.type != kind_type:
                continue
            inner = spec.get(inner_key) if inner_key else spec
            if isinstance(inner, Mapping):
                at = f"{kind} {name} spec" + (f".{inner_key}" if inner_key else "")
                out += _cluster_pods(r.urn or r.name, at, name if not inner_key else f"{name}-xxxxx", inner)
        if r.type == RAY_JOB:
            submitter = spec.get("submitterPodTemplate")
            if isinstance(submitter, Mapping):
                out.append(
                    PlannedPod(
                        urn=r.urn or r.name,
                        where=f"RayJob {name} spec.submitterPodTemplate",
                        spec=submitter.get("spec") or {},
                        labels=_template_labels(submitter),
                        ray=False,
                    )
                )
    return out


# ---- the rules ----------------------------------------------------------------------------------------------------
def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def _tolerates(tolerations: Sequence[Any], taint: tuple[str, str, str]) -> bool:
    """k8s.io/component-helpers scheduling/corev1 ``TolerationsTolerateTaint`` (ToleratesTaint): the effect is the
    taint's or empty, the key the taint's (or empty with Exists), Exists or Equal with the taint's value."""
    key, value, effect = taint
    for t in tolerations:
        if not isinstance(t, Mapping):
            continue
        if t.get("effect") not in (None, "", effect):
            continue
        op = t.get("operator") or "Equal"
        if t.get("key") in (None, "") and op == "Exists":
            return True
        if t.get("key") != key:
            continue
        if op == "Exists" or str(t.get("value") or "") == value:
            return True
    return False


def placement_problems(pod: PlannedPod, pool: NodePoolView) -> list[str]:
    """kube-scheduler's NodeAffinity filter (kubernetes pkg/scheduler/framework/plugins/nodeaffinity: every
    ``nodeSelector`` label on the node) and TaintToleration filter (plugins/tainttoleration: every NoSchedule and
    NoExecute taint tolerated)."""
    found = []
    selector = pod.spec.get("nodeSelector") or {}
    missing = {k: v for k, v in selector.items() if pool.labels.get(str(k)) != str(v)}
    if missing:
        found.append(f"nodeSelector {dict(missing)} is not on its nodes' labels")
    for taint in pool.taints:
        if taint[2] in ("NoSchedule", "NoExecute") and not _tolerates(as_list(pod.spec.get("tolerations")), taint):
            found.append(f"taint {taint[0]}={taint[1]}:{taint[2]} is not tolerated")
    return found


def pod_requests(pod: PlannedPod) -> Allocatable:
    """The scheduler's view of a pod's requests (kubernetes pkg/api/v1/resource/helpers.go ``PodRequests``: the
    sum over containers, the largest init container if larger), with the containers others add."""

    total = Allocatable(0, 0, 0)
    for c in as_list(pod.spec.get("containers")):
        total = total.plus(_requests_of(c))
    for _, extra in pod.added:
        total = total.plus(extra)
    for c in as_list(pod.spec.get("initContainers")):
        i = _requests_of(c)
        total = Allocatable(
            max(total.cpu_millicores, i.cpu_millicores), max(total.memory_mib, i.memory_mib), max(total.tpu, i.tpu)
        )
    return total


def resource_problems(pod: PlannedPod, pool: NodePoolView) -> list[str]:
    """kube-scheduler's NodeResourcesFit filter (kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go:
    a node whose allocatable less its pods' requests cannot hold the pod's is filtered out), against what one node
    of the machine type offers after GKE's reservations and the DaemonSet headroom."""
    if pool.node is None:
        return [f"machine type {pool.machine_type!r}: tpuray does not know what its nodes offer, so the fit is unknown"]
    need, node = pod_requests(pod), pool.node
    added = "".join(f" + {what} {a.cpu_millicores}m, {a.memory_mib}Mi" for what, a in pod.added)
    short = []
    if need.cpu_millicores > node.cpu_millicores:
        short.append(f"{need.cpu_millicores}m CPU of {node.cpu_millicores}m")
    if need.memory_mib > node.memory_mib:
        short.append(f"{need.memory_mib}Mi memory of {node.memory_mib}Mi")
    if need.tpu > node.tpu:
        short.append(f"{need.tpu} {TPU_RESOURCE} of {node.tpu}")
    if not short:
        return []
    return [
        f"requests {' and '.join(short)} a {pool.machine_type} node offers pods after GKE's reservations and the "
        f"DaemonSet headroom (its containers{added}): it never schedules"
    ]


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and In/NotIn/Exists/DoesNotExist expressions) against ``labels``."""
    if not _selects(selector.get("matchLabels") or {}, labels):
        return False
    for e in as_list(selector.get("matchExpressions")):
        key, op, values = str(e.get("key")), e.get("operator"), [str(v) for v in as_list(e.get("values"))]
        has = key in labels
        ok = {
            "In": has and labels.get(key) in values,
            "NotIn": not has or labels.get(key) not in values,
            "Exists": has,
            "DoesNotExist": not has,
        }.get(str(op), False)
        if not ok:
            return False
    return True


def affinity_problems(pod: PlannedPod, pods: Sequence[PlannedPod], pools: Sequence[NodePoolView]) -> list[str]:
    """kube-scheduler's InterPodAffinity filter (kubernetes pkg/scheduler/framework/plugins/interpodaffinity/
    filtering.go, ``satisfyPodAffinity``): a required term is met by a running pod it selects in the same topology,
    or, where no pod matches yet, by the pod itself matching its own terms (the first pod of a group). The webhook's
    term (topologyKey ``cloud.google.com/gke-nodepool``) and its anti-affinity to other replicas put each replica of
    a multi-host group in a node pool of its own: a pool of at least ``numOfHosts`` nodes for each replica."""
    found = []
    for term in pod.affinity:
        selector = term.get("labelSelector") or {}
        if not _matches(selector, pod.labels) and not any(_matches(selector, p.labels) for p in pods if p is not pod):
            found.append(f"required pod affinity {dict(selector)} matches neither its own pod nor any pod of the plan")
    if pod.hosts > 1:
        big = [p for p in pools if p.max_nodes is not None and p.max_nodes >= pod.hosts]
        if len(big) < pod.replicas:
            found.append(
                f"{pod.replicas} replica(s) of {pod.hosts} hosts each need a node pool of {pod.hosts} nodes apiece "
                f"(the TPU webhook's pod affinity on {GKE_NODEPOOL_LABEL}); the pools it may use offer "
                f"{len(big)}: {', '.join(f'{p.name} ({p.max_nodes})' for p in pools) or 'none'}"
            )
    return found


def mount_problems(pod: PlannedPod) -> list[str]:
    """The API server refuses a pod with two volumeMounts at one path in a container (kubernetes
    pkg/apis/core/validation/validation.go, ``ValidateVolumeMounts``: "must be unique"); a mount at a path the
    image, Ray or the kubelet use hides it (``catalog.container_paths``)."""
    found = []
    for c in as_list(pod.spec.get("containers")):
        seen: dict[str, str] = {}
        for m in as_list(get_path(c, "volumeMounts")):
            path, vol = str(m.get("mountPath")), str(m.get("name"))
            norm = "/" + "/".join(p for p in path.split("/") if p)
            if norm in seen:
                found.append(
                    f"container {c.get('name')}: volumes {seen[norm]} and {vol} are both mounted at {path}: the "
                    "API server refuses the pod (mountPath must be unique)"
                )
            seen[norm] = vol
            clash = reserved_path_clash(norm)
            if clash is not None and norm not in pod.own_mounts:
                found.append(f"container {c.get('name')}: volume {vol} at {path} hides {clash.path}, {clash.what}")
    return found


def port_problems(pod: PlannedPod, policies: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every port a Ray container listens on is admitted by a planned NetworkPolicy selecting the pod: the
    namespace denies all ingress by default (``planning.network_policy``), and a port no policy admits is dropped
    (https://kubernetes.io/docs/concepts/services-networking/network-policies/)."""
    if not pod.ray or not policies:
        return []
    admitted = allowed_ingress_ports(policies, pod.labels)
    found = []
    for c in as_list(pod.spec.get("containers")):
        for p in as_list(get_path(c, "ports")):
            port = as_int(p.get("containerPort"))
            if port is not None and port not in admitted:
                found.append(
                    f"container {c.get('name')} listens on {port} ({p.get('name')}), which no NetworkPolicy of the "
                    "plan admits into the pod"
                )
    return found


def pod_problems(
    pod: PlannedPod, pods: Sequence[PlannedPod], pools: Sequence[NodePoolView], policies: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Every problem of one planned pod: it is placed on the pools whose labels and taints admit it, and fits one
    of them (the scheduler needs only one feasible node)."""
    found = mount_problems(pod) + port_problems(pod, policies)
    candidates = [p for p in pools if not placement_problems(pod, p)]
    if not candidates:
        why = "; ".join(f"{p.name}: {', '.join(placement_problems(pod, p))}" for p in pools)
        return [*found, f"no node pool of the plan admits it ({why or 'the plan has no node pools'})"]
    fits = [p for p in candidates if not resource_problems(pod, p)]
    if not fits:
        found += [m for p in candidates for m in (f"on {p.name}: {x}" for x in resource_problems(pod, p))]
        return found
    return found + affinity_problems(pod, pods, fits)


def check_pods_fit(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    pools = node_pools_of(resources)
    if not pools:
        return []  # a plan without node pools (a platform repo's other stack): nothing to place the pods on
    pods = planned_pods(resources)
    policies = [r.props for r in resources if r.type == NETWORK_POLICY]
    return [(pod.urn, f"{pod.where}: {m}") for pod in pods for m in pod_problems(pod, pods, pools, policies)]


POD_FIT_STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "ray-pods-fit-their-node-pools",
        "Every planned Ray pod (the head and worker groups of each RayCluster, RayJob and RayService, each RayJob's "
        "submitter), with what KubeRay, the TPU webhook and GKE add, is admitted by a planned node pool's labels and "
        "taints, fits its machine type's allocatable (GKE's reservations and a DaemonSet headroom taken off), meets "
        "its required pod affinity, mounts each path once and clear of the image's and Ray's, and listens only on "
        "ports a planned NetworkPolicy admits.",
        check_pods_fit,
    ),
)
