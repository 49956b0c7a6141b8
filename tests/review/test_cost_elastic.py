"""``tpuray plan``'s cost of the training job at each elastic size (``workload.elastic``): read from the plan's
config and its declared node pools, priced at the pool's chip-hour price, an unknown price said as such."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.plans import GOLDEN
from tpuray.components.config import CostConfig
from tpuray.components.review.cost import cost_json, cost_markdown, cost_of_plan, elastic_lines, pools_summary


def prod_plan(elastic: dict[str, Any] | None, commitment: str | None = None) -> dict[str, Any]:
    plan: dict[str, Any] = copy.deepcopy(json.loads((GOLDEN / "prod" / "plan.json").read_text()))
    config = plan["config"]
    workload = json.loads(config["tpuray:workload"])
    workload.pop("elastic", None)
    if elastic is not None:
        workload["elastic"] = elastic
    config["tpuray:workload"] = json.dumps(workload)
    if commitment is not None:
        pools = json.loads(config["tpuray:slicePools"])
        pools[0]["capacity"]["commitment"] = commitment
        config["tpuray:slicePools"] = json.dumps(pools)
    return plan


def test_a_fixed_size_job_shows_no_elastic_cost() -> None:
    c = cost_of_plan(prod_plan(None))
    assert c.elastic is None and elastic_lines(None) == []
    assert json.loads(cost_json(c))["elastic"] is None


def test_an_unpriced_pool_says_unpriced_at_every_size_never_zero() -> None:
    c = cost_of_plan(prod_plan({"minSlices": 1}))
    assert c.elastic is not None
    assert (c.elastic.pool, c.elastic.min_slices, c.elastic.max_slices, c.elastic.chips_per_slice) == (
        "v5p-train",
        1,
        2,
        64,
    )
    sizes = json.loads(cost_json(c))["elastic"]["sizes"]
    assert [(s["slices"], s["chips"], s["usd_per_hour"]) for s in sizes] == [(1, 64, None), (2, 128, None)]
    (line, note) = elastic_lines(c.elastic)
    assert "unpriced (no price for v5p committed" in line and "$0" not in line
    assert "reservation bills its reserved chips" in note
    assert any("elastic training on v5p-train: 1-2 slices" in s for s in pools_summary(c))
    assert "elastic training on v5p-train" in cost_markdown(c)


@settings(max_examples=20, deadline=None)
@given(st.floats(min_value=0.01, max_value=50, allow_nan=False, allow_infinity=False))
def test_each_size_costs_its_chips_at_the_pools_price(rate: float) -> None:
    cost = CostConfig.model_validate(
        {
            "rates": [
                {
                    "generation": "v5p",
                    "capacity": "reservation",
                    "commitment": "1y",
                    "usdPerChipHour": rate,
                    "source": "test",
                }
            ]
        },
        by_name=False,
    )
    c = cost_of_plan(prod_plan({"minSlices": 1}, "1y"), cost)
    assert c.elastic is not None
    assert c.elastic.usd_per_hour(1) == 64 * rate and c.elastic.usd_per_hour(2) == 128 * rate
    line = elastic_lines(c.elastic)[0]
    assert f"1 slice ${64 * rate:,.2f}/h, 2 slices ${128 * rate:,.2f}/h" in line
