"""The ``StackMonitoring`` component under the plan engine: the dashboard and the idle-slice alert declared under
it, and the stacks that declare it (the dashboard and alert themselves are tests/planning/test_dashboard.py)."""

from __future__ import annotations

import json

import pytest

from tests.support import engine_run as er
from tests.support.stacks import shipped_config
from tpuray.components.planning.dashboard import dashboard_plan, idle_alert_plan
from tpuray.components.review.resource_types import ALERT_POLICY, DASHBOARD
from tpuray.components.stack_monitoring import StackMonitoring, StackMonitoringArgs


def test_component_declares_the_dashboard_and_the_alert_under_itself() -> None:
    cfg = shipped_config("prod-dws")
    plan = dashboard_plan(cfg, "prod-dws")
    alert = idle_alert_plan(cfg, "prod-dws")

    def build() -> None:
        StackMonitoring(
            "mon", StackMonitoringArgs(project=cfg.project, dashboard=plan, idle_alert=alert, user_labels={"a": "b"})
        )

    run, _ = er.run(build)
    children = er.children_of(run, "StackMonitoring")
    top = [r["type"] for r in run.resources if not r["parent"] or "::pulumi:pulumi:Stack::" in r["parent"]]
    assert top == ["tpuray:index:StackMonitoring"]  # parent=self on every child
    types = sorted(r["type"] for r in children)
    assert types == [ALERT_POLICY, DASHBOARD]
    board = next(r for r in children if r["type"].endswith("Dashboard"))
    assert json.loads(board["inputs"]["dashboardJson"]) == plan.to_json()
    policy = next(r for r in children if r["type"].endswith("AlertPolicy"))
    (condition,) = policy["inputs"]["conditions"]
    promql = condition["conditionPrometheusQueryLanguage"]
    assert alert is not None
    assert promql["query"] == alert.query and promql["duration"] == "1800s" and promql["evaluationInterval"] == "60s"
    assert policy["inputs"]["project"] == cfg.project and policy["inputs"]["userLabels"] == {"a": "b"}


def test_component_without_alert_declares_only_the_dashboard() -> None:
    cfg = shipped_config("dev")

    def build() -> None:
        StackMonitoring("mon", StackMonitoringArgs(project=cfg.project, dashboard=dashboard_plan(cfg, "dev")))

    run, _ = er.run(build)
    assert [r["type"] for r in er.children_of(run, "StackMonitoring")] == [DASHBOARD]


@pytest.mark.parametrize(("name", "on"), [("dev", False), ("prod", True), ("prod-dws", True)])
def test_the_stacks_declare_monitoring_where_it_is_on(name: str, on: bool) -> None:
    run, _ = er.run(er.ROOT / "infra", stack=name, config=er.cli_config(name))
    types = [r["type"] for r in run.resources]
    assert types.count(DASHBOARD) == int(on)
    assert types.count(ALERT_POLICY) == int(on)
    assert types.count("tpuray:index:StackMonitoring") == int(on)
