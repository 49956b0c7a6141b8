"""What a plan's Kueue objects grant: per slice pool and per TPU generation, read from the declared resources.

Pure Python. Like the chip counts of :mod:`~tpuray.components.review.pool_views`, these come from the resources
themselves (ResourceFlavors, the ClusterQueue), so a diff of two ``plan.json`` files needs nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import GKE_ACCELERATOR_LABEL, POOL_LABEL, TPU_RESOURCE
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.catalog.wire import as_int
from tpuray.components.review.resource_types import CLUSTER_QUEUE, RESOURCE_FLAVOR

__all__ = ["CLUSTER_QUEUE", "RESOURCE_FLAVOR", "KueueAdmission", "kueue_admissions", "tpu_quota_by_generation"]


@dataclass(frozen=True)
class KueueAdmission:
    """How Kueue reaches one slice pool: its flavor, the chips the queue grants it, its admission checks."""

    pool: str
    flavor: str
    cluster_queue: str
    chips: int
    admission_checks: tuple[str, ...]

    @property
    def provisioned(self) -> bool:
        """Admitted through a (ProvisioningRequest) admission check: nodes appear only once it passes."""
        return bool(self.admission_checks)


def _flavors(resources: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in resources:
        if r["type"] == RESOURCE_FLAVOR:
            name = str((r["inputs"].get("metadata") or {}).get("name") or r["name"])
            out[name] = dict(((r["inputs"].get("spec") or {}).get("nodeLabels")) or {})
    return out


def _tpu_quotas(resources: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """(cluster queue, flavor, google.com/tpu quota, admission checks) of every flavor of every ClusterQueue."""
    out = []
    for r in resources:
        if r["type"] != CLUSTER_QUEUE:
            continue
        spec = r["inputs"].get("spec") or {}
        cq = str((r["inputs"].get("metadata") or {}).get("name") or r["name"])
        checks = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        for group in spec.get("resourceGroups") or []:
            for f in group.get("flavors") or []:
                chips = sum(
                    (as_int(q.get("nominalQuota")) or 0)
                    for q in f.get("resources") or []
                    if q.get("name") == TPU_RESOURCE
                )
                mine = tuple(str(c["name"]) for c in checks if f["name"] in (c.get("onFlavors") or [f["name"]]))
                out.append((cq, str(f["name"]), chips, mine))
    return out


def kueue_admissions(resources: Iterable[Mapping[str, Any]]) -> dict[str, KueueAdmission]:
    """By slice pool (the flavor's ``tpuray.io/pool`` label): the pools a plan reaches through Kueue."""
    resources = list(resources)
    labels = _flavors(resources)
    out: dict[str, KueueAdmission] = {}
    for cq, flavor, chips, checks in _tpu_quotas(resources):
        pool = labels.get(flavor, {}).get(POOL_LABEL)
        if pool is not None:
            out[str(pool)] = KueueAdmission(str(pool), flavor, cq, chips, checks)
    return out


def tpu_quota_by_generation(resources: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``google.com/tpu`` quota of all ClusterQueues by TPU generation (the flavor's accelerator label)."""
    resources = list(resources)
    labels = _flavors(resources)
    by_accel = {g.gke_accelerator: g.name for g in GENERATIONS}
    out: dict[str, int] = {}
    for _, flavor, chips, _ in _tpu_quotas(resources):
        gen = by_accel.get(str(labels.get(flavor, {}).get(GKE_ACCELERATOR_LABEL)))
        if gen is not None:
            out[gen] = out.get(gen, 0) + chips
    return dict(sorted(out.items()))
