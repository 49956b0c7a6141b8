"""Cost in review: $/h of real plans (the program run under the mock engine), the diff's $/h delta and the
budget rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.plans import GOLDEN, ROOT
from tpuray.components.pricing.catalogue import CATALOGUE
from tpuray.components.pricing.table import PriceRow, Unpriced, chip_hour_price
from tpuray.components.review.cost import BUDGET_RULE, budget_violation, cost_json, cost_of_plan
from tpuray.components.review.diff import diff_plans, render_markdown
from tpuray.components.review.plan import Plan, render_stack

_STACK = """\
config:
  tpuray:project: tpuray-dev-project
  tpuray:region: {region}
  tpuray:zone: {region}-a
  tpuray:cluster:
    name: tpuray-cost
    deletionProtection: false
    masterAuthorizedNetworks:
      - cidr: 203.0.113.0/24
  tpuray:slicePools:
    - name: lite
      generation: v5e
      topology: 2x2
      slices: 2
      capacity: {{type: {capacity}{name}}}
      autoscaling: {{enabled: true, minSlices: 1}}
    - name: perf
      generation: v5p
      topology: 2x2x1
      capacity: {{type: {capacity}{name}}}
{extra}"""


def _render(tmp_path: Path, region: str, capacity: str, extra: str = "", term: str | None = None) -> Plan:
    f = tmp_path / f"Pulumi.cost-{region}-{capacity}-{term}.yaml"
    name = ", name: tpu-res" if capacity == "reservation" else ""
    name += f", commitment: {term}" if term else ""
    f.write_text(_STACK.format(region=region, capacity=capacity, name=name, extra=extra))
    return render_stack("dev", ROOT, stack_file=f)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Plan]:
    tmp = tmp_path_factory.mktemp("cost")
    return {(r, c): _render(tmp, r, c) for r in ("us-east5", "us-central1") for c in ("on-demand", "spot")}


def _catalogue(accelerator: str, region: str, capacity: str) -> float:
    row = next(c for c in CATALOGUE if c.accelerator == accelerator and c.region == region)
    value = row.price if capacity == "on-demand" else row.spot_price
    assert value is not None
    return value


@pytest.mark.parametrize("region", ["us-east5", "us-central1"])
@pytest.mark.parametrize("capacity", ["on-demand", "spot"])
def test_pool_cost_is_the_sourced_price_times_the_chips(
    rendered: dict[tuple[str, str], Plan], region: str, capacity: str
) -> None:
    c = cost_of_plan(rendered[(region, capacity)].run)
    pools = {p.pool: p for p in c.pools}
    assert set(pools) == {"lite", "perf"}
    lite, perf = pools["lite"], pools["perf"]
    assert (lite.min_chips, lite.max_chips, perf.min_chips, perf.max_chips) == (4, 8, 0, 4)
    assert (lite.region, lite.capacity) == (region, capacity)
    for p in (lite, perf):
        row = chip_hour_price(p.generation, region, capacity)
        assert isinstance(row, PriceRow) and p.price == row
        assert p.usd_per_hour_max == row.usd_per_chip_hour * p.max_chips
        assert p.usd_per_hour_min == row.usd_per_chip_hour * p.min_chips
    # and against the catalogue's own 4-chip types, with no per-chip division of ours in between
    assert perf.usd_per_hour_max == pytest.approx(_catalogue("tpu-v5p-8", region, capacity), abs=1e-9)
    assert lite.usd_per_hour_min == pytest.approx(4 * _catalogue("tpu-v5litepod-1", region, capacity), abs=1e-9)
    assert c.usd_per_hour_max == pytest.approx(lite.usd_per_hour_max + perf.usd_per_hour_max)  # type: ignore[operator]


def test_prices_differ_by_region_and_capacity(rendered: dict[tuple[str, str], Plan]) -> None:
    totals = {k: cost_of_plan(p.run).usd_per_hour_max for k, p in rendered.items()}
    # the catalogue's on-demand prices of v5e and v5p are the same in these two regions, spot prices are not
    assert totals[("us-east5", "on-demand")] == totals[("us-central1", "on-demand")]
    assert totals[("us-east5", "spot")] != totals[("us-central1", "spot")]
    assert totals[("us-east5", "spot")] < totals[("us-east5", "on-demand")]  # type: ignore[operator]


def test_diff_shows_the_delta_of_a_capacity_type_change(rendered: dict[tuple[str, str], Plan]) -> None:
    base, new = rendered[("us-east5", "on-demand")].run, rendered[("us-east5", "spot")].run
    d = diff_plans(base, new)
    assert d.cost is not None
    by_pool = {c.pool: c for c in d.cost.changes}
    assert set(by_pool) == {"lite", "perf"}
    want = 4 * (6.24036 / 4 - 16.8 / 4)  # perf: 4 v5p chips from on-demand to spot, us-east5
    assert by_pool["perf"].delta == pytest.approx(want)
    assert by_pool["perf"].why == "capacity on-demand → spot"
    text = render_markdown([d])
    assert f"-${abs(want):,.2f} | capacity on-demand → spot |" in text
    assert d.cost.delta is not None and d.cost.delta < 0
    assert f"(-${abs(d.cost.delta):,.2f}/h" in text
    # the comment also carries the new plan's $/h per pool at min and max
    spot_perf = 6.24036  # tpu-v5p-8 (4 chips) on spot in us-east5, as the catalogue reads
    assert f"| perf | 0-4 | v5p spot | {6.24036 / 4:.4g} | $0.00 | ${spot_perf:,.2f} |" in text


def test_an_unpriced_pool_shows_unpriced_and_the_stack_total_too() -> None:
    golden = json.loads((GOLDEN / "prod" / "cost.json").read_text())
    pools = {p["pool"]: p for p in golden["pools"]}
    assert pools["v5p-train"]["usd_per_hour_max"] is None
    assert pools["v5p-train"]["unpriced"].startswith("unpriced (no price for v5p committed in us-east5)")
    assert golden["total"]["usd_per_hour_max"] is None
    live = cost_of_plan(json.loads((GOLDEN / "prod" / "plan.json").read_text()))
    assert live.unpriced and live.usd_per_hour_max is None and live.usd_per_hour_min is None  # never a partial sum
    md = (GOLDEN / "prod" / "cost.md").read_text()
    assert "| v6e-flex | 0-16 | v6e flex-start | unpriced (no price for v6e flex-start in us-east5) |" in md
    assert "$0.00" not in md


def test_dev_golden_cost_is_the_catalogue_price() -> None:
    golden = json.loads((GOLDEN / "dev" / "cost.json").read_text())
    (pool,) = golden["pools"]
    # dev: one v5e 2x2 (4 chips) on spot in us-west4; the catalogue's tpu-v5litepod-4 line there reads 1.8768/h
    # on spot (the table itself keeps only the 1-chip line, 0.4692)
    assert pool["usd_per_hour_max"] == pytest.approx(1.8768)
    assert pool["usd_per_hour_max"] == pytest.approx(4 * _catalogue("tpu-v5litepod-1", "us-west4", "spot"))
    assert pool["usd_per_month_max"] == pytest.approx(730 * pool["usd_per_hour_max"])
    assert golden["budget"]["result"] == "none"


def test_budget_rule_fires_above_its_cap(rendered: dict[tuple[str, str], Plan]) -> None:
    c = cost_of_plan(rendered[("us-east5", "on-demand")].run)
    total = c.usd_per_hour_max
    assert total is not None
    under = type(c)(c.stack, c.pools, budget_usd_per_hour=total + 0.01)
    over = type(c)(c.stack, c.pools, budget_usd_per_hour=total - 0.01)
    assert budget_violation(under) is None
    message = budget_violation(over)
    assert message and "over the budget" in message and "cost.budgetUsdPerHour" in message


def test_budget_rule_fails_a_plan_and_cannot_check_an_unpriced_one(tmp_path: Path) -> None:
    plan = _render(tmp_path, "us-east5", "on-demand", "  tpuray:cost: {budgetUsdPerHour: 10}\n")
    found = [v for v in plan.violations if v.rule == BUDGET_RULE]
    assert len(found) == 1 and "over the budget of $10.00/h" in found[0].message
    ok = _render(tmp_path, "us-east5", "spot", "  tpuray:cost: {budgetUsdPerHour: 100}\n")
    assert not [v for v in ok.violations if v.rule == BUDGET_RULE]
    # a pool without a price: the rule says it cannot check rather than pass on a partial sum
    unpriced = _render(tmp_path, "us-east5", "reservation", "  tpuray:cost: {budgetUsdPerHour: 1000}\n")
    (v,) = [v for v in unpriced.violations if v.rule == BUDGET_RULE]
    assert v.message.startswith("cannot check the budget of $1,000.00/h")


def test_a_supplied_rate_prices_a_reservation_of_its_own_term_only(tmp_path: Path) -> None:
    """A 1-year and a 3-year commitment are priced apart: each rate prices only pools of its term, and a pool whose
    term has no rate is unpriced, never priced at the other term's rate."""
    extra = (
        "  tpuray:cost:\n    rates:\n"
        "      - {generation: v5e, capacity: reservation, commitment: 1y, usdPerChipHour: 0.5, source: contract A}\n"
        "      - {generation: v5e, capacity: reservation, commitment: 3y, usdPerChipHour: 0.3, source: contract B}\n"
        "      - {generation: v5p, capacity: reservation, commitment: 3y, usdPerChipHour: 2.0, source: contract B}\n"
    )
    one_year = cost_of_plan(_render(tmp_path, "us-east5", "reservation", extra, term="1y").run)
    three_year = cost_of_plan(_render(tmp_path, "us-east5", "reservation", extra, term="3y").run)
    lite1, perf1 = sorted(one_year.pools, key=lambda p: p.pool)
    lite3, perf3 = sorted(three_year.pools, key=lambda p: p.pool)
    assert (lite1.commitment, lite3.commitment) == ("1y", "3y")
    assert lite1.usd_per_hour_max == 8 * 0.5 and lite3.usd_per_hour_max == 8 * 0.3
    assert perf3.usd_per_hour_max == 4 * 2.0
    # v5p has only a 3-year rate: the 1-year pool is unpriced, and so is the stack (never a partial sum)
    assert isinstance(perf1.price, Unpriced) and perf1.usd_per_hour_max is None
    assert str(perf1.price) == "unpriced (no price for v5p committed 1-year in us-east5)"
    assert "commitment: 1y" in perf1.price.reason and one_year.usd_per_hour_max is None
    # and without a term, no rate of either term stands in
    none = cost_of_plan(_render(tmp_path, "us-east5", "reservation", extra).run)
    assert all(isinstance(p.price, Unpriced) and "name the pool's term" in p.price.detail for p in none.pools)
    # the diff says the term changed
    d = diff_plans(_render(tmp_path, "us-east5", "reservation", extra, term="1y").run,
                   _render(tmp_path, "us-east5", "reservation", extra, term="3y").run)  # fmt: skip
    assert d.cost is not None
    assert {c.pool: c.why for c in d.cost.changes}["lite"] == "capacity reservation 1y → reservation 3y"
    assert json.loads(cost_json(three_year))["pools"][0]["commitment"] == "3y"
