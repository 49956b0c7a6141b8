"""Throughput per dollar: tokens per second per chip, tokens per dollar, and two setups side by side.

Pure arithmetic, shared by the training summary (``tpuray.workloads.train``) and ``tpuray compare``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuray.components.catalog.data_file import DataFileError, read_json_file
from tpuray.components.catalog.safe_text import one_line

__all__ = ["CostFileError", "Setup", "comparison", "setup", "slice_usd_per_hour", "tokens_per_usd"]

SECONDS_PER_HOUR = 3600


class CostFileError(ValueError):
    """A plan's ``cost.json`` that cannot give the $/h asked for."""


def tokens_per_usd(tokens_per_s: float, usd_per_hour: float | None) -> float | None:
    """Tokens one dollar buys at this throughput; None when the price is unknown (never divided by $0)."""
    if usd_per_hour is None or usd_per_hour <= 0:
        return None
    return tokens_per_s * SECONDS_PER_HOUR / usd_per_hour


@dataclass(frozen=True)
class Setup:
    """A setup as a team states it: what it pays per hour and the tokens per second it trains."""

    name: str
    usd_per_hour: float
    tokens_per_s: float

    @property
    def tokens_per_usd(self) -> float:
        value = tokens_per_usd(self.tokens_per_s, self.usd_per_hour)
        assert value is not None  # a Setup is validated positive
        return value


def setup(name: str, usd_per_hour: object, tokens_per_s: object, flags: tuple[str, str]) -> Setup:
    """A :class:`Setup` from user input; ValueError naming the flag and the valid form for anything else."""
    values = []
    for flag, raw in zip(flags, (usd_per_hour, tokens_per_s), strict=True):
        try:
            v = float(str(raw))
        except ValueError:
            raise ValueError(f"{flag}: {raw!r} is not a number; give a positive number, e.g. 12.5") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{flag}: {raw!r} must be a positive finite number, e.g. 12.5")
        values.append(v)
    if not math.isfinite(values[1] * SECONDS_PER_HOUR / values[0]):
        raise ValueError(
            f"{flags[1]} {tokens_per_s!r} at {flags[0]} {usd_per_hour!r}: tokens per dollar overflows a float; give "
            "figures in a realistic range"
        )
    return Setup(name, values[0], values[1])


def _ratio(a: float, b: float) -> str:
    """``a / b`` to 3 decimals, or ``unknown`` when the quotient overflows (never ``inf`` or ``nan``)."""
    q = a / b
    return f"{q:.3f}" if math.isfinite(q) else "unknown"


def comparison(ours: Setup, theirs: Setup) -> str:
    """Both setups side by side, with the ratio ours / theirs of each figure."""
    figures = [
        ("$/h", ours.usd_per_hour, theirs.usd_per_hour, ",.2f"),
        ("tokens/s", ours.tokens_per_s, theirs.tokens_per_s, ",.0f"),
        ("tokens per $", ours.tokens_per_usd, theirs.tokens_per_usd, ",.0f"),
    ]
    names = one_line(ours.name), one_line(theirs.name)  # labels from the command line reach the terminal as text
    rows = [("", *names, "ratio")]
    rows += [(label, format(a, fmt), format(b, fmt), _ratio(a, b)) for label, a, b, fmt in figures]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows
    ]
    better = ours.tokens_per_usd / theirs.tokens_per_usd
    if math.isfinite(better):
        lines.append(f"{names[0]} trains {better:.2f}x the tokens per dollar of {names[1]}")
    else:
        lines.append(f"{names[0]} against {names[1]}: the ratio of tokens per dollar is unknown (it overflows a float)")
    return "\n".join(line.rstrip() for line in lines)


def slice_usd_per_hour(cost_file: Path, pool: str | None, chips: int) -> tuple[float | None, str, str]:
    """($/h of ``chips`` chips of ``pool``, its capacity type, how it was priced) from a plan's ``cost.json``.

    ``pool`` None takes the file's only pool. The $/h is None when the plan has the pool unpriced.
    """
    try:
        doc: Any = read_json_file(cost_file, what="--cost-json")
    except DataFileError as e:
        raise CostFileError(f"{e} (expected the cost.json tpuray plan writes)") from None
    pools = doc.get("pools") if isinstance(doc, Mapping) else None
    if not isinstance(pools, list) or not all(isinstance(p, Mapping) and "pool" in p for p in pools):
        raise CostFileError(f"{cost_file}: not a tpuray cost.json (no pools list); tpuray plan writes one")
    names = [str(p["pool"]) for p in pools]
    if pool is None and len(pools) != 1:
        raise CostFileError(f"{cost_file}: name the pool the job runs on; the plan has {', '.join(names) or 'none'}")
    index = next((i for i, p in enumerate(pools) if pool is None or p["pool"] == pool), None)
    if index is None:
        raise CostFileError(f"{cost_file}: no pool {pool!r} in the plan; it has {', '.join(names) or 'none'}")
    entry = pools[index]
    rate = entry.get("usd_per_chip_hour")
    capacity = str(entry.get("capacity"))
    if rate is None:
        return None, capacity, str(entry.get("unpriced") or "unpriced")
    field = f"pools[{index}].usd_per_chip_hour"
    # tpuray plan writes a positive finite price or null; anything else (a negative or infinite rate, text, a
    # boolean) would make a cost, and tokens per dollar, that no chip-hour has
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise CostFileError(
            f"{cost_file}: {field} is {str(rate)[:40]!r}; a price is a positive finite number (USD per chip-hour) "
            "or null for an unpriced pool"
        )
    usd = float(rate) * chips
    if not math.isfinite(usd):
        raise CostFileError(f"{cost_file}: {field} {rate!r} x {chips} chips overflows a float; not a price")
    source = (entry.get("source") or {}).get("url", "") if isinstance(entry.get("source"), Mapping) else ""
    return usd, capacity, f"${float(rate):.4g}/chip-h from {source}"
