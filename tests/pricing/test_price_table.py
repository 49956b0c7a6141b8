"""The price table: sourced rows, sentinels left out, unpriced for what nobody published, one capacity mapping."""

from __future__ import annotations

import pytest

from tpuray.components.config import ConfigError, parse_stack_config
from tpuray.components.pricing.catalogue import CATALOGUE, sentinel
from tpuray.components.pricing.table import PriceRow, SuppliedRate, Unpriced, chip_hour_price, price_basis, price_rows


def test_rows_are_the_catalogue_prices_per_chip() -> None:
    # As read from the catalogue: tpu-v5p-8 (4 chips) in us-east5 costs 16.8/h on demand and 6.24036/h on spot.
    od = chip_hour_price("v5p", "us-east5", "on-demand")
    spot = chip_hour_price("v5p", "us-east5", "spot")
    assert isinstance(od, PriceRow) and isinstance(spot, PriceRow)
    assert od.usd_per_chip_hour == 16.8 / 4
    assert spot.usd_per_chip_hour == 6.24036 / 4
    assert "skypilot-catalog" in od.source.url and od.source.read_on == "2026-12-01"


def test_every_row_is_a_real_price_with_its_source() -> None:
    rows = price_rows()
    assert len(rows) > 40
    for r in rows:
        assert 0 < r.usd_per_chip_hour < 100, r
        assert r.source.url.startswith("https://") and r.source.read_on


@pytest.mark.parametrize("value", [None, 0.0, -1.0, 700.0])
def test_sentinels_are_not_prices(value: float | None) -> None:
    assert sentinel(value)


def test_a_sentinel_row_is_unpriced_not_700_nor_0() -> None:
    assert any(c.accelerator == "tpu-v6e-1" and c.region == "asia-east1" and c.price == 700.0 for c in CATALOGUE)
    for cap in ("on-demand", "spot"):
        p = chip_hour_price("v6e", "asia-east1", cap)
        assert isinstance(p, Unpriced)
        assert str(p).startswith("unpriced (no price for v6e")
        assert "placeholder" in p.reason


def test_unlisted_region_and_generation_are_unpriced() -> None:
    assert isinstance(chip_hour_price("v5p", "antarctica-south1", "on-demand"), Unpriced)
    assert isinstance(chip_hour_price("tpu7x", "us-central1", "on-demand"), Unpriced)


def test_capacity_types_map_to_one_price_basis_each() -> None:
    assert [price_basis(c) for c in ("on-demand", "spot", "reservation", "flex-start", "queued")] == [
        "on-demand",
        "spot",
        "committed",
        "flex-start",
        "flex-start",
    ]
    with pytest.raises(ValueError, match="valid choices"):
        price_basis("preemptible")


def test_reservation_and_flex_start_need_a_supplied_rate() -> None:
    p = chip_hour_price("v5p", "us-east5", "reservation")
    assert isinstance(p, Unpriced) and "cost.rates" in p.reason
    rate = SuppliedRate("v5p", "reservation", 2.5, "our contract", commitment="3y")
    got = chip_hour_price("v5p", "us-east5", "reservation", [rate], "3y")
    assert isinstance(got, PriceRow) and got.usd_per_chip_hour == 2.5 and got.source.note == "our contract"
    assert got.term == "3y"
    # a rate for another capacity type, or another term, or a pool that names no term: not priced by it
    assert isinstance(chip_hour_price("v5p", "us-east5", "flex-start", [rate]), Unpriced)
    one_year = chip_hour_price("v5p", "us-east5", "reservation", [rate], "1y")
    assert isinstance(one_year, Unpriced) and "commitment: 1y" in one_year.reason
    assert isinstance(chip_hour_price("v5p", "us-east5", "reservation", [rate]), Unpriced)


_BASE = {
    "project": "tpuray-dev-project",
    "region": "us-west4",
    "zone": "us-west4-a",
    "slicePools": [{"name": "a", "generation": "v5e", "topology": "2x2"}],
}


@pytest.mark.parametrize(
    ("cost", "path"),
    [
        ({"budgetUsdPerHour": -1}, "cost.budgetUsdPerHour"),
        ({"budgetUsdPerHour": "lots"}, "cost.budgetUsdPerHour"),
        (
            {"rates": [{"generation": "v5p", "capacity": "reservation", "usdPerChipHour": 0, "source": "x"}]},
            "cost.rates[0].usdPerChipHour",
        ),
        (
            {"rates": [{"generation": "v5p", "capacity": "reservation", "commitment": "1y", "usdPerChipHour": 1}]},
            "cost.rates[0].source",
        ),
        # a reservation's rate is one term's price; no other capacity type has a term
        (
            {"rates": [{"generation": "v5p", "capacity": "reservation", "usdPerChipHour": 1, "source": "x"}]},
            "cost.rates[0].commitment",
        ),
        (
            {
                "rates": [
                    {"generation": "v5p", "capacity": "spot", "commitment": "1y", "usdPerChipHour": 1, "source": "x"}
                ]
            },
            "cost.rates[0].commitment",
        ),
        (
            {
                "rates": [
                    {
                        "generation": "v5p",
                        "capacity": "reservation",
                        "commitment": "2y",
                        "usdPerChipHour": 1,
                        "source": "x",
                    }
                ]
            },
            "cost.rates[0].commitment",
        ),
        (
            {
                "rates": [
                    {
                        "generation": "v5p",
                        "capacity": "reservation",
                        "commitment": "3y",
                        "usdPerChipHour": 1,
                        "source": "x",
                    },
                    {
                        "generation": "v5p",
                        "capacity": "reservation",
                        "commitment": "3y",
                        "usdPerChipHour": 2,
                        "source": "y",
                    },
                ]
            },
            "cost.rates[1]",
        ),
    ],
)
def test_bad_cost_config_names_the_field(cost: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_stack_config({**_BASE, "cost": cost})
    assert [p for p, _ in err.value.problems] == [path]


def test_rates_of_both_terms_are_two_rates() -> None:
    rates = [
        {"generation": "v5p", "capacity": "reservation", "commitment": t, "usdPerChipHour": u, "source": t}
        for t, u in (("1y", 3.0), ("3y", 2.0))
    ]
    cfg = parse_stack_config({**_BASE, "cost": {"rates": rates}})
    assert [(r.commitment, r.usd_per_chip_hour) for r in cfg.cost.rates] == [("1y", 3.0), ("3y", 2.0)]


def test_a_missing_term_names_the_field_and_the_valid_form() -> None:
    rate = {"generation": "v5p", "capacity": "reservation", "usdPerChipHour": 1, "source": "x"}
    with pytest.raises(ConfigError) as err:
        parse_stack_config({**_BASE, "cost": {"rates": [rate]}})
    ((path, message),) = err.value.problems
    assert path == "cost.rates[0].commitment" and "1y or 3y" in message
