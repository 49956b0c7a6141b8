"""Every slice shape of the catalog, and slice pool configs built from them (test helpers)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tpuray.components.catalog.topology import GENERATIONS, TpuSlice, generation, valid_topologies
from tpuray.components.config import SlicePoolConfig, StackConfig
from tpuray.components.planning.kuberay import RayClusterParams, TpuWorkerGroup
from tpuray.components.planning.kueue import KueueSpec, kueue_spec
from tpuray.components.planning.node_pools import NodePoolSpec, slice_pool_node_pools
from tpuray.components.planning.pool_plan import kueue_entries, pool_plans
from tpuray.components.planning.scheduling import PoolScheduling


def all_slices(per_generation: int | None = None) -> list[TpuSlice]:
    """Each (generation, topology, machine type) the catalog accepts, of each generation's ``per_generation``
    smallest topologies (all by default); 2x4 on v5e/v6e appears twice."""
    out = []
    for g in GENERATIONS:
        for topo in valid_topologies(g.name)[:per_generation]:
            for machine in g.machine_types:
                try:
                    out.append(TpuSlice.parse(g.name, topo, machine))
                except ValueError:
                    continue
    return out


ALL_SLICES = all_slices()

CAPACITIES: dict[str, dict[str, Any]] = {
    "on-demand": {"type": "on-demand"},
    "spot": {"type": "spot"},
    "reservation": {"type": "reservation", "name": "tpu-res"},
    "shared-reservation": {"type": "reservation", "name": "tpu-res", "project": "capacity-proj"},
    "flex-start": {"type": "flex-start", "maxRunDuration": "6h"},
    "queued": {"type": "queued"},
}


def pool(
    s: TpuSlice,
    capacity: str = "on-demand",
    slices: int = 1,
    name: str = "tpu",
    autoscaling: dict[str, Any] | None = None,
) -> SlicePoolConfig:
    dws = capacity in ("flex-start", "queued")
    auto = autoscaling if autoscaling is not None else {"enabled": True, "minSlices": 0}
    if dws:
        auto = {"enabled": True, "minSlices": 0}
    return SlicePoolConfig.model_validate(
        {
            "name": name,
            "generation": s.generation,
            "topology": s.topology,
            "machineType": s.machine_type,
            "slices": slices,
            "capacity": CAPACITIES[capacity],
            "autoscaling": auto,
        }
    )


def supported(s: TpuSlice, capacity: str) -> bool:
    """Flex-start capacity (with or without queued provisioning) does not serve every generation (TPU v4)."""
    return capacity not in ("flex-start", "queued") or generation(s.generation).flex_start


slices_st = st.sampled_from(ALL_SLICES)
capacity_st = st.sampled_from(sorted(CAPACITIES))
slice_capacity_st = st.tuples(slices_st, capacity_st).filter(lambda sc: supported(*sc))
"""A slice shape and a capacity type that serves it."""


def ray_params(*groups: TpuWorkerGroup, **overrides: Any) -> RayClusterParams:
    """A RayCluster's parameters as a test writes them: the given worker groups, everything else fixed."""
    fields: dict[str, Any] = {
        "name": "tpu-cluster",
        "namespace": "ray",
        "ray_version": "2.60.0",
        "head_image": "rayproject/ray:2.60.0-py311",
        "worker_image": "example.test/worker:1",
        "service_account": "ray",
        "worker_service_account": "ray-worker",
        "head_cpu": "4",
        "head_memory": "16Gi",
        "worker_cpu": "8",
        "worker_memory": "64Gi",
        "checkpoint_mount_path": "/checkpoints",
    }
    return RayClusterParams(groups=groups, **{**fields, **overrides})


def worker_group(p: SlicePoolConfig) -> TpuWorkerGroup:
    """The KubeRay worker group of a slice pool with no stack around it, on the pool's own scheduling."""
    return TpuWorkerGroup.from_pool(p, PoolScheduling.of(p))


def node_pools(p: SlicePoolConfig, zone: str | None, cluster: str) -> list[NodePoolSpec]:
    """The node pools of a slice pool with no stack around it, on the pool's own scheduling."""
    return slice_pool_node_pools(p, zone, cluster, scheduling=PoolScheduling.of(p))


def kueue_of(cfg: StackConfig, labels: dict[str, str] | None = None) -> KueueSpec:
    """The Kueue objects of a stack, from its pool plans (as ``plan_stack`` makes them, with ``labels``)."""
    return kueue_spec(cfg, kueue_entries(pool_plans(cfg)), labels)


def kueue_objects(plan: KueueSpec, kind: str) -> list[dict[str, Any]]:
    """The Kueue objects of one ``kind`` (``ClusterQueue``, ``ResourceFlavor``, ...) in ``plan``."""
    return [o for o in plan.objects if o["kind"] == kind]
