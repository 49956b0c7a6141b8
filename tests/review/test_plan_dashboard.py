"""``tpuray plan`` shows the stack's dashboard: its JSON and its layout picture beside the topology, for the stacks
that turn monitoring on, and nothing stale for those that do not."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.plans import GOLDEN
from tpuray.components.review.plan import DASHBOARD_FILE, DASHBOARD_PICTURE, Plan, dashboards, write_plan
from tpuray.components.review.resource_types import ALERT_POLICY, DASHBOARD


def test_prod_goldens_hold_the_dashboard_and_the_alert() -> None:
    for stack, pools in (("prod", ["v5p-train", "v6e-flex"]), ("prod-dws", ["v5p-train", "v6e-dws"])):
        doc = json.loads((GOLDEN / stack / "plan.json").read_text())
        types = [r["type"] for r in doc["resources"]]
        assert types.count(DASHBOARD) == 1
        assert types.count(ALERT_POLICY) == 1
        board = json.loads((GOLDEN / stack / DASHBOARD_FILE).read_text())
        assert board == dashboards(doc["resources"])[0]
        groups = [t["widget"]["title"] for t in board["mosaicLayout"]["tiles"] if "collapsibleGroup" in t["widget"]]
        assert [g.split(":", 1)[0] for g in groups] == pools
        svg = (GOLDEN / stack / DASHBOARD_PICTURE).read_text()
        assert svg.count('class="pool-row"') == len(pools)
    assert not (GOLDEN / "dev" / DASHBOARD_FILE).exists() and not (GOLDEN / "dev" / DASHBOARD_PICTURE).exists()


def test_a_plan_without_monitoring_leaves_no_earlier_dashboard(plans: dict[str, Plan], tmp_path: Path) -> None:
    write_plan(plans["prod"], tmp_path)
    assert (tmp_path / DASHBOARD_FILE).is_file() and (tmp_path / DASHBOARD_PICTURE).is_file()
    write_plan(plans["dev"], tmp_path)
    assert not (tmp_path / DASHBOARD_FILE).exists() and not (tmp_path / DASHBOARD_PICTURE).exists()
