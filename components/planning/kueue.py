"""Kueue objects derived from the slice pools, as plain ``kueue.x-k8s.io/v1beta2`` dicts.

Pure Python; imports no Pulumi. From the same :class:`~tpuray.components.catalog.topology.TpuSlice` as the node pools
and the KubeRay worker groups; each pool's part (:func:`pool_kueue`: its flavor's spec, its quota, its admission
check) is made with its plan (``planning.pool_plan``), and :func:`kueue_spec` puts the stack's objects together:

- one ResourceFlavor per slice pool, whose node labels and tolerations are the pool's
  :class:`~tpuray.components.planning.scheduling.PoolScheduling` (what its worker group selects and tolerates),
  and one for the CPU system pool that runs the Ray heads and the RayJob submitters;
- one ClusterQueue covering ``cpu``, ``memory`` and ``google.com/tpu`` (Kueue never admits a pod set that asks
  for a resource no resource group covers), with ``google.com/tpu`` quota = each pool's chips at its maximum size
  and flavors in config order, so a pod set that selects only a slice shape falls back from pool to pool;
- a LocalQueue in the Ray namespace, three WorkloadPriorityClasses, and for each pool whose capacity type has
  ``queued_provisioning`` an AdmissionCheck with
  its ProvisioningRequestConfig (class ``queued-provisioning.gke.io``, managed resource ``google.com/tpu``) applied
  to that pool's flavor only.

Flavor choice (Kueue's flavor assigner): flavors are tried in order and one is a candidate only if its node labels
match the pod set's node selector on the resource group's label keys. The system flavor comes first: the head
(which selects the system pool) and the submitter Job (which selects nothing) land there, while a TPU worker group,
selecting its pool's label, skips it for its own pool's flavor. Kueue docs:
https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ and
https://kueue.sigs.k8s.io/docs/admission-check-controllers/provisioning/; GKE's Ray-on-DWS tutorial:
https://docs.cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import (
    GKE_NODEPOOL_LABEL,
    SYSTEM_POOL,
    TPU_RESOURCE,
)
from tpuray.components.catalog.quantity import format_cpu, format_memory, parse_quantity
from tpuray.components.config import SlicePoolConfig, StackConfig
from tpuray.components.planning.kuberay import SUBMITTER_REQUESTS
from tpuray.components.planning.node_pools import bounded_name
from tpuray.components.planning.scheduling import PoolScheduling

__all__ = [
    "API_VERSION",
    "DWS_PROVISIONING_CLASS",
    "PRIORITY_VALUES",
    "PROVISIONING_CONTROLLER",
    "SUBMITTER_CPU",
    "SUBMITTER_MEMORY",
    "KueueSpec",
    "PoolKueue",
    "PoolQuota",
    "cluster_queue_name",
    "kueue_spec",
    "pool_kueue",
    "priority_class_name",
]

API_VERSION = "kueue.x-k8s.io/v1beta2"
"""The storage version of Kueue v0.19's CRDs."""
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
DWS_PROVISIONING_CLASS = "queued-provisioning.gke.io"
"""GKE's ProvisioningRequest class for queued provisioning (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest)."""
PRIORITY_VALUES = {"low": 100, "normal": 1000, "high": 10000}
"""WorkloadPriorityClass values; the ClusterQueue lets a higher one preempt a lower one."""
SUBMITTER_CPU = SUBMITTER_REQUESTS["cpu"]
SUBMITTER_MEMORY = SUBMITTER_REQUESTS["memory"]
"""Requests of the submitter pod set Kueue counts in K8sJobMode: the ``submitterPodTemplate`` the RayJob carries
(kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go uses it when present)."""
_COVERED = ("cpu", "memory", TPU_RESOURCE)
_GCE_NAME_MAX = 63


def priority_class_name(cluster: str, level: str) -> str:
    return f"{cluster}-{level}"


@dataclass(frozen=True)
class PoolQuota:
    """What the ClusterQueue grants one slice pool's flavor: the pool at its maximum size."""

    pool: str
    flavor: str
    chips: int
    cpu: str
    memory: str
    admission_check: str | None
    """The ProvisioningRequest admission check of a queued-provisioning pool (None otherwise)."""


@dataclass(frozen=True)
class KueueSpec:
    cluster_queue: str
    local_queue: str
    namespace: str
    """The Ray namespace (the LocalQueue's)."""
    system_flavor: str
    quotas: tuple[PoolQuota, ...]
    objects: tuple[dict[str, Any], ...]
    """Every object in apply order: flavors, priority classes, provisioning configs, admission checks, the
    ClusterQueue, the LocalQueue."""

    def quota_of(self, pool: str) -> PoolQuota:
        return next(q for q in self.quotas if q.pool == pool)


def _object(
    kind: str, name: str, labels: Mapping[str, str], namespace: str | None = None, **body: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, **body}


@dataclass(frozen=True)
class PoolKueue:
    """One slice pool's part of the stack's Kueue objects (its :class:`PoolPlan`'s ``kueue``): its quota, its
    ResourceFlavor's spec, and the ProvisioningRequestConfig of a queued-provisioning pool."""

    quota: PoolQuota
    slices: int
    """Most slices the pool holds: at most that many admitted jobs (heads and submitters) on it."""
    flavor_spec: dict[str, Any]
    """The ResourceFlavor's ``spec``: the pool's node selector as node labels, and its pods' tolerations."""
    provisioning: dict[str, Any] | None
    """The ProvisioningRequestConfig's ``spec`` (queued provisioning only; named as the admission check)."""


