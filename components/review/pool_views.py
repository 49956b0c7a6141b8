"""What a plan holds per slice pool: slices, hosts, chips, Ray workers and chip-hours, as plain data.

Pure Python. The shape of each pool comes from its plan (``planning.pool_plan``, the object the program declares
from), and so do the keys the declared objects are found by; the node pools and Ray worker groups come from the
resources the program actually declared, so a program that drifts from its config shows up here (e.g. a pool with
no Ray worker group gets no Ray workers).

Two counts of Ray workers: a worker *pod* runs on each TPU host (VM) and carries that host's chips as its
``TPU`` resource; inside it tpuray runs one Ray worker per runtime device (an actor holding ``{"TPU": 1}``: a chip,
or under TorchTPU each of a tpu7x chip's two devices). So a pool's Ray workers are its worker pods times the Ray
``TPU`` resources each pod advertises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import POOL_LABEL, RAY_TPU_RESOURCE, TPU_RESOURCE
from tpuray.components.catalog.safe_text import one_line
from tpuray.components.catalog.topology import TpuSlice, generation_of_machine_type
from tpuray.components.catalog.wire import as_int
from tpuray.components.planning.stack_plan import StackPlan
from tpuray.components.review.kueue_view import KueueAdmission, kueue_admissions
from tpuray.components.review.resource_types import NODE_POOL, RAY_CLUSTER, RAY_JOB

__all__ = [
    "PoolView",
    "RayGroup",
    "declared_nodes",
    "pool_views",
    "ray_groups",
    "ray_workers_text",
    "tpu_chips_by_generation",
]

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class RayGroup:
    """One KubeRay worker group as declared: ``numOfHosts`` worker pods per replica (slice)."""

    cluster: str
    name: str
    pool: str | None
    replicas: int
    min_replicas: int
    max_replicas: int
    num_of_hosts: int
    tpu_per_pod: int
    """Chips a worker pod requests (``google.com/tpu``)."""
    ray_tpu_per_pod: int
    """``TPU`` resources Ray advertises on the pod, one Ray worker each: chips, or devices under TorchTPU."""


@dataclass(frozen=True)
class PoolView:
    name: str
    tpu_slice: TpuSlice
    min_slices: int
    max_slices: int
    capacity: str
    zone: str | None
    node_pools: tuple[str, ...]
    ray_group: RayGroup | None
    kueue: KueueAdmission | None = None
    """How Kueue reaches the pool (its flavor and quota), if it does."""

    @property
    def admission(self) -> str:
        """``Kueue + ProvisioningRequest``, ``Kueue`` or ``direct`` (a long-lived RayCluster, no queue)."""
        if self.kueue is None:
            return "direct"
        return "Kueue + ProvisioningRequest" if self.kueue.provisioned else "Kueue"

    @property
    def chips_per_slice(self) -> int:
        return self.tpu_slice.chips

    @property
    def max_chips(self) -> int:
        return self.max_slices * self.tpu_slice.chips

    @property
    def min_chips(self) -> int:
        return self.min_slices * self.tpu_slice.chips

    @property
    def slices_with_ray_workers(self) -> int:
        """Slices the worker group can cover at most: its max replicas, capped by the pool's slices."""
        return min(self.ray_group.max_replicas, self.max_slices) if self.ray_group else 0

    @property
    def ray_worker_pods_per_slice(self) -> int:
        """Ray worker pods on one slice, one per host (0 when no worker group targets this pool)."""
        return self.ray_group.num_of_hosts if self.ray_group else 0

    @property
    def ray_workers_per_pod(self) -> int:
        """Ray workers in one worker pod: one per ``TPU`` resource Ray advertises there (a chip, or a device of a
        tpu7x chip under TorchTPU)."""
        return self.ray_group.ray_tpu_per_pod if self.ray_group else 0

    @property
    def worker_unit(self) -> str:
        """What one Ray worker drives: ``chip``, or ``device`` where Ray counts two per chip."""
        return "device" if self.ray_group and self.ray_group.ray_tpu_per_pod != self.ray_group.tpu_per_pod else "chip"

    @property
    def ray_workers_per_slice(self) -> int:
        """Ray workers on one slice: its worker pods times the Ray workers each pod runs."""
        return self.ray_worker_pods_per_slice * self.ray_workers_per_pod

    @property
    def max_ray_worker_pods(self) -> int:
        return self.slices_with_ray_workers * self.ray_worker_pods_per_slice

    @property
    def max_ray_workers(self) -> int:
        """Most Ray workers the pool runs: worker pods times Ray workers per pod."""
        return self.slices_with_ray_workers * self.ray_workers_per_slice

    @property
    def chip_hours_per_day(self) -> tuple[int, int]:
        """(kept, at most): chip-hours a day with the pool at its minimum and at its maximum size."""
        return self.min_chips * HOURS_PER_DAY, self.max_chips * HOURS_PER_DAY


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def ray_workers_text(workers: int, pods: int, unit: str = "chip") -> str:
    """``"128 Ray workers (one per chip) on 32 pods"``: how the plan's files and summary name the two counts."""
    return f"{_plural(workers, 'Ray worker', 'Ray workers')} (one per {unit}) on {_plural(pods, 'pod', 'pods')}"


GKE_MAX_NODES_PER_CLUSTER = 15_000
"""https://cloud.google.com/kubernetes-engine/quotas: "Nodes per cluster: 15,000" (Standard clusters); a node
count above it is no node pool GKE creates, so no plan tpuray wrote."""


class PlanCountError(ValueError):
    """A node count in a plan that is no count of nodes (a fraction, infinity, a 400-digit number, text)."""


