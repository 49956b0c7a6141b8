"""What a plan costs per hour: each TPU pool at its autoscaling minimum and maximum, the stack, the month, the
budget rule, and the change between two plans.

Read from the node pools the program declared (machine type, node counts, spot/reservation/flex-start/queued
settings, location), the same way the diff counts chips, so a plan directory or a git ref needs nothing else;
prices come from :mod:`tpuray.components.pricing` and the stack's ``cost`` config (in the plan's config).
Written to ``cost.json`` and ``cost.md`` beside ``plan.json``, which stays unchanged.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.data_file import loads_json
from tpuray.components.catalog.names import POOL_LABEL
from tpuray.components.catalog.safe_text import md_code, md_text, one_line
from tpuray.components.catalog.topology import generation_of_machine_type
from tpuray.components.catalog.wire import get_path
from tpuray.components.config import NAMESPACE, CostConfig, WorkloadConfig
from tpuray.components.config.capacity import CommitmentTerm, capacity_of_node_pool
from tpuray.components.pricing.table import (
    HOURS_PER_MONTH,
    PriceRow,
    SuppliedRate,
    Unpriced,
    chip_hour_price,
    price_basis,
)
from tpuray.components.review.pool_views import declared_nodes
from tpuray.components.review.resource_types import NODE_POOL, RAY_SERVICE
from tpuray.components.review.rule_types import Resource
from tpuray.components.review.serving_rules import served_groups

__all__ = [
    "BUDGET_RULE",
    "CostChange",
    "CostDiff",
    "ElasticCost",
    "PoolCost",
    "ServingCost",
    "StackCost",
    "budget_check",
    "budget_violation",
    "cost_config_of",
    "cost_diff_markdown",
    "cost_diff_of",
    "cost_json",
    "cost_markdown",
    "cost_of_plan",
    "pools_summary",
]

BUDGET_RULE = "cost-budget"
FORMAT = "tpuray-cost/1"


@dataclass(frozen=True)
class PoolCost:
    """One slice pool: its chips at the autoscaling minimum and maximum, and the price of a chip-hour."""

    pool: str
    generation: str
    region: str
    capacity: str
    min_chips: int
    max_chips: int
    price: PriceRow | Unpriced
    commitment: str | None = None
    """The commitment term (``1y``, ``3y``) of a pool paying a committed price, which its price is keyed by."""

    @property
    def capacity_text(self) -> str:
        """``reservation 3y``: the capacity type, with the term where the price depends on it."""
        return f"{self.capacity} {self.commitment}" if self.commitment else self.capacity

    def _usd(self, chips: int) -> float | None:
        return chips * self.price.usd_per_chip_hour if isinstance(self.price, PriceRow) else None

    @property
    def usd_per_hour_min(self) -> float | None:
        return self._usd(self.min_chips)

    @property
    def usd_per_hour_max(self) -> float | None:
        return self._usd(self.max_chips)


@dataclass(frozen=True)
class ServingCost:
    """A RayService's TPU group: its slices steady and at the upgrade's peak, at its pool's chip-hour price."""

    service: str
    pool: str
    strategy: str
    slices: int
    peak_slices: int
    chips_per_slice: int | None
    price: PriceRow | Unpriced | None
    """Its pool's price; None where the plan declares no node pool of that pool (unknown, not $0)."""

    def _usd(self, slices: int) -> float | None:
        if not isinstance(self.price, PriceRow) or self.chips_per_slice is None:
            return None
        return slices * self.chips_per_slice * self.price.usd_per_chip_hour

    @property
    def usd_per_hour(self) -> float | None:
        return self._usd(self.slices)

    @property
    def usd_per_hour_peak(self) -> float | None:
        return self._usd(self.peak_slices)


