"""tpuray's mandatory infrastructure rules, as pure functions over one resource's inputs.

The same functions back the CrossGuard policy pack (``policy/``, through :mod:`tpuray.components.review.policy_pack`)
and ``tpuray plan``, which runs them over the resources it collected. Inputs are Pulumi wire values:
camelCase keys, plain dicts and lists.

Imports no Pulumi: a rule is ``(resource, context) -> list of violation messages`` (types in :mod:`.rule_types`);
:mod:`.rules` adds :data:`PLATFORM_RULES` to the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.names import RAY_DASHBOARD_PORT
from tpuray.components.catalog.slice_labels import slice_from_labels
from tpuray.components.catalog.topology import (
    Generation,
    TopologyError,
    TpuSlice,
    generation_of_machine_type,
)
from tpuray.components.catalog.wire import as_int, get_path
from tpuray.components.planning.kuberay_checks import worker_group_chips_problem
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_CLUSTER, SERVICE
from tpuray.components.review.rule_types import Resource, Rule, RuleContext

__all__ = ["PLATFORM_RULES", "TpuPool", "slice_of", "tpu_pool"]


@dataclass
class _Found:
    messages: list[str] = field(default_factory=list)

    def __call__(self, message: str) -> None:
        self.messages.append(message)


# ---- node pools -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TpuPool:
    generation: Generation
    machine_type: str
    placement: Mapping[str, Any]
    topology: str | None
    """placementPolicy.tpuTopology, the only place GKE reads a slice shape from."""
    max_nodes: int | None
    autoscaling: Mapping[str, Any] | None
    labels: Mapping[str, Any]


def tpu_pool(res: Resource) -> TpuPool | None:
    machine = get_path(res.props, "nodeConfig", "machineType")
    gen = generation_of_machine_type(machine)
    if gen is None:
        return None
    placement = get_path(res.props, "placementPolicy")
    placement = placement if isinstance(placement, Mapping) else {}
    topo = placement.get("tpuTopology")
    auto = get_path(res.props, "autoscaling")
    auto = auto if isinstance(auto, Mapping) else None
    max_nodes = as_int(auto.get("maxNodeCount")) if auto else None
    if max_nodes is None:
        max_nodes = as_int(res.props.get("nodeCount"))
    if max_nodes is None:
        max_nodes = as_int(res.props.get("initialNodeCount"))
    labels = get_path(res.props, "nodeConfig", "labels")
    return TpuPool(
        generation=gen,
        machine_type=str(machine),
        placement=placement,
        topology=topo if isinstance(topo, str) and topo else None,
        max_nodes=max_nodes,
        autoscaling=auto,
        labels=labels if isinstance(labels, Mapping) else {},
    )


def _declared_slice(pool: TpuPool) -> TpuSlice | str:
    """The pool's slice from its tpuTopology, or a message saying why it is not a valid slice."""
    assert pool.topology is not None
    try:
        return TpuSlice.parse(pool.generation.name, pool.topology, pool.machine_type)
    except TopologyError as e:
        return f"placementPolicy.tpuTopology {pool.topology!r} is not a slice of {pool.machine_type}: {e}"


def _labelled_slice(pool: TpuPool) -> TpuSlice | None:
    """The slice the node labels describe (GKE's topology label, or tpuray's pod-type label), if any.

    A pool's node count alone cannot tell one multi-host slice from several single-host slices; the labels can.
    """
    try:
        return slice_from_labels(pool.labels, machine_type=pool.machine_type)
    except TopologyError:
        return None  # no slice labels, or ones that do not fit the machine type: other rules judge the pool


def slice_of(pool: TpuPool) -> TpuSlice | None:
    if pool.topology is not None:
        s = _declared_slice(pool)
        return s if isinstance(s, TpuSlice) else None
    return _labelled_slice(pool)


def _placement_advice(gen: Generation) -> str:
    if gen.multi_host_placement == "workload-policy":
        return "a workload policy (placementPolicy.policyName)"
    return "placementPolicy {type: COMPACT, tpuTopology: <topology>}"


