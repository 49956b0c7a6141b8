"""One slice pool's scheduling contract: the labels and taints its nodes carry, and the node selector and
tolerations its pods (and its Kueue flavor) use to land there.

Pure Python. The node pools (``planning.node_pools``), the KubeRay worker group (``planning.kuberay``) and the Kueue
ResourceFlavor (``planning.kueue``) all read a pool's :class:`PoolScheduling`, so what a node offers and what a pod
asks for cannot drift apart. Built from the pool's config, its :class:`~tpuray.components.catalog.topology.TpuSlice`
and its capacity type's traits (``config.capacity``), once per pool, by its plan (``planning.pool_plan``), which
hands the one object to each of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    POD_TYPE_LABEL,
    POOL_LABEL,
    SLICE_LABEL,
    TPU_TAINT,
    Taint,
    Toleration,
)
from tpuray.components.config import SlicePoolConfig

__all__ = ["PoolScheduling"]


@dataclass(frozen=True)
class PoolScheduling:
    """Where one slice pool's pods run, from both sides."""

    pool: str
    node_labels: tuple[tuple[str, str], ...]
    """Labels tpuray puts on every node of the pool (each node pool adds its slice: :meth:`slice_node_labels`)."""
    node_taints: tuple[Taint, ...]
    """Taints tpuray declares on the pool's nodes: the TPU taint, then the capacity type's."""
    node_selector: tuple[tuple[str, str], ...]
    """What the pool's pods select, and the node labels of its Kueue flavor: the slice shape (GKE's labels) and
    the pool."""
    tolerations: tuple[Toleration, ...]
    """What the pool's pods and its Kueue flavor tolerate: every taint of :attr:`node_taints`, and those GKE puts
    on the capacity type's nodes."""

    @classmethod
    def of(cls, pool: SlicePoolConfig) -> PoolScheduling:
        s, cap = pool.tpu_slice, pool.capacity
        taints = (TPU_TAINT, *cap.node_taints)
        return cls(
            pool=pool.name,
            node_labels=((POOL_LABEL, pool.name), (POD_TYPE_LABEL, s.pod_type)),
            node_taints=taints,
            node_selector=(
                (GKE_ACCELERATOR_LABEL, s.gke_accelerator),
                (GKE_TOPOLOGY_LABEL, s.topology),
                (POOL_LABEL, pool.name),
            ),
            tolerations=(*(t.toleration() for t in taints), *cap.tolerations),
        )

    def slice_node_labels(self, slice_name: str) -> dict[str, str]:
        """The labels of the nodes of one node pool, which serves slice(s) named ``slice_name``."""
        return {**dict(self.node_labels), SLICE_LABEL: slice_name}

    def pod_node_selector(self) -> dict[str, str]:
        return dict(self.node_selector)

    def k8s_tolerations(self) -> list[dict[str, Any]]:
        return [t.k8s() for t in self.tolerations]