@dataclass(frozen=True)
class ElasticCost:
    """The training job's elastic bounds (``workload.elastic``) on its pool, and what each size costs to run."""

    pool: str
    min_slices: int
    max_slices: int
    chips_per_slice: int
    price: PriceRow | Unpriced | None
    """Its pool's price; None where the plan declares no node pool of that pool (unknown, not $0)."""

    @property
    def sizes(self) -> range:
        return range(self.min_slices, self.max_slices + 1)

    @property
    def billed_whole(self) -> bool:
        """A committed (reservation) price is paid for the reserved chips whether a slice runs or not."""
        return self.price is not None and self.price.basis == "committed"

    def usd_per_hour(self, slices: int) -> float | None:
        """The chips of ``slices`` running slices at the pool's price; None when unpriced."""
        if not isinstance(self.price, PriceRow):
            return None
        return slices * self.chips_per_slice * self.price.usd_per_chip_hour


@dataclass(frozen=True)
class StackCost:
    stack: str
    pools: tuple[PoolCost, ...]
    budget_usd_per_hour: float | None = None
    serving: tuple[ServingCost, ...] = ()
    """The RayServices' steady state and upgrade peak (their pools' cost is in ``pools`` already)."""
    elastic: ElasticCost | None = None
    """The training job's size between its elastic bounds (None: the job has a fixed size)."""

    @property
    def unpriced(self) -> tuple[PoolCost, ...]:
        return tuple(p for p in self.pools if isinstance(p.price, Unpriced))

    def _total(self, values: Iterable[float | None]) -> float | None:
        vals = list(values)
        return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)

    @property
    def usd_per_hour_min(self) -> float | None:
        """The stack at every pool's minimum; None when a pool is unpriced (a partial sum would mislead)."""
        return self._total(p.usd_per_hour_min for p in self.pools)

    @property
    def usd_per_hour_max(self) -> float | None:
        return self._total(p.usd_per_hour_max for p in self.pools)


def _region(inputs: Mapping[str, Any]) -> str:
    where = (inputs.get("nodeLocations") or [None])[0] or inputs.get("location") or ""
    return re.sub(r"-[a-z]$", "", str(where))  # a zone (us-west4-a) is in the region before its last letter


def _capacity(inputs: Mapping[str, Any]) -> str:
    """The capacity type a node pool was declared with (as ``planning/node_pools`` writes it)."""
    return capacity_of_node_pool(inputs)


def _supplied(cost: CostConfig) -> tuple[SuppliedRate, ...]:
    return tuple(
        SuppliedRate(
            r.generation, r.capacity, r.usd_per_chip_hour, r.source, f"stack config cost.rates[{i}]", r.commitment
        )
        for i, r in enumerate(cost.rates)
    )


def cost_config_of(plan: Mapping[str, Any]) -> CostConfig:
    """The ``cost`` section of the config a plan was made from (defaults when the stack has none)."""
    raw = (plan.get("config") or {}).get(f"{NAMESPACE}:cost")
    if raw is None:
        return CostConfig()
    # bounded: a hand-made plan's config string can nest past Python's recursion limit
    value = loads_json(raw, what="its JSON text") if isinstance(raw, str) else raw
    return CostConfig.model_validate(value, by_name=False)


def commitments_of(plan: Mapping[str, Any]) -> dict[str, str]:
    """The commitment term (``capacity.commitment``) of each reservation pool of the config a plan was made from."""
    raw = (plan.get("config") or {}).get(f"{NAMESPACE}:slicePools")
    pools = loads_json(raw, what="its JSON text") if isinstance(raw, str) else raw
    out: dict[str, str] = {}
    for i, p in enumerate(pools if isinstance(pools, list) else []):
        capacity = p.get("capacity") if isinstance(p, Mapping) else None
        term = capacity.get("commitment") if isinstance(capacity, Mapping) else None
        if term is None:
            continue
        if term not in typing.get_args(CommitmentTerm):
            raise ValueError(f"config slicePools[{i}].capacity.commitment is {one_line(repr(term))[:40]}: 1y or 3y")
        out[str(p.get("name"))] = term
    return out