def check_multi_host_placement(res: Resource, ctx: RuleContext) -> list[str]:
    """Multi-host TPU pools: COMPACT placement with a tpuTopology that matches the node count (tpu7x: a
    workload policy named in placementPolicy.policyName); single-host pools: no tpuTopology."""
    pool = tpu_pool(res)
    if pool is None:
        return []
    found = _Found()
    gen = pool.generation
    if pool.topology is None:
        if pool.placement.get("policyName") and gen.multi_host_placement == "workload-policy":
            # the topology lives in the referenced workload policy (acceleratorTopology); COMPACT must not be set
            kind = pool.placement.get("type")
            return [f"placementPolicy.type {kind!r} next to a workload policy: leave type empty"] if kind else []
        labelled = _labelled_slice(pool)
        if labelled is not None and labelled.multi_host:
            found(
                f"nodes labelled {labelled.pod_type} ({labelled.hosts} hosts of {pool.machine_type}) but no "
                f"placementPolicy.tpuTopology: a multi-host {gen.name} slice needs {_placement_advice(gen)}"
            )
        return found.messages
    s = _declared_slice(pool)
    if isinstance(s, str):
        return [s]
    if not s.multi_host:
        found(f"tpuTopology {s.topology} is a single-host slice: GKE rejects a TPU topology on single-host pools")
        return found.messages
    if gen.multi_host_placement == "workload-policy":
        if not pool.placement.get("policyName"):
            found(f"a multi-host {gen.name} slice needs {_placement_advice(gen)}; GKE rejects compact placement here")
        elif pool.placement.get("type"):
            # COMPACT group placement and a workload policy are mutually exclusive; GKE stores the pair
            # policyName + tpuTopology with no type (https://github.com/vllm-project/ci-infra/pull/547).
            found(f"placementPolicy.type {pool.placement.get('type')!r} next to a workload policy: leave type empty")
    elif pool.placement.get("type") != "COMPACT":
        found(f"multi-host {s.topology} slice: placementPolicy.type is {pool.placement.get('type')!r}, not COMPACT")
    if pool.max_nodes is not None and pool.max_nodes != s.hosts:
        found(
            f"{pool.max_nodes} nodes at most, but a {s.generation} {s.topology} slice has {s.hosts} hosts of "
            f"{s.machine_type} (one node pool per slice)"
        )
    labelled = _labelled_slice(pool)
    if labelled is not None and labelled.chips != s.chips:
        found(f"tpuTopology {s.topology} ({s.chips} chips) disagrees with the node labels ({labelled.pod_type})")
    locations = res.props.get("nodeLocations")
    if isinstance(locations, list) and len(locations) != 1:
        found(f"compact placement needs exactly one zone in nodeLocations, got {locations}")
    return found.messages


def check_multi_host_autoscaling(res: Resource, ctx: RuleContext) -> list[str]:
    """A multi-host slice is atomic: autoscale per zone between 0 (or the whole slice) and the whole slice."""
    pool = tpu_pool(res)
    if pool is None:
        return []
    s = slice_of(pool)
    if s is None or not s.multi_host:
        return []
    found = _Found()
    initial = as_int(res.props.get("initialNodeCount"))
    if initial is not None and initial not in (0, s.hosts):
        found(f"initialNodeCount {initial}: a {s.topology} slice is 0 or all {s.hosts} hosts")
    auto = pool.autoscaling
    if auto is None:
        return found.messages
    if auto.get("totalMinNodeCount") is not None or auto.get("totalMaxNodeCount") is not None:
        found("totalMinNodeCount/totalMaxNodeCount fail for TPU slices: use per-zone minNodeCount/maxNodeCount")
    lo, hi = as_int(auto.get("minNodeCount")) or 0, as_int(auto.get("maxNodeCount"))
    if lo not in (0, s.hosts):
        found(f"autoscaling.minNodeCount {lo}: a {s.topology} slice is 0 or all {s.hosts} hosts")
    if hi != s.hosts:
        found(f"autoscaling.maxNodeCount {hi}: a {s.topology} slice is all {s.hosts} hosts")
    return found.messages


# ---- cluster --------------------------------------------------------------------------------------------
def check_private_nodes(res: Resource, ctx: RuleContext) -> list[str]:
    """Nodes have internal IP addresses only (cluster-wide, and not switched off per node pool)."""
    if res.type == NODE_POOL:
        if get_path(res.props, "networkConfig", "enablePrivateNodes") is False:
            return ["networkConfig.enablePrivateNodes is false: nodes would get public IP addresses"]
        return []
    private = get_path(res.props, "privateClusterConfig", "enablePrivateNodes")
    default = get_path(res.props, "networkConfig", "defaultEnablePrivateNodes")
    if private is True or default is True:
        return []
    return ["privateClusterConfig.enablePrivateNodes is not true: nodes would get public IP addresses"]


def check_workload_identity(res: Resource, ctx: RuleContext) -> list[str]:
    """Workload Identity on the cluster; node pools do not fall back to the node's metadata server."""
    mode = get_path(res.props, "nodeConfig", "workloadMetadataConfig", "mode")
    found = _Found()
    if mode not in (None, "GKE_METADATA"):
        found(f"nodeConfig.workloadMetadataConfig.mode is {mode!r}: pods would see the node's credentials")
    if res.type == CLUSTER:
        pool = get_path(res.props, "workloadIdentityConfig", "workloadPool")
        if not isinstance(pool, str) or not pool.endswith(".svc.id.goog"):
            found("workloadIdentityConfig.workloadPool is not set to <project>.svc.id.goog")
    return found.messages


