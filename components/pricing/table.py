"""The price table: (generation, region, price basis, commitment term) -> USD per chip-hour, each row with its source.

Built from :mod:`.catalogue` (per TPU type) by dividing by the type's chips (:class:`TpuSlice`), leaving out the
catalogue's sentinel cells. A price nobody published is :class:`Unpriced`: never $0, never guessed.

Which price a pool pays (its *price basis*) follows its capacity type, in :func:`price_basis` only. A committed price
also depends on the contract's term (1 or 3 years, https://cloud.google.com/tpu/pricing), so every committed row,
supplied or public, carries its term, and a pool is priced only by a row of its own term: never by the other term's,
never without one.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from tpuray.components.catalog.topology import TopologyError, TpuSlice, generation
from tpuray.components.config.capacity import CommitmentTerm, PriceBasis, capacity_class
from tpuray.components.pricing.catalogue import (
    CATALOGUE,
    COMMITTED_USE,
    FLEX_START,
    TPU_PRICING_PAGE,
    CommittedRow,
    Source,
    sentinel,
)

__all__ = [
    "HOURS_PER_MONTH",
    "TERMS",
    "PriceBasis",
    "PriceRow",
    "SuppliedRate",
    "Unpriced",
    "chip_hour_price",
    "price_basis",
    "price_rows",
]

TERMS: dict[str, str] = {"1y": "1-year", "3y": "3-year"}
"""Each commitment term (``capacity.commitment``) as the pricing page names it."""

HOURS_PER_MONTH = 730
"""Hours in the month a monthly figure is quoted for (Google Cloud's pricing calculator uses 730)."""


def price_basis(capacity_type: str) -> PriceBasis:
    """The price a pool of this capacity type (a plan's ``capacity`` string) pays: the type's ``price_basis``.

    - ``on-demand`` and ``spot`` pay the public on-demand and spot (preemptible SKU) prices.
    - ``reservation`` pays the committed price of its committed use contract.
    - ``flex-start`` and ``queued`` (the same flex-start VMs admitted through a ProvisioningRequest:
      https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start) pay flex-start.
    """
    return capacity_class(capacity_type).price_basis


@dataclass(frozen=True)
class PriceRow:
    """One fact: a chip-hour of ``generation`` in ``region`` on ``basis`` costs ``usd_per_chip_hour``."""

    generation: str
    region: str
    basis: PriceBasis
    usd_per_chip_hour: float
    source: Source
    term: CommitmentTerm | None = None
    """The commitment term of a ``committed`` row (``1y``, ``3y``); None for every other basis."""

    def __str__(self) -> str:
        return f"${self.usd_per_chip_hour:.4g}/chip-h"


@dataclass(frozen=True)
class Unpriced:
    """No published (or supplied) price: shown as such, never as $0."""

    generation: str
    region: str
    basis: PriceBasis
    reason: str
    term: CommitmentTerm | None = None

    def __str__(self) -> str:
        term = f" {TERMS[self.term]}" if self.term else ""
        return f"unpriced (no price for {self.generation} {self.basis}{term} in {self.region})"

    @property
    def detail(self) -> str:
        return f"{self}: {self.reason}"


@dataclass(frozen=True)
class SuppliedRate:
    """A rate the stack supplies (``cost.rates``): a contract's committed price, a flex-start rate, a discount."""

    generation: str
    capacity: str
    """Capacity type it prices (``reservation``, ``flex-start``, ``queued``, ``on-demand``, ``spot``)."""
    usd_per_chip_hour: float
    source: str
    where: str = "cost.rates"
    commitment: CommitmentTerm | None = None
    """The term it prices: required where the capacity type pays a committed price, absent everywhere else."""

    def __post_init__(self) -> None:
        committed = price_basis(self.capacity) == "committed"
        if committed != (self.commitment is not None):
            need = "must name its commitment term (1y or 3y)" if committed else "takes no commitment term"
            raise ValueError(f"{self.where}: a rate for capacity {self.capacity} {need}, got {self.commitment!r}")

    @property
    def key(self) -> tuple[str, str, str | None]:
        """What decides the rate: generation, capacity type and (committed prices only) term."""
        return self.generation, self.capacity, self.commitment


def _chips(accelerator: str) -> int:
    return TpuSlice.parse_pod_type(accelerator.removeprefix("tpu-")).chips


@functools.cache
def _catalogue_facts() -> tuple[tuple[PriceRow, ...], dict[tuple[str, str, str], str]]:
    rows: list[PriceRow] = []
    gaps: dict[tuple[str, str, str], str] = {}
    for c in CATALOGUE:
        gen = generation(c.accelerator.removeprefix("tpu-").split("-")[0]).name
        chips = _chips(c.accelerator)
        basis: PriceBasis
        for basis, value in (("on-demand", c.price), ("spot", c.spot_price)):
            why = sentinel(value)
            if why is not None or value is None:
                gaps[(gen, c.region, basis)] = f"the catalogue's {c.accelerator} cell is not a price ({why})"
                continue
            rows.append(PriceRow(gen, c.region, basis, value / chips, c.source))
    return tuple(rows), gaps


def price_rows() -> tuple[PriceRow, ...]:
    """Every sourced row of the table."""
    return _catalogue_facts()[0]


def _page_row(rows: Sequence[CommittedRow], gen: str, region: str, term: str) -> CommittedRow | None:
    return next((r for r in rows if (r.generation, r.region, r.term) == (gen, region, term)), None)


def _unpriced_reason(gen: str, region: str, basis: PriceBasis, commitment: str | None) -> str:
    gap = _catalogue_facts()[1].get((gen, region, basis))
    if gap:
        return gap
    page = f"the Cloud TPU pricing page ({TPU_PRICING_PAGE.url}, read {TPU_PRICING_PAGE.read_on})"
    if basis == "committed" and commitment is None:
        # no rate of either term may stand in: a 1-year and a 3-year commitment are priced apart
        first = (
            "a reservation pays its committed use contract's price, which differs by term: name the pool's term "
            "(slicePools[].capacity.commitment: 1y or 3y); no rate of another term stands in"
        )
        if any((r.generation, r.region) == (gen, region) for r in COMMITTED_USE):
            return f"{first}; {page} gives the price of each term"
        return (
            f"{first}; {page} as read gives no commitment price per chip-hour for {gen}, so also supply the term's "
            f"rate in cost.rates ({{generation: {gen}, capacity: reservation, commitment: 1y or 3y, usdPerChipHour, "
            "source})"
        )
    if basis == "committed":
        return f"{page} as read gives no {TERMS[commitment or '']} commitment price per chip-hour for {gen}; "
    if basis == "flex-start":
        return f"{page} as read gives no flex-start price per chip-hour for {gen}; "
    return "not in the price catalogue; "


def _term(commitment: str | None) -> CommitmentTerm | None:
    if commitment is None:
        return None
    for term in typing.get_args(CommitmentTerm):
        if commitment == term:
            return cast(CommitmentTerm, term)
    raise ValueError(f"commitment {commitment!r}: a commitment term is 1y or 3y")


def chip_hour_price(
    gen: str,
    region: str,
    capacity_type: str,
    supplied: Sequence[SuppliedRate] | Iterable[SuppliedRate] = (),
    commitment: str | None = None,
) -> PriceRow | Unpriced:
    """The price of a chip-hour of ``gen`` in ``region`` for a pool of ``capacity_type``.

    A rate the stack supplies for (generation, capacity type, and for a committed price the pool's term) wins over
    the public table (it is what that stack pays); a reservation with a ``commitment`` term (``1y``, ``3y``) pays
    the pricing page's price of that term, a flex-start pool its flex-start price; without any, :class:`Unpriced`
    says why. A reservation without a term is unpriced: no rate of either term stands in for it. ``commitment`` is
    the contract's, so it is ignored for a capacity type that pays no committed price.
    """
    try:
        name = generation(gen).name
    except TopologyError:
        name = gen
    basis = price_basis(capacity_type)
    term = _term(commitment) if basis == "committed" else None
    for rate in supplied:
        if rate.key == (name, capacity_type, term):
            return PriceRow(name, region, basis, rate.usd_per_chip_hour, Source(rate.where, "", rate.source), term)
    for row in price_rows():
        if (row.generation, row.region, row.basis, row.term) == (name, region, basis, term):
            return row
    page = None
    if basis == "committed" and term is not None:
        page = _page_row(COMMITTED_USE, name, region, term)
    elif basis == "flex-start":
        page = _page_row(FLEX_START, name, region, "flex-start")
    if page is not None:
        return PriceRow(name, region, basis, page.usd_per_chip_hour, page.source, term)
    reason = _unpriced_reason(name, region, basis, term)
    if reason.endswith("; "):
        with_term = f", commitment: {term}" if term else ""
        reason += (
            f"supply one in cost.rates ({{generation: {name}, capacity: {capacity_type}{with_term}, usdPerChipHour, "
            "source})"
        )
    return Unpriced(name, region, basis, reason, term)
