"""The control plane runs a GKE version that serves the stack's TPU generations and capacity types."""

from __future__ import annotations

from tpuray.components.catalog.gke_versions import gke_version_key
from tpuray.components.catalog.topology import MIN_GKE_VERSION, generation
from tpuray.components.config import StackConfig
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_GKE_TPU, SRC_TPU7X

__all__ = ["check_gke_version"]


def _gke_key(git_version: str) -> tuple[int, ...] | None:
    try:
        return gke_version_key(git_version.removeprefix("v").split("+", 1)[0])
    except ValueError:
        return None


def _gke_minimums(cfg: StackConfig) -> list[tuple[str, str, str, str]]:
    """(check id, what needs it, minimum, source) for everything the stack runs."""
    out: list[tuple[str, str, str, str]] = []
    for gen in dict.fromkeys(p.generation for p in cfg.slice_pools):
        need = generation(gen).min_gke_version or MIN_GKE_VERSION
        out.append((f"gke-version.{gen}", f"TPU {gen}", need, SRC_TPU7X if gen == "tpu7x" else SRC_GKE_TPU))
    for m in dict.fromkeys(p.capacity.gke_minimum for p in cfg.slice_pools if p.capacity.gke_minimum):
        out.append((f"gke-version.{m.feature}", m.what, m.version, m.source))
    return out


def check_gke_version(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    have = _gke_key(objs.server_version)
    results = []
    for check_id, what, need, source in _gke_minimums(cfg):
        fact = f"{what} needs GKE >= {need}; the control plane runs {objs.server_version}"
        fix = f"upgrade the control plane and node pools to {need} or later (gcloud container clusters upgrade)"
        if have is None:
            results.append(CheckResult(check_id, "warn", f"{fact} (not a GKE version: unknown)", source, fix))
        else:
            ok = have >= gke_version_key(need)
            results.append(CheckResult(check_id, "pass" if ok else "fail", fact, source, fix))
    return results
