"""A reservation priced by its commitment term (``capacity.commitment: 1y | 3y``) from the Cloud TPU pricing page's
rows, and explicitly unpriced, with the page and the date, where the page as read gives no figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuray.components.config import ConfigError, load_stack_file
from tpuray.components.pricing import table
from tpuray.components.pricing.catalogue import COMMITTED_USE, FLEX_START, TPU_PRICING_PAGE, CommittedRow
from tpuray.components.pricing.table import PriceRow, SuppliedRate, Unpriced, chip_hour_price, price_basis
from tpuray.components.review.cost import cost_of_plan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "review" / "golden"


def _prod_plan(term: object) -> dict[str, Any]:
    plan: dict[str, Any] = json.loads((GOLDEN / "prod" / "plan.json").read_text())
    pools = json.loads(plan["config"]["tpuray:slicePools"])
    pools[0]["capacity"]["commitment"] = term
    plan["config"]["tpuray:slicePools"] = json.dumps(pools)
    return plan


def test_the_stack_names_a_commitment_term_and_only_1y_or_3y(tmp_path: Path) -> None:
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    marker = "        project: tpuray-shared-capacity\n"
    f = tmp_path / "Pulumi.prod.yaml"
    f.write_text(text.replace(marker, marker + "        commitment: 3y\n", 1))
    pool = load_stack_file(f).slice_pools[0]
    assert pool.capacity.type == "reservation" and pool.capacity.commitment == "3y"
    f.write_text(text.replace(marker, marker + "        commitment: 2y\n", 1))
    with pytest.raises(ConfigError, match=r"slicePools\[0\]\.capacity\.commitment: .*'1y' or '3y'"):
        load_stack_file(f)


def test_a_term_the_page_gives_prices_the_reservation_with_the_page_and_date(monkeypatch: pytest.MonkeyPatch) -> None:
    row = CommittedRow("v5p", "us-east5", "1y", 2.5)
    monkeypatch.setattr(table, "COMMITTED_USE", (row,))
    price = chip_hour_price("v5p", "us-east5", "reservation", (), "1y")
    assert isinstance(price, PriceRow) and price.usd_per_chip_hour == 2.5 and price.basis == "committed"
    assert price.source.url == "https://cloud.google.com/tpu/pricing" and price.source.read_on
    # the other term, or no term, is not guessed from the one the page gives
    other = chip_hour_price("v5p", "us-east5", "reservation", (), "3y")
    assert isinstance(other, Unpriced) and "no 3-year commitment price per chip-hour for v5p" in other.reason
    none = chip_hour_price("v5p", "us-east5", "reservation")
    assert isinstance(none, Unpriced)
    assert "name the pool's term (slicePools[].capacity.commitment: 1y or 3y)" in none.reason
    # the plan's config carries the term to cost_of_plan: the prod reservation pool is priced
    cost = cost_of_plan(_prod_plan("1y"))
    (v5p,) = [p for p in cost.pools if p.pool == "v5p-train"]
    assert v5p.usd_per_hour_max == pytest.approx(2.5 * v5p.max_chips)


def test_flex_start_is_priced_from_the_page_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table, "FLEX_START", (CommittedRow("v6e", "us-east5", "flex-start", 1.9),))
    for capacity in ("flex-start", "queued"):
        price = chip_hour_price("v6e", "us-east5", capacity)
        assert isinstance(price, PriceRow) and price.usd_per_chip_hour == 1.9


def test_without_a_published_figure_the_pool_stays_unpriced_naming_the_page() -> None:
    assert not COMMITTED_USE and not FLEX_START  # the page as read gives none (catalogue docstring)
    for term in (None, "1y", "3y"):
        price = chip_hour_price("v5p", "us-east5", "reservation", (), term)
        assert isinstance(price, Unpriced)
        assert TPU_PRICING_PAGE.url in price.reason and TPU_PRICING_PAGE.read_on in price.reason
        assert "cost.rates" in price.reason
    flex = chip_hour_price("v6e", "us-east5", "flex-start")
    assert isinstance(flex, Unpriced) and "no flex-start price per chip-hour for v6e" in flex.reason


def test_a_plan_whose_commitment_is_no_term_is_refused() -> None:
    with pytest.raises(ValueError, match=r"slicePools\[0\]\.capacity\.commitment is '2y': 1y or 3y"):
        cost_of_plan(_prod_plan("2y"))


def test_tpuray_plan_prices_the_named_term(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuray.components.review.plan import render_stack

    monkeypatch.setattr(table, "COMMITTED_USE", (CommittedRow("v5p", "us-east5", "3y", 1.75),))
    marker = "        project: tpuray-shared-capacity\n"
    f = tmp_path / "Pulumi.prod.yaml"
    f.write_text((ROOT / "Pulumi.prod.yaml").read_text().replace(marker, marker + "        commitment: 3y\n", 1))
    plan = render_stack("prod", ROOT, stack_file=f)
    (v5p,) = [p for p in plan.cost.pools if p.pool == "v5p-train"]
    assert isinstance(v5p.price, PriceRow) and v5p.price.usd_per_chip_hour == 1.75
    assert v5p.usd_per_hour_max == pytest.approx(1.75 * 128)  # two 4x4x4 slices


_GENS = st.sampled_from(["v5e", "v5p", "v6e"])
_CAPACITIES = st.sampled_from(["on-demand", "spot", "reservation", "flex-start", "queued"])
_TERMS = st.sampled_from([None, "1y", "3y"])


def _rate(gen: str, capacity: str, term: str | None, usd: float) -> SuppliedRate:
    term = term if price_basis(capacity) == "committed" else None
    if price_basis(capacity) == "committed" and term is None:
        term = "1y"
    return SuppliedRate(gen, capacity, usd, f"{gen} {capacity} {term}", commitment=term)  # type: ignore[arg-type]


@given(
    rates=st.lists(st.tuples(_GENS, _CAPACITIES, _TERMS, st.floats(0.01, 100)), max_size=8),
    pool=st.tuples(_GENS, _CAPACITIES, _TERMS),
)
def test_a_supplied_rate_prices_only_pools_of_its_key(
    rates: list[tuple[str, str, str | None, float]], pool: tuple[str, str, str | None]
) -> None:
    """Generation, capacity type and (committed prices only) term decide a rate: a pool is priced by the rate of
    exactly its key, and otherwise by no supplied rate at all (never a neighbour's, never $0)."""
    supplied = list({r.key: r for r in (_rate(*r) for r in rates)}.values())  # one rate per key, as the config has
    gen, capacity, term = pool
    price = chip_hour_price(gen, "us-east5", capacity, supplied, term)
    key = (gen, capacity, term if price_basis(capacity) == "committed" else None)
    mine = [r for r in supplied if r.key == key]
    if mine:
        assert isinstance(price, PriceRow) and price.usd_per_chip_hour == mine[0].usd_per_chip_hour
        assert price.source.note == mine[0].source and price.term == key[2]
    else:
        assert not (isinstance(price, PriceRow) and price.source.url.startswith("stack config"))
        assert not (isinstance(price, PriceRow) and price.source.url == "cost.rates")
        if isinstance(price, PriceRow):
            assert price.usd_per_chip_hour > 0 and price.basis in ("on-demand", "spot")


@pytest.mark.parametrize(
    ("capacity", "term"), [("reservation", None), ("spot", "1y"), ("on-demand", "3y"), ("flex-start", "1y")]
)
def test_a_rate_keyed_wrong_for_its_capacity_is_refused(capacity: str, term: str | None) -> None:
    with pytest.raises(ValueError, match="commitment term"):
        SuppliedRate("v5p", capacity, 1.0, "contract", commitment=term)  # type: ignore[arg-type]
