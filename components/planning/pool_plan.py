"""One slice pool's plan: every piece of the stack that belongs to one pool, made once, from one place.

Pure Python; imports no Pulumi. :func:`pool_plan` turns a :class:`~tpuray.components.config.SlicePoolConfig` (with
the :class:`~tpuray.components.config.StackConfig` around it: the zone, the cluster's name, the Ray sizes) into a
:class:`PoolPlan`. Its :class:`~tpuray.components.planning.scheduling.PoolScheduling` is computed here and only
here; the node pools (``planning.node_pools``), the KubeRay worker group (``planning.kuberay``) and the Kueue
flavor and quota (``planning.kueue``) are all made from it, so what the nodes offer and what the pods and the
flavor ask for cannot drift apart. The stack plan (``planning.stack_plan``) builds the RayCluster, the ephemeral
job's cluster and the Kueue objects from the pool plans; ``TpuSlicePool`` declares :attr:`PoolPlan.slice_pool`.

Not here, because they are not made per pool: the dashboard's rows (one per slice *shape*: pools of one shape share
a row, ``planning.dashboard``) and the cost (read back from the declared node pools of ``plan.json``, so that a
plan directory or a git ref needs no config: ``review.cost``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import SlicePoolConfig, StackConfig
from tpuray.components.planning.component_args import SlicePoolPlan
from tpuray.components.planning.drain import DrainPlan
from tpuray.components.planning.kuberay import TpuWorkerGroup
from tpuray.components.planning.kueue import PoolKueue, pool_kueue
from tpuray.components.planning.node_pools import NodePoolSpec, slice_pool_node_pools
from tpuray.components.planning.scheduling import PoolScheduling

__all__ = ["PoolPlan", "kueue_entries", "pool_plan", "pool_plans"]


@dataclass(frozen=True)
class PoolPlan:
    """One slice pool, planned: where its pods run, its node pools, its Ray worker group, its Kueue entries."""

    scheduling: PoolScheduling
    """Its nodes' labels and taints, and its pods' (and its flavor's) node selector and tolerations."""
    slice_pool: SlicePoolPlan
    """What ``TpuSlicePool`` declares: the node pools, with the pool's summary."""
    group: TpuWorkerGroup
    """Its KubeRay worker group, autoscaling from its kept slices to all of them. Made for every pool, since an
    ephemeral job may train on a pool the shared cluster leaves out (:attr:`worker_group`, :meth:`job_group`)."""
    in_shared_cluster: bool
    """The shared RayCluster has a group for it (its capacity type's ``in_shared_cluster``: not queued pools)."""
    kueue: PoolKueue | None
    """Its ResourceFlavor, ClusterQueue quota and (queued provisioning) admission check; None where the stack has
    no Kueue (``kueue.enabled`` off)."""

    @property
    def name(self) -> str:
        return self.slice_pool.name

    @property
    def tpu_slice(self) -> TpuSlice:
        return self.slice_pool.tpu_slice

    @property
    def node_pools(self) -> tuple[NodePoolSpec, ...]:
        return self.slice_pool.node_pools

    @property
    def drain(self) -> DrainPlan:
        """How its worker pods leave (its capacity type's grace period and drain deadline, ``planning.drain``)."""
        return self.group.drain

    @property
    def worker_group(self) -> TpuWorkerGroup | None:
        """Its group in the shared RayCluster, or None where that cluster leaves the pool out."""
        return self.group if self.in_shared_cluster else None

    def job_group(self) -> TpuWorkerGroup:
        """The group of an ephemeral job's own cluster: every slice, at a fixed size (Kueue admits a whole
        cluster: no in-tree autoscaling without workload slicing)."""
        slices = self.slice_pool.slices
        return replace(self.group, min_replicas=slices, max_replicas=slices)


def pool_plan(cfg: StackConfig, pool: SlicePoolConfig, resource_labels: Mapping[str, str] | None = None) -> PoolPlan:
    """The plan of ``pool``, one of ``cfg``'s slice pools; ``resource_labels`` are the GCP labels of its node pools
    (the stack's, ``stack_plan.resource_labels``)."""
    scheduling = PoolScheduling.of(pool)
    zone = cfg.pool_zone(pool)
    node_pools = slice_pool_node_pools(pool, zone, cfg.cluster.name, cfg.startup.images, scheduling=scheduling)
    return PoolPlan(
        scheduling=scheduling,
        slice_pool=SlicePoolPlan(
            name=pool.name,
            tpu_slice=pool.tpu_slice,
            slices=pool.slices,
            min_slices=pool.min_slices,
            capacity=pool.capacity.type,
            zone=zone,
            node_pools=tuple(node_pools),
            auto_upgrade=pool.auto_upgrade,
            project=cfg.project,
            location=cfg.location,
            resource_labels=dict(resource_labels or {}),
        ),
        group=TpuWorkerGroup.from_pool(pool, scheduling),
        in_shared_cluster=pool.capacity.in_shared_cluster,
        kueue=pool_kueue(cfg, pool, scheduling) if cfg.kueue.enabled else None,
    )


def kueue_entries(pools: Sequence[PoolPlan]) -> list[PoolKueue]:
    """The pools' Kueue entries, in their order, for :func:`~tpuray.components.planning.kueue.kueue_spec`; a
    ValueError where the stack has no Kueue (they have none)."""
    entries = [p.kueue for p in pools if p.kueue is not None]
    if len(entries) != len(pools):
        raise ValueError("kueue.enabled is off: the slice pools have no Kueue flavor or quota")
    return entries


def pool_plans(cfg: StackConfig, resource_labels: Mapping[str, str] | None = None) -> tuple[PoolPlan, ...]:
    """The plan of every slice pool of ``cfg``, in config order."""
    return tuple(pool_plan(cfg, p, resource_labels) for p in cfg.slice_pools)