def cost_of_plan(plan: Mapping[str, Any], cost: CostConfig | None = None) -> StackCost:
    """The cost of every TPU pool of a plan (``plan.json`` as a dict), pools in name order."""
    cost = cost if cost is not None else cost_config_of(plan)
    supplied = _supplied(cost)
    acc: dict[tuple[str, str, str, str], list[int]] = {}
    for r in plan.get("resources") or []:
        if r.get("type") != NODE_POOL:
            continue
        inputs = r.get("inputs") or {}
        node = inputs.get("nodeConfig") or {}
        machine = node.get("machineType")
        gen = generation_of_machine_type(machine)
        if gen is None:
            continue
        pool = str((node.get("labels") or {}).get(POOL_LABEL) or inputs.get("name") or r.get("name"))
        lo, hi = declared_nodes(inputs, pool)
        per_node = gen.machine_types[str(machine)]
        sums = acc.setdefault((pool, gen.name, _region(inputs), _capacity(inputs)), [0, 0])
        sums[0] += lo * per_node
        sums[1] += hi * per_node
    terms = commitments_of(plan)
    pools = []
    for (pool, gen_name, region, capacity), (lo, hi) in sorted(acc.items()):
        # the term decides a committed price only: a spot pool's config carries none, and needs none
        term = terms.get(pool) if price_basis(capacity) == "committed" else None
        price = chip_hour_price(gen_name, region, capacity, supplied, term)
        pools.append(PoolCost(pool, gen_name, region, capacity, lo, hi, price, term))
    return StackCost(
        str(plan.get("stack") or "?"),
        tuple(pools),
        cost.budget_usd_per_hour,
        _serving(plan, pools),
        _elastic(plan, pools),
    )


def _config_value(plan: Mapping[str, Any], key: str) -> Any:
    raw = (plan.get("config") or {}).get(f"{NAMESPACE}:{key}")
    return json.loads(raw) if isinstance(raw, str) else raw


def _elastic(plan: Mapping[str, Any], pools: Sequence[PoolCost]) -> ElasticCost | None:
    """The job's elastic bounds from the config a plan was made from (``workload.elastic``, its pool's
    ``slices``), priced at the pool's chip-hour price; chips per slice from the declared node pools."""
    workload, slice_pools = _config_value(plan, "workload"), _config_value(plan, "slicePools")
    if not isinstance(workload, Mapping) or not isinstance(slice_pools, list) or not slice_pools:
        return None
    elastic = WorkloadConfig.model_validate(workload, by_name=False).elastic
    if elastic is None:
        return None
    name = workload.get("slicePool") or slice_pools[0].get("name")
    pool = next((p for p in slice_pools if isinstance(p, Mapping) and p.get("name") == name), None)
    if pool is None:
        return None
    slices = int(pool.get("slices", 1))
    lo, hi = elastic.bounds(slices)
    declared = next((p for p in pools if p.pool == name), None)
    chips = declared.max_chips // slices if declared is not None else 0
    return ElasticCost(str(name), lo, hi, chips, declared.price if declared is not None else None)


def _serving(plan: Mapping[str, Any], pools: Sequence[PoolCost]) -> tuple[ServingCost, ...]:
    prices = {p.pool: p.price for p in pools}
    out = []
    for r in plan.get("resources") or []:
        if r.get("type") != RAY_SERVICE:
            continue
        res = Resource(str(r.get("type")), str(r.get("name")), r.get("inputs") or {}, str(r.get("urn") or ""))
        for g in served_groups(res):
            name = str(get_path(res.props, "metadata", "name") or res.name)
            out.append(
                ServingCost(name, g.pool, g.strategy, g.replicas, g.peak_slices, g.chips_per_slice, prices.get(g.pool))
            )
    return tuple(out)