def _default_compute_sa(value: Any) -> bool:
    return value in (None, "", "default") or (
        isinstance(value, str) and value.endswith("-compute@developer.gserviceaccount.com")
    )


def check_no_default_service_account(res: Resource, ctx: RuleContext) -> list[str]:
    """Nodes run as a dedicated service account, never the project's default compute account."""
    if res.type == CLUSTER and res.props.get("removeDefaultNodePool") is True and "nodeConfig" not in res.props:
        return []  # the cluster keeps no nodes of its own
    sa = get_path(res.props, "nodeConfig", "serviceAccount")
    if _default_compute_sa(sa):
        return [f"nodeConfig.serviceAccount is {sa!r}: the nodes would run as the default compute service account"]
    return []


def check_deletion_protection(res: Resource, ctx: RuleContext) -> list[str]:
    """Production clusters keep deletion protection on (the provider's default is on; never turn it off)."""
    if not ctx.production:
        return []
    if res.props.get("deletionProtection") is False:
        return [f"deletionProtection is false in production stack {ctx.stack!r}"]
    return []


# ---- Kubernetes / KubeRay ---------------------------------------------------------------------------------
def _ports(service_spec: Mapping[str, Any]) -> set[int]:
    out: set[int] = set()
    for p in service_spec.get("ports") or []:
        if isinstance(p, Mapping):
            for key in ("port", "targetPort"):
                n = as_int(p.get(key))
                if n is not None:
                    out.add(n)
    return out


def check_dashboard_not_public(res: Resource, ctx: RuleContext) -> list[str]:
    """The Ray dashboard (and job API, port 8265) is never exposed through a LoadBalancer."""
    if res.type == RAY_CLUSTER:
        head = get_path(res.props, "spec", "headGroupSpec")
        if isinstance(head, Mapping):
            if head.get("serviceType") == "LoadBalancer":
                return ["headGroupSpec.serviceType is LoadBalancer: the Ray dashboard would be reachable from outside"]
            if get_path(head, "headService", "spec", "type") == "LoadBalancer":
                return ["headGroupSpec.headService is a LoadBalancer: the Ray dashboard would be reachable"]
        return []
    spec = res.props.get("spec")
    if not isinstance(spec, Mapping) or spec.get("type") != "LoadBalancer":
        return []
    selector = spec.get("selector") if isinstance(spec.get("selector"), Mapping) else {}
    assert isinstance(selector, Mapping)
    if RAY_DASHBOARD_PORT in _ports(spec) or selector.get("ray.io/node-type") == "head":
        return ["a LoadBalancer Service exposes the Ray head (dashboard port 8265)"]
    return []


def check_worker_group_chips(res: Resource, ctx: RuleContext) -> list[str]:
    """Every TPU worker group's numOfHosts * google.com/tpu equals its slice's chips (the TPU webhook's rule)."""
    found = _Found()
    for i, group in enumerate(get_path(res.props, "spec", "workerGroupSpecs") or []):
        if not isinstance(group, Mapping):
            continue
        problem = worker_group_chips_problem(group)  # the renderer's own rule, written once
        if problem:
            found(f"worker group {group.get('groupName') or f'workerGroupSpecs[{i}]'}: {problem}")
    return found.messages


PLATFORM_RULES: tuple[Rule, ...] = (
    Rule(
        "tpu-multi-host-placement",
        "Multi-host TPU pools use compact placement with a matching topology "
        "(a workload policy for tpu7x); single-host pools set no topology.",
        (NODE_POOL,),
        check_multi_host_placement,
    ),
    Rule(
        "tpu-multi-host-autoscaling",
        "A multi-host TPU pool autoscales between 0 (or the whole slice) and the whole slice, with per-zone limits.",
        (NODE_POOL,),
        check_multi_host_autoscaling,
    ),
    Rule(
        "gke-private-nodes", "Cluster nodes have private IP addresses only.", (CLUSTER, NODE_POOL), check_private_nodes
    ),
    Rule("gke-workload-identity", "Workload Identity is on.", (CLUSTER, NODE_POOL), check_workload_identity),
    Rule(
        "gke-no-default-service-account",
        "Nodes never run as the default compute service account.",
        (CLUSTER, NODE_POOL),
        check_no_default_service_account,
    ),
    Rule(
        "ray-dashboard-not-public",
        "The Ray dashboard is never exposed through a LoadBalancer.",
        (RAY_CLUSTER, SERVICE),
        check_dashboard_not_public,
    ),
    Rule(
        "gke-deletion-protection-production",
        "Production clusters have deletion protection on.",
        (CLUSTER,),
        check_deletion_protection,
    ),
    Rule(
        "ray-tpu-worker-group-chips",
        "Every TPU worker group's numOfHosts x google.com/tpu equals its slice's chips.",
        (RAY_CLUSTER,),
        check_worker_group_chips,
    ),
)
