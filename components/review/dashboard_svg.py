"""The dashboard's layout as a picture, drawn from the ``dashboard_json`` the program declared.

Each mosaic tile is a box at its grid position: a collapsible group (one per slice pool) as a titled band, a chart
as a box with its title and its PromQL query's metric names, so a reviewer sees in the PR which panels each pool
gets. Plain SVG, integer coordinates, same dashboard -> same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog.safe_text import xml_text as escape

__all__ = ["dashboard_tiles", "render_dashboard_svg"]

CELL_W = 24
"""Pixels per mosaic column (48 columns -> 1152 px)."""
CELL_H = 12
MARGIN = 16
TITLE_H = 28
_METRIC = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")


def dashboard_tiles(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The mosaic tiles of a ``Dashboard`` object (empty for another layout)."""
    tiles = (dashboard.get("mosaicLayout") or {}).get("tiles") or []
    return [t for t in tiles if isinstance(t, dict)]


def _metrics(widget: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for ds in (widget.get("xyChart") or {}).get("dataSets") or []:
        query = str((ds.get("timeSeriesQuery") or {}).get("prometheusQuery") or "")
        names += [n for n in _METRIC.findall(query) if n not in names]
    return names


def _clip(text: str, px: int) -> str:
    """Text cut to about ``px`` pixels at 11 px sans-serif (~6 px a character)."""
    room = max(px // 6, 4)
    return text if len(text) <= room else text[: room - 1] + "…"


def render_dashboard_svg(dashboard: Mapping[str, Any]) -> str:
    """The whole picture as an SVG document."""
    tiles = dashboard_tiles(dashboard)
    columns = int((dashboard.get("mosaicLayout") or {}).get("columns") or 48)
    rows = max((int(t.get("yPos", 0)) + int(t.get("height", 1)) for t in tiles), default=1)
    width = 2 * MARGIN + columns * CELL_W
    height = TITLE_H + 2 * MARGIN + rows * CELL_H
    body: list[str] = []
    groups = [t for t in tiles if "collapsibleGroup" in (t.get("widget") or {})]
    charts = [t for t in tiles if t not in groups]
    for t in groups:  # bands first, charts drawn over them
        x, y = MARGIN + int(t.get("xPos", 0)) * CELL_W, TITLE_H + MARGIN + int(t.get("yPos", 0)) * CELL_H
        w, h = int(t.get("width", 1)) * CELL_W, int(t.get("height", 1)) * CELL_H
        title = str((t.get("widget") or {}).get("title") or "")
        body.append(
            f'<g class="pool-row"><rect x="{x}" y="{y}" width="{w}" height="{h}" fill="#eef3f8" '
            f'stroke="#4e79a7"/><text x="{x + 6}" y="{y + CELL_H - 2}" font-size="11" font-weight="bold">'
            f"{escape(_clip(title, w - 12))}</text></g>"
        )
    for t in charts:
        widget = t.get("widget") or {}
        x, y = MARGIN + int(t.get("xPos", 0)) * CELL_W, TITLE_H + MARGIN + int(t.get("yPos", 0)) * CELL_H
        w, h = int(t.get("width", 1)) * CELL_W, int(t.get("height", 1)) * CELL_H
        pad = 4
        lines = [
            f'<g class="panel"><rect x="{x + pad}" y="{y + pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" '
            f'rx="3" fill="#ffffff" stroke="#999999"/>',
            f'<text x="{x + 2 * pad}" y="{y + pad + 16}" font-size="11" font-weight="bold">'
            f"{escape(_clip(str(widget.get('title') or ''), w - 4 * pad))}</text>",
        ]
        for i, name in enumerate(_metrics(widget)):
            lines.append(
                f'<text x="{x + 2 * pad}" y="{y + pad + 34 + 14 * i}" font-size="10" fill="#555555" '
                f'font-family="monospace">{escape(_clip(name, w - 4 * pad))}</text>'
            )
        lines.append("</g>")
        body.append("".join(lines))
    name = str(dashboard.get("displayName") or "dashboard")
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">'
    )
    header = (
        f'<text x="{MARGIN}" y="{MARGIN + 8}" font-size="14" font-weight="bold">{escape(name)}: '
        f"{len(groups)} slice pool row(s), {len(charts)} chart(s)</text>"
    )
    bg = f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
    return "\n".join([head, f"<title>{escape(name)}</title>", bg, header, *body, "</svg>"]) + "\n"