def budget_violation(c: StackCost) -> str | None:
    """The budget rule: the stack at its autoscaling maximum costs at most ``cost.budgetUsdPerHour``.

    An unpriced pool makes the rule fail with "cannot check" rather than pass on a partial sum.
    """
    budget = c.budget_usd_per_hour
    if budget is None:
        return None
    if c.unpriced:
        names = "; ".join(f"pool {p.pool}: {p.price}" for p in c.unpriced)
        return (
            f"cannot check the budget of {_usd(budget)}/h (cost.budgetUsdPerHour): {names}; supply the rate in "
            "cost.rates or remove the budget"
        )
    total = c.usd_per_hour_max or 0.0
    if total > budget:
        worst = max(c.pools, key=lambda p: p.usd_per_hour_max or 0.0)
        return (
            f"the stack costs {_usd(total)}/h at its autoscaling maximum, over the budget of {_usd(budget)}/h "
            f"(cost.budgetUsdPerHour); the largest pool is {worst.pool} at {_usd(worst.usd_per_hour_max)}/h"
        )
    return None


def _usd(v: float | None) -> str:
    return "unpriced" if v is None else f"${v:,.2f}"


def _month(v: float | None) -> float | None:
    return None if v is None else v * HOURS_PER_MONTH


def _price_json(p: PoolCost) -> dict[str, Any]:
    if isinstance(p.price, PriceRow):
        src = p.price.source
        return {
            "usd_per_chip_hour": p.price.usd_per_chip_hour,
            "source": {"url": src.url, "read_on": src.read_on, "note": src.note},
        }
    return {"usd_per_chip_hour": None, "unpriced": p.price.detail}


def _elastic_json(e: ElasticCost | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "pool": e.pool,
        "min_slices": e.min_slices,
        "max_slices": e.max_slices,
        "chips_per_slice": e.chips_per_slice,
        "billed_whole": e.billed_whole,
        "sizes": [{"slices": n, "chips": n * e.chips_per_slice, "usd_per_hour": e.usd_per_hour(n)} for n in e.sizes],
    }


def elastic_lines(e: ElasticCost | None) -> list[str]:
    """The job's elastic bounds and the cost of each size, as ``tpuray plan`` prints them and ``cost.md`` lists
    them; an unpriced pool says so, never $0."""
    if e is None:
        return []
    head = f"elastic training on {one_line(e.pool)}: {e.min_slices}-{e.max_slices} slices"
    if not isinstance(e.price, PriceRow):  # an unknown price is said, never $0
        out = [f"{head} of {e.chips_per_slice} chips: {e.price if e.price else 'unpriced (no node pool declared)'}"]
    else:
        sizes = ", ".join(f"{n} slice{'s' if n > 1 else ''} {_usd(e.usd_per_hour(n))}/h" for n in e.sizes)
        out = [f"{head}: {sizes}"]
    if e.billed_whole:
        out.append("  (a reservation bills its reserved chips whether a slice runs or not: the full size's cost)")
    return out


