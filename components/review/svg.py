"""The topology picture of a plan: one row per slice pool, slices as boxes of hosts, hosts as grids of chips,
a dot on each chip that has a Ray worker (one per runtime device: one per chip, two on a tpu7x chip under
TorchTPU). Plain SVG written directly (no plotting dependency), integer coordinates only so the same plan always
gives the same bytes.

Layout: a slice's hosts are laid out by its host bounds (x across, y down, z layers side by side); a host's
chips by its chips-per-host bounds. Slices beyond the pool's minimum (autoscaled away when idle) are dashed.
A host's Ray worker pod has as many Ray workers as the pod requests chips, so the first that many chips of a
host get a dot; slices the worker group cannot reach (beyond its max replicas) and pools without a worker
group get none.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpuray.components.catalog.safe_text import xml_text as escape
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.review.pool_views import PoolView, ray_workers_text

__all__ = ["render_svg"]

CHIP = 10
"""Even, so a chip's centre (where its Ray worker's dot goes) is a whole pixel."""
WORKER_R = 2
CHIP_GAP = 2
HOST_PAD = 4
HOST_GAP = 4
SLICE_PAD = 8
SLICE_GAP = 12
ROW_GAP = 26
LABEL_H = 34
MARGIN = 16
MAX_SLICES_DRAWN = 8
"""Slices drawn per pool; the rest are summarised as text so a 64-slice pool stays readable."""

PALETTE = (
    "#4e79a7",
    "#59a14f",
    "#e15759",
    "#f28e2b",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
"""Tableau 10, in the order the catalog's generations take it; a generation added to the catalog gets the next."""
COLORS = {g.name: PALETTE[i % len(PALETTE)] for i, g in enumerate(GENERATIONS)}
"""Each generation's colour, by its place in the catalog (:data:`tpuray.components.catalog.topology.GENERATIONS`)."""


def _host_size(pool: PoolView) -> tuple[int, int]:
    cx, cy, _ = pool.tpu_slice.chips_per_host_bounds
    w = 2 * HOST_PAD + cx * CHIP + (cx - 1) * CHIP_GAP
    h = 2 * HOST_PAD + cy * CHIP + (cy - 1) * CHIP_GAP
    return w, h


def _host_grid(pool: PoolView) -> tuple[int, int]:
    """(columns, rows) of hosts in one slice box: x times z layers across, y down."""
    hx, hy, hz = pool.tpu_slice.host_bounds
    return hx * hz, hy


def _slice_size(pool: PoolView) -> tuple[int, int]:
    hw, hh = _host_size(pool)
    cols, rows = _host_grid(pool)
    return 2 * SLICE_PAD + cols * hw + (cols - 1) * HOST_GAP, 2 * SLICE_PAD + rows * hh + (rows - 1) * HOST_GAP


def _slice(pool: PoolView, index: int, x: int, y: int) -> list[str]:
    s = pool.tpu_slice
    sw, sh = _slice_size(pool)
    hw, hh = _host_size(pool)
    color = COLORS[s.generation]
    dashed = ' stroke-dasharray="5,3"' if index >= pool.min_slices else ""
    out = [
        f'<g class="slice" data-pool="{escape(pool.name)}" data-slice="{index}">',
        f'<rect x="{x}" y="{y}" width="{sw}" height="{sh}" rx="6" fill="none" stroke="{color}" '
        f'stroke-width="2"{dashed}/>',
    ]
    hx, hy, hz = s.host_bounds
    cx, cy, _ = s.chips_per_host_bounds
    has_workers = index < pool.slices_with_ray_workers
    pods = pool.ray_worker_pods_per_slice if has_workers else 0
    workers_per_pod = pool.ray_workers_per_pod
    host = 0
    for z in range(hz):
        for j in range(hy):
            for i in range(hx):
                col = z * hx + i
                px = x + SLICE_PAD + col * (hw + HOST_GAP)
                py = y + SLICE_PAD + j * (hh + HOST_GAP)
                out.append(
                    f'<rect class="host" x="{px}" y="{py}" width="{hw}" height="{hh}" rx="2" fill="#f4f4f4" '
                    f'stroke="#999999"/>'
                )
                chip = 0
                for b in range(cy):
                    for a in range(cx):
                        qx = px + HOST_PAD + a * (CHIP + CHIP_GAP)
                        qy = py + HOST_PAD + b * (CHIP + CHIP_GAP)
                        out.append(
                            f'<rect class="chip" x="{qx}" y="{qy}" width="{CHIP}" height="{CHIP}" fill="{color}"/>'
                        )
                        if host < pods and chip < workers_per_pod:
                            out.append(
                                f'<circle class="ray-worker" cx="{qx + CHIP // 2}" cy="{qy + CHIP // 2}" '
                                f'r="{WORKER_R}" fill="#222222"/>'
                            )
                        chip += 1
                host += 1
    out.append("</g>")
    return out


def render_svg(stack: str, pools: Sequence[PoolView]) -> str:
    """The whole picture as an SVG document."""
    body: list[str] = []
    y = MARGIN
    width = 420
    for pool in pools:
        s = pool.tpu_slice
        title = (
            f"{pool.name}: {s.generation} {s.topology} ({s.pod_type}), {pool.min_slices}-{pool.max_slices} slice(s) "
            f"x {s.hosts} host(s) x {s.chips_per_host} chips, {pool.capacity}, via {pool.admission}; "
            f"{ray_workers_text(pool.max_ray_workers, pool.max_ray_worker_pods, pool.worker_unit)}"
        )
        body.append(f'<text x="{MARGIN}" y="{y + 14}" font-size="13" font-weight="bold">{escape(title)}</text>')
        y += LABEL_H - 10
        sw, sh = _slice_size(pool)
        drawn = min(pool.max_slices, MAX_SLICES_DRAWN)
        x = MARGIN
        for i in range(drawn):
            body.extend(_slice(pool, i, x, y))
            x += sw + SLICE_GAP
        if pool.max_slices > drawn:
            body.append(
                f'<text x="{x}" y="{y + sh // 2}" font-size="12">+{pool.max_slices - drawn} more slice(s)</text>'
            )
            x += 130
        width = max(width, x + MARGIN)
        y += sh + ROW_GAP
    legend = (
        "chips are squares, hosts (GKE nodes) grey boxes, slices outlined (dashed: autoscaled, not kept); "
        "a dot marks a chip's Ray worker (one per chip; one Ray worker pod per host)"
    )
    body.append(f'<text x="{MARGIN}" y="{y + 4}" font-size="11" fill="#555555">{escape(legend)}</text>')
    height = y + MARGIN
    width = max(width, 6 * len(legend) + 2 * MARGIN)  # ~6 px per character at 11 px
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">'
    )
    title = f"<title>tpuray topology: stack {escape(stack)}</title>"
    bg = f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
    return "\n".join([head, title, bg, *body, "</svg>"]) + "\n"