def _node_count(v: Any, where: str) -> int:
    """A node count read from a plan: None (unset) is 0; a whole number up to GKE's cluster maximum, else
    :class:`PlanCountError` naming the field (never a quiet 0, never an overflow further on)."""
    if v is None:
        return 0
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= GKE_MAX_NODES_PER_CLUSTER:
        big = isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**20
        shown = f"a {len(str(abs(v)))}-digit number" if big else one_line(repr(v))[:80]
        raise PlanCountError(
            f"{where} is {shown}: a node count is a whole number from 0 to {GKE_MAX_NODES_PER_CLUSTER:,} "
            "(GKE's nodes per cluster)"
        )
    return v


def declared_nodes(inputs: Mapping[str, Any], pool: str) -> tuple[int, int]:
    """(fewest, most) nodes a declared node pool's inputs give: the autoscaling totals (or per-zone limits times
    its zones), else its fixed node count in each zone."""
    auto = inputs.get("autoscaling") or {}
    zones = max(1, len(inputs.get("nodeLocations") or []))

    def count(key: str, where: Mapping[str, Any], prefix: str = "") -> int:
        return _node_count(where.get(key), f"node pool {one_line(repr(pool))}: {prefix}{key}")

    if auto:
        hi = count("totalMaxNodeCount", auto, "autoscaling.") or count("maxNodeCount", auto, "autoscaling.") * zones
        lo = count("totalMinNodeCount", auto, "autoscaling.") or count("minNodeCount", auto, "autoscaling.") * zones
        return lo, hi
    n = count("nodeCount" if inputs.get("nodeCount") is not None else "initialNodeCount", inputs)
    return n * zones, n * zones


def _int(v: Any, default: int = 0) -> int:
    n = as_int(v)
    return default if n is None else n


def ray_groups(resources: Iterable[Mapping[str, Any]]) -> list[RayGroup]:
    """Every TPU worker group of every RayCluster of a plan, and of every RayJob that brings its own cluster."""
    out: list[RayGroup] = []
    for r in resources:
        if r["type"] == RAY_CLUSTER:
            spec = r["inputs"].get("spec") or {}
        elif r["type"] == RAY_JOB:
            spec = (r["inputs"].get("spec") or {}).get("rayClusterSpec") or {}
        else:
            continue
        cluster = (r["inputs"].get("metadata") or {}).get("name") or r["name"]
        for g in spec.get("workerGroupSpecs") or []:
            pod = (g.get("template") or {}).get("spec") or {}
            tpu = 0
            for c in pod.get("containers") or []:
                res = c.get("resources") or {}
                tpu += _int(
                    (res.get("limits") or {}).get(TPU_RESOURCE) or (res.get("requests") or {}).get(TPU_RESOURCE)
                )
            if tpu == 0:
                continue
            selector = pod.get("nodeSelector") or {}
            out.append(
                RayGroup(
                    cluster=str(cluster),
                    name=str(g.get("groupName")),
                    pool=selector.get(POOL_LABEL),
                    replicas=_int(g.get("replicas")),
                    min_replicas=_int(g.get("minReplicas")),
                    max_replicas=_int(g.get("maxReplicas"), _int(g.get("replicas"))),
                    num_of_hosts=_int(g.get("numOfHosts"), 1),
                    tpu_per_pod=tpu,
                    ray_tpu_per_pod=_int((g.get("resources") or {}).get(RAY_TPU_RESOURCE), tpu),
                )
            )
    return out


def _node_pool_name(r: Mapping[str, Any]) -> str:
    return str(r["inputs"].get("name") or r["name"])


def pool_views(plan: StackPlan, resources: Sequence[Mapping[str, Any]]) -> list[PoolView]:
    """One view per planned slice pool, in config order."""
    groups = ray_groups(resources)
    admissions = kueue_admissions(resources)
    node_pools = [r for r in resources if r["type"] == NODE_POOL]
    views: list[PoolView] = []
    for planned in plan.pools:
        # joined on what the pool's plan says its objects carry: its nodes' pool label, its pods' node selector,
        # its worker group's name; what the program declared under those keys is what the view counts
        node_label = dict(planned.scheduling.node_labels)[POOL_LABEL]
        selected = dict(planned.scheduling.node_selector)[POOL_LABEL]
        mine = tuple(
            sorted(
                _node_pool_name(r)
                for r in node_pools
                if ((r["inputs"].get("nodeConfig") or {}).get("labels") or {}).get(POOL_LABEL) == node_label
            )
        )
        group = next((g for g in groups if g.pool == selected), None) or next(
            (g for g in groups if g.name == planned.group.name), None
        )
        pool = planned.slice_pool
        views.append(
            PoolView(
                name=pool.name,
                tpu_slice=pool.tpu_slice,
                min_slices=pool.min_slices,
                max_slices=pool.slices,
                capacity=pool.capacity,
                zone=pool.zone,
                node_pools=mine,
                ray_group=group,
                kueue=admissions.get(pool.name),
            )
        )
    return views


def tpu_chips_by_generation(resources: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Most TPU chips each generation's node pools can hold: max nodes x chips per VM, summed.

    Read from the node pools themselves (not the config) so a diff of two plans needs nothing else. Max nodes
    is the autoscaling maximum per zone times the pool's zones, else the static node count.
    """
    chips: dict[str, int] = {}
    for r in resources:
        if r["type"] != NODE_POOL:
            continue
        inputs = r["inputs"]
        machine = (inputs.get("nodeConfig") or {}).get("machineType")
        gen = generation_of_machine_type(machine)
        if gen is None:
            continue
        nodes = declared_nodes(inputs, str(r.get("name")))[1]
        chips[gen.name] = chips.get(gen.name, 0) + nodes * gen.machine_types[str(machine)]
    return dict(sorted(chips.items()))