def cluster_queue_name(cluster: str) -> str:
    """The stack's one ClusterQueue is named after its GKE cluster (as are its flavors)."""
    return cluster


def pool_kueue(cfg: StackConfig, pool: SlicePoolConfig, scheduling: PoolScheduling) -> PoolKueue:
    """The Kueue entries of one slice pool; raises ValueError for an unparsable Ray resource size."""
    s = pool.tpu_slice
    pods = pool.slices * s.hosts
    check = (
        bounded_name(f"{cfg.cluster.name}-{pool.name}-dws", _GCE_NAME_MAX)
        if pool.capacity.queued_provisioning
        else None
    )
    try:
        cpu = format_cpu(parse_quantity(cfg.ray.worker_cpu) * pods)
        memory = format_memory(parse_quantity(cfg.ray.worker_memory) * pods)
    except ValueError as e:
        raise ValueError(f"ray: {e}") from None
    quota = PoolQuota(
        pool=pool.name,
        flavor=f"{cfg.cluster.name}-{pool.name}",
        chips=pool.slices * s.chips,
        cpu=cpu,
        memory=memory,
        admission_check=check,
    )
    provisioning: dict[str, Any] | None = None
    if check is not None:
        provisioning = {"provisioningClassName": DWS_PROVISIONING_CLASS, "managedResources": [TPU_RESOURCE]}
        max_run = pool.capacity.provisioning_request_max_run_seconds
        if max_run is not None:
            provisioning["parameters"] = {"maxRunDurationSeconds": str(max_run)}
    return PoolKueue(
        quota=quota,
        slices=pool.slices,
        flavor_spec={"nodeLabels": scheduling.pod_node_selector(), "tolerations": scheduling.k8s_tolerations()},
        provisioning=provisioning,
    )


def _resources(cpu: str, memory: str, chips: int) -> list[dict[str, Any]]:
    return [
        {"name": "cpu", "nominalQuota": cpu},
        {"name": "memory", "nominalQuota": memory},
        {"name": TPU_RESOURCE, "nominalQuota": chips},
    ]


def kueue_spec(cfg: StackConfig, pools: Sequence[PoolKueue], labels: Mapping[str, str] | None = None) -> KueueSpec:
    """The Kueue objects of a stack (``kueue.enabled``) from its slice pools' entries (:func:`pool_kueue`, in
    config order); raises ValueError for an unparsable Ray resource size."""
    labels = dict(labels or {})
    cluster = cfg.cluster.name
    quotas = tuple(p.quota for p in pools)
    try:
        head_cpu, head_memory = parse_quantity(cfg.ray.head_cpu), parse_quantity(cfg.ray.head_memory)
    except ValueError as e:
        raise ValueError(f"ray: {e}") from None
    # Every admitted job holds at least one slice, so there are never more heads (and submitters) than slices.
    jobs = sum(p.slices for p in pools)
    system_cpu = format_cpu((head_cpu + parse_quantity(SUBMITTER_CPU)) * jobs)
    system_memory = format_memory((head_memory + parse_quantity(SUBMITTER_MEMORY)) * jobs)
    system_flavor = f"{cluster}-{SYSTEM_POOL}"

    objects: list[dict[str, Any]] = [
        _object("ResourceFlavor", system_flavor, labels, spec={"nodeLabels": {GKE_NODEPOOL_LABEL: SYSTEM_POOL}})
    ]
    for p in pools:
        objects.append(_object("ResourceFlavor", p.quota.flavor, labels, spec=copy.deepcopy(p.flavor_spec)))
    for level, value in PRIORITY_VALUES.items():
        objects.append(
            _object(
                "WorkloadPriorityClass",
                priority_class_name(cluster, level),
                labels,
                value=value,
                description=f"tpuray {level}-priority TPU jobs of cluster {cluster}",
            )
        )
    checks: list[dict[str, Any]] = []
    for p in pools:
        q = p.quota
        if q.admission_check is None or p.provisioning is None:
            continue
        prc_spec = copy.deepcopy(p.provisioning)
        objects.append(_object("ProvisioningRequestConfig", q.admission_check, labels, spec=prc_spec))
        objects.append(
            _object(
                "AdmissionCheck",
                q.admission_check,
                labels,
                spec={
                    "controllerName": PROVISIONING_CONTROLLER,
                    "parameters": {
                        "apiGroup": API_VERSION.split("/")[0],
                        "kind": "ProvisioningRequestConfig",
                        "name": q.admission_check,
                    },
                },
            )
        )
        checks.append({"name": q.admission_check, "onFlavors": [q.flavor]})

    flavors = [{"name": system_flavor, "resources": _resources(system_cpu, system_memory, 0)}]
    flavors += [{"name": q.flavor, "resources": _resources(q.cpu, q.memory, q.chips)} for q in quotas]
    cq_spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.ray.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": list(_COVERED), "flavors": flavors}],
    }
    if checks:
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": checks}
    objects.append(_object("ClusterQueue", cluster_queue_name(cluster), labels, spec=cq_spec))
    objects.append(
        _object(
            "LocalQueue",
            cfg.kueue.local_queue,
            labels,
            namespace=cfg.ray.namespace,
            spec={"clusterQueue": cluster},
        )
    )
    return KueueSpec(
        cluster_queue=cluster_queue_name(cluster),
        local_queue=cfg.kueue.local_queue,
        namespace=cfg.ray.namespace,
        system_flavor=system_flavor,
        quotas=quotas,
        objects=tuple(objects),
    )
