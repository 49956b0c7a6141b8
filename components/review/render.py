"""The files of a plan directory, as text: ``plan.json``, ``manifests/*.yaml``, ``topology.md``, and the short
summary table ``tpuray plan`` prints. Pure functions of the collected resources; no Pulumi.

Everything here is byte-stable: JSON with sorted keys, YAML with sorted keys, resources sorted by URN.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tpuray.components.review.pool_views import PoolView, ray_workers_text
from tpuray.components.review.rule_types import Violation

__all__ = ["FORMAT", "manifest_files", "plan_json", "summary_table", "topology_markdown"]

FORMAT = "tpuray-plan/1"

_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has its bindings (https://github.com/yaml/pyyaml: "fast LibYAML-based parser and
emitter"): the same bytes as ``yaml.safe_dump``, about 4x faster on the RayJob and Kueue objects that grow with every
pool. Without the bindings the pure-Python emitter writes those same bytes, only slower."""


def plan_json(run: Mapping[str, Any], violations: Sequence[Violation], warnings: Sequence[Violation] = ()) -> str:
    """``plan.json``: the run (project, stack, config, resources, outputs) plus the policy result (advisory
    findings under ``warnings``, only when there are some)."""
    doc = {
        "format": FORMAT,
        **run,
        "violations": [{"rule": v.rule, "urn": v.urn, "message": v.message} for v in violations],
    }
    if warnings:
        doc["warnings"] = [{"rule": v.rule, "urn": v.urn, "message": v.message} for v in warnings]
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-")


def manifest_files(resources: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{file name: YAML}`` for every Kubernetes object of the plan (anything with apiVersion and kind).

    Names are ``<kind>-<namespace>-<name>.yaml``; objects without ``metadata.name`` get the Pulumi name, as a
    plan has no random suffix to add.
    """
    files: dict[str, str] = {}
    for r in resources:
        if not r["type"].startswith("kubernetes:"):
            continue
        obj = dict(r["inputs"])
        if "apiVersion" not in obj or "kind" not in obj:
            continue
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("name", r["name"])
        obj["metadata"] = meta
        parts = [str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])]
        base = _slug("-".join(p for p in parts if p))
        name = f"{base}.yaml"
        if name in files:  # same kind/namespace/name from two providers: keep both, told apart by resource name
            name = f"{base}--{_slug(r['name'])}.yaml"
        files[name] = yaml.dump(obj, Dumper=_DUMPER, sort_keys=True, default_flow_style=False, allow_unicode=True)
    return dict(sorted(files.items()))


def _bounds(dims: tuple[int, int, int]) -> str:
    return ",".join(map(str, dims))


def _n(x: int) -> str:
    return f"{x:,}"


def topology_markdown(stack: str, pools: Sequence[PoolView], picture: str) -> str:
    lines = [
        f"# TPU topology of stack `{stack}`",
        "",
        "| pool | slice | slices (kept-max) | hosts/slice | chips/host | chips (max) | Ray worker pods (max) | "
        "Ray workers, one per chip (max) | capacity | chip-hours/day (kept-max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pools:
        s = p.tpu_slice
        lo, hi = p.chip_hours_per_day
        lines.append(
            f"| {p.name} | {s.generation} {s.topology} ({s.pod_type}) | {p.min_slices}-{p.max_slices} | {s.hosts} | "
            f"{s.chips_per_host} | {_n(p.max_chips)} | {_n(p.max_ray_worker_pods)} | {_n(p.max_ray_workers)} | "
            f"{p.capacity} | {_n(lo)}-{_n(hi)} |"
        )
    total_lo = sum(p.chip_hours_per_day[0] for p in pools)
    total_hi = sum(p.chip_hours_per_day[1] for p in pools)
    lines += [
        f"| **total** | | | | | {_n(sum(p.max_chips for p in pools))} | "
        f"{_n(sum(p.max_ray_worker_pods for p in pools))} | {_n(sum(p.max_ray_workers for p in pools))} | | "
        f"{_n(total_lo)}-{_n(total_hi)} |",
        "",
        f"![topology of {stack}]({picture})",
        "",
    ]
    for p in pools:
        s = p.tpu_slice
        group = p.ray_group
        lines += [
            f"## {p.name}",
            "",
            f"- slice: {s.generation} `{s.topology}` = {s.chips} chips on {s.hosts} x `{s.machine_type}` "
            f"(host bounds {_bounds(s.host_bounds)}, chips per host {_bounds(s.chips_per_host_bounds)})",
            f"- placement: {s.placement}; zone: {p.zone or '(cluster default)'}; capacity: {p.capacity}",
            f"- node pools: {', '.join(f'`{n}`' for n in p.node_pools) or '(none found in the plan)'}",
            _admission_line(p),
            (
                f"- Ray worker group `{group.name}` in RayCluster `{group.cluster}`: {group.num_of_hosts} pod(s) per "
                f"slice x {group.tpu_per_pod} chips = {p.ray_workers_per_slice} Ray workers "
                f"(one per {p.worker_unit}) per slice, replicas {group.min_replicas}-{group.max_replicas}"
                if group
                else "- Ray worker group: none targets this pool"
            ),
            "",
        ]
    return "\n".join(lines)


def _admission_line(p: PoolView) -> str:
    k = p.kueue
    if k is None:
        return "- admission: direct (no Kueue queue reaches this pool)"
    checks = f", admission check {', '.join(f'`{c}`' for c in k.admission_checks)}" if k.admission_checks else ""
    return (
        f"- admission: {p.admission}: flavor `{k.flavor}` of ClusterQueue `{k.cluster_queue}`, "
        f"{_n(k.chips)} chips of quota{checks}"
    )


def summary_table(stack: str, resources: Sequence[Mapping[str, Any]], pools: Sequence[PoolView]) -> str:
    """The few lines ``tpuray plan`` prints."""
    rows = [("pool", "slice", "slices", "hosts", "chips", "admission", "Ray workers (max)")]
    for p in pools:
        s = p.tpu_slice
        rows.append(
            (
                p.name,
                f"{s.generation} {s.topology}",
                f"{p.min_slices}-{p.max_slices}",
                str(p.max_slices * s.hosts),
                str(p.max_chips),
                p.admission,
                ray_workers_text(p.max_ray_workers, p.max_ray_worker_pods, p.worker_unit),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    kinds = Counter(r["type"].rsplit(":", 1)[-1] for r in resources)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return "\n".join([f"stack {stack}: {len(resources)} resources ({counts})", *table])