def cost_json(c: StackCost) -> str:
    """``cost.json``: every pool, the stack, the month (730 h) and the budget; unpriced values are null."""
    violation = budget_violation(c)
    doc = {
        "format": FORMAT,
        "stack": c.stack,
        "hours_per_month": HOURS_PER_MONTH,
        "pools": [
            {
                "pool": p.pool,
                "generation": p.generation,
                "region": p.region,
                "capacity": p.capacity,
                "commitment": p.commitment,
                "price_basis": p.price.basis,
                "chips_min": p.min_chips,
                "chips_max": p.max_chips,
                **_price_json(p),
                "usd_per_hour_min": p.usd_per_hour_min,
                "usd_per_hour_max": p.usd_per_hour_max,
                "usd_per_month_min": _month(p.usd_per_hour_min),
                "usd_per_month_max": _month(p.usd_per_hour_max),
            }
            for p in c.pools
        ],
        "total": {
            "usd_per_hour_min": c.usd_per_hour_min,
            "usd_per_hour_max": c.usd_per_hour_max,
            "usd_per_month_min": _month(c.usd_per_hour_min),
            "usd_per_month_max": _month(c.usd_per_hour_max),
            "unpriced_pools": [p.pool for p in c.unpriced],
        },
        "elastic": _elastic_json(c.elastic),
        "budget": {
            "usd_per_hour": c.budget_usd_per_hour,
            "result": "none" if c.budget_usd_per_hour is None else ("fail" if violation else "pass"),
            "message": violation,
        },
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def cost_table(c: StackCost) -> list[str]:
    """The Markdown table of pools and the stack ($/h at min and max, $/month at max)."""
    lines = [
        "| pool | chips (min-max) | capacity | $/chip-h | $/h (min) | $/h (max) | $/month (max, 730 h) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for p in c.pools:
        rate = f"{p.price.usd_per_chip_hour:.4g}" if isinstance(p.price, PriceRow) else md_text(p.price)
        lines.append(
            f"| {md_text(p.pool)} | {p.min_chips:,}-{p.max_chips:,} | {p.generation} {p.capacity_text} | {rate} | "
            f"{_usd(p.usd_per_hour_min)} | {_usd(p.usd_per_hour_max)} | {_usd(_month(p.usd_per_hour_max))} |"
        )
    lines.append(
        f"| **stack** | | | | {_usd(c.usd_per_hour_min)} | {_usd(c.usd_per_hour_max)} | "
        f"{_usd(_month(c.usd_per_hour_max))} |"
    )
    if c.serving:  # within its pool's row above; the upgrade's peak is what the pool must hold
        lines += [
            "",
            "| RayService | pool | slices (steady, upgrade peak) | upgrade | $/h (steady) | $/h (upgrade peak) |",
            "|---|---|---:|---|---:|---:|",
        ]
        lines += [
            f"| {md_text(s.service)} | {md_text(s.pool)} | {s.slices}, {s.peak_slices} | {md_text(s.strategy)} | "
            f"{_usd(s.usd_per_hour)} | {_usd(s.usd_per_hour_peak)} |"
            for s in c.serving
        ]
    return lines


def cost_markdown(c: StackCost) -> str:
    """``cost.md``: the table, each price's source, and the budget."""
    lines = [f"# Cost of stack {md_code(c.stack)} (TPU chips only)", "", *cost_table(c), ""]
    if c.unpriced:
        lines.append("A stack total with an unpriced pool is shown as unpriced, never as a partial sum.")
        lines.append("")
    lines.append("Prices:")
    lines.append("")
    for p in c.pools:
        if isinstance(p.price, PriceRow):
            s = p.price.source
            read = f", read {s.read_on}" if s.read_on else ""
            note = md_text(s.note)  # a supplied rate's note is the stack's cost.rates[].source
            lines.append(f"- {md_text(p.pool)}: {p.price} ({p.price.basis}) from {s.url}{read}; {note}".rstrip("; "))
        else:
            lines.append(f"- {md_text(p.pool)}: {md_text(p.price.detail)}")
    lines.append("")
    if c.elastic is not None:
        lines += [*(md_text(line.strip()) for line in elastic_lines(c.elastic)), ""]
    violation = budget_violation(c)
    if c.budget_usd_per_hour is None:
        lines.append("Budget: none set (cost.budgetUsdPerHour).")
    else:
        lines.append(f"Budget: {_usd(c.budget_usd_per_hour)}/h: " + (f"FAIL: {violation}" if violation else "pass"))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class CostChange:
    """One pool's $/h at its maximum in the base and new plan, and what changed."""

    pool: str
    base: PoolCost | None
    new: PoolCost | None

    @property
    def delta(self) -> float | None:
        a = self.base.usd_per_hour_max if self.base else 0.0
        b = self.new.usd_per_hour_max if self.new else 0.0
        return None if a is None or b is None else b - a

    @property
    def why(self) -> str:
        a, b = self.base, self.new
        if a is None:
            return "added"
        if b is None:
            return "removed"
        parts = []
        if (a.generation, a.region) != (b.generation, b.region):
            parts.append(f"{a.generation} {a.region} → {b.generation} {b.region}")
        if a.capacity_text != b.capacity_text:
            parts.append(f"capacity {a.capacity_text} → {b.capacity_text}")
        if a.max_chips != b.max_chips:
            parts.append(f"chips {a.max_chips:,} → {b.max_chips:,}")
        if not parts and a.price != b.price:
            parts.append("price")
        return ", ".join(parts)


@dataclass
class CostDiff:
    base: StackCost
    new: StackCost
    changes: list[CostChange] = field(default_factory=list)

    @property
    def delta(self) -> float | None:
        a, b = self.base.usd_per_hour_max, self.new.usd_per_hour_max
        return None if a is None or b is None else b - a


def cost_diff_of(a: StackCost, b: StackCost) -> CostDiff:
    """The pools whose $/h (or price, or term) changed between two stacks' costs."""
    by_a = {p.pool: p for p in a.pools}
    by_b = {p.pool: p for p in b.pools}
    d = CostDiff(a, b)
    for name in sorted(set(by_a) | set(by_b)):
        pa, pb = by_a.get(name), by_b.get(name)
        if pa != pb:
            d.changes.append(CostChange(name, pa, pb))
    return d


def _signed(v: float | None) -> str:
    return "unpriced" if v is None else f"{'+' if v >= 0 else '-'}${abs(v):,.2f}"


def cost_diff_markdown(d: CostDiff) -> list[str]:
    """The PR comment's cost lines: the stack's $/h at the maximum, base and new, and the pools that cause it."""
    head = (
        f"**Cost at the autoscaling maximum: {_usd(d.base.usd_per_hour_max)}/h → {_usd(d.new.usd_per_hour_max)}/h "
        f"({_signed(d.delta)}/h, {_signed(None if d.delta is None else d.delta * HOURS_PER_MONTH)}/month)**"
    )
    plan = ["<details><summary>Cost of the new plan ($/h at the autoscaling minimum and maximum)</summary>", "",
            *cost_table(d.new), "", "</details>", ""]  # fmt: skip
    if not d.changes:
        return [head, "", "No pool's cost changes.", "", *plan]
    rows = ["| pool | base $/h | new $/h | change | because |", "|---|---:|---:|---:|---|"]
    for c in d.changes:
        base = c.base.usd_per_hour_max if c.base else 0.0
        new = c.new.usd_per_hour_max if c.new else 0.0
        rows.append(f"| {md_text(c.pool)} | {_usd(base)} | {_usd(new)} | {_signed(c.delta)} | {md_text(c.why)} |")
    notes = [
        f"- {md_text(c.pool)}: {md_text(p.price)}"
        for c in d.changes
        for p in (c.new,)
        if p is not None and isinstance(p.price, Unpriced)
    ]
    return [head, "", *rows, "", *notes, *([""] if notes else []), *plan]


def budget_check(plan: Mapping[str, Any], cost: CostConfig | None = None) -> tuple[StackCost, str | None]:
    """The plan's cost and the budget rule's finding (None when it passes or no budget is set)."""
    c = cost_of_plan(plan, cost)
    return c, budget_violation(c)


def pools_summary(c: StackCost) -> Sequence[str]:
    """The lines ``tpuray plan`` prints."""
    out = [f"cost (TPU chips; $/h at min-max, $/month at max over {HOURS_PER_MONTH} h):"]
    for p in c.pools:
        out.append(
            f"  {one_line(p.pool)}: {p.generation} {p.capacity_text} in {one_line(p.region)}: "
            + (
                f"{_usd(p.usd_per_hour_min)}-{_usd(p.usd_per_hour_max)}/h, {_usd(_month(p.usd_per_hour_max))}/month"
                if isinstance(p.price, PriceRow)
                else md_text(p.price)
            )
        )
    out.append(
        f"  stack: {_usd(c.usd_per_hour_min)}-{_usd(c.usd_per_hour_max)}/h, {_usd(_month(c.usd_per_hour_max))}/month"
    )
    return out + [f"  {line}" for line in elastic_lines(c.elastic)]
