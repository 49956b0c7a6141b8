"""The stack's dashboard and idle-slice alert: derived from the topology, every pool covered, every query valid
PromQL that finds the series the producers serve (a real Prometheus), and the monitoring config's errors (the
``StackMonitoring`` component that declares them is tests/components/test_stack_monitoring.py)."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.prometheus_server import Exporter, prometheus_scraping
from tests.support.slices import kueue_of
from tests.support.stacks import shipped_config
from tpuray.components.catalog import metric_names as mn
from tpuray.components.catalog.topology import GENERATIONS, TpuSlice
from tpuray.components.catalog.tpu_locations import zones_of
from tpuray.components.config import ConfigError, StackConfig, parse_stack_config
from tpuray.components.planning.dashboard import (
    COLUMNS,
    DashboardError,
    DashboardPlan,
    PoolRow,
    check_coverage,
    dashboard_plan,
    idle_alert_plan,
)
from tpuray.components.review.dashboard_svg import render_dashboard_svg

STACKS = ("dev", "prod", "prod-dws")


def values(name: str) -> dict[str, Any]:
    """A stack file's ``tpuray:`` values, for editing."""
    import yaml

    doc = yaml.safe_load((er.ROOT / f"Pulumi.{name}.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items()}


def two_v5p_pools() -> dict[str, Any]:
    v = values("prod")
    spot = copy.deepcopy(v["slicePools"][0])
    spot.update(name="v5p-spot", capacity={"type": "spot"}, autoscaling={"enabled": True, "minSlices": 0})
    v["slicePools"].append(spot)
    return v


# ---- the planner --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", STACKS)
def test_every_pool_has_a_row_with_its_shapes_panels(name: str) -> None:
    cfg = shipped_config(name)
    plan = dashboard_plan(cfg, name)
    for pool in cfg.slice_pools:
        row = plan.row(pool.name)
        s = pool.tpu_slice
        keys = [p.key for p in row.panels]
        assert keys[:9] == [
            "dutyCycle",
            "tensorcoreUtilization",
            "hbmUsed",
            "stepTime",
            "tokensPerChip",
            "mfu",
            "goodput",
            "badput",
            "timeToFirstStep",
        ]
        for p in row.panels[:3]:
            assert p.per_chip and f'TpuType="{s.gke_accelerator}"' in p.query and f'"{s.topology}"' in p.query
        for p in row.panels[3:9]:
            assert f'tpu_slice="{s}"' in p.query
        # an elastic job's live slices, where the stack trains elastically (prod)
        assert ("liveSlices" in keys) == (cfg.workload.elastic is not None)
        kueue = [k for k in keys if k in ("admissionWait", "sliceProvisioning")]
        queued = pool.capacity.type == "queued"
        assert kueue == (["admissionWait", "sliceProvisioning"] if queued else ["admissionWait"] * cfg.kueue.enabled)


@pytest.mark.parametrize("gen", [g.name for g in GENERATIONS])
def test_hbm_and_mfu_panels_use_the_catalogs_figures(gen: str) -> None:
    g = next(x for x in GENERATIONS if x.name == gen)
    topology = next(iter(g.single_host_topologies))
    v = values("dev")
    v["slicePools"] = [{"name": "p", "generation": gen, "topology": topology, "capacity": {"type": "spot"}}]
    v["workload"] = {}
    zone = zones_of(gen)[0]  # a zone that offers the generation (Cloud TPU regions and zones page)
    v["region"], v["zone"] = zone.rsplit("-", 1)[0], zone
    if gen == "tpu7x":  # tpu7x needs 1.34, and a spot pool's 120 s shutdown 1.35 (config.capacity.Spot)
        v["cluster"] = {**v.get("cluster", {}), "minMasterVersion": "1.35"}
    plan = dashboard_plan(parse_stack_config(v, stack="dev"), "dev")
    hbm = plan.panel("p", "hbmUsed")
    assert hbm.query.endswith(f"/ {g.hbm_gib_per_chip * 2**30}") and f"{g.hbm_gib_per_chip} GiB" in hbm.title
    assert hbm.threshold == 100.0
    assert f"{g.peak_bf16_tflops_per_chip:g} bf16 TFLOP/s" in plan.panel("p", "mfu").title


def test_pools_of_one_shape_share_a_row() -> None:
    """Ray's TPU gauges carry the slice shape, not the pool: two v5p 4x4x4 pools get one row naming both."""
    cfg = parse_stack_config(two_v5p_pools(), stack="prod")
    plan = dashboard_plan(cfg, "prod")
    assert [r.pools for r in plan.rows] == [("v5p-train", "v5p-spot"), ("v6e-flex",)]
    assert "v5p-train + v5p-spot" in plan.rows[0].title


def test_a_pool_no_panel_covers_is_an_error() -> None:
    cfg = shipped_config("prod")
    plan = dashboard_plan(cfg, "prod")
    without = DashboardPlan(plan.display_name, plan.rows[:1])
    with pytest.raises(DashboardError, match="v6e-flex"):
        check_coverage(without, cfg.slice_pools)
    # a row that names the pool but charts another shape's chips does not cover it either
    wrong = PoolRow(("v6e-flex",), plan.rows[1].tpu_slice, plan.rows[0].panels)
    with pytest.raises(DashboardError, match="v6e-flex"):
        check_coverage(DashboardPlan(plan.display_name, (plan.rows[0], wrong)), cfg.slice_pools)
    # and a row missing a training panel
    training = tuple(p for p in plan.rows[1].panels if p.key != "timeToFirstStep")
    short = PoolRow(plan.rows[1].pools, plan.rows[1].tpu_slice, training)
    with pytest.raises(DashboardError, match="v6e-flex"):
        check_coverage(DashboardPlan(plan.display_name, (plan.rows[0], short)), cfg.slice_pools)
    check_coverage(plan, cfg.slice_pools)


def _cells(tile: dict[str, Any]) -> set[tuple[int, int]]:
    return {
        (x, y)
        for x in range(tile["xPos"], tile["xPos"] + tile["width"])
        for y in range(tile["yPos"], tile["yPos"] + tile["height"])
    }


@pytest.mark.parametrize("name", STACKS)
def test_dashboard_json_is_a_mosaic_of_pool_groups(name: str) -> None:
    cfg = shipped_config(name)
    plan = dashboard_plan(cfg, name)
    doc = json.loads(plan.json_text())
    assert set(doc) == {"displayName", "mosaicLayout"} and doc["mosaicLayout"]["columns"] == COLUMNS
    tiles = doc["mosaicLayout"]["tiles"]
    groups = [t for t in tiles if "collapsibleGroup" in t["widget"]]
    charts = [t for t in tiles if "xyChart" in t["widget"]]
    assert len(groups) == len(plan.rows) and len(charts) == sum(len(r.panels) for r in plan.rows)
    used: set[tuple[int, int]] = set()
    for t in charts:
        assert t["xPos"] >= 0 and t["xPos"] + t["width"] <= COLUMNS
        assert not _cells(t) & used, "charts overlap"
        used |= _cells(t)
        (ds,) = t["widget"]["xyChart"]["dataSets"]
        assert set(ds["timeSeriesQuery"]) == {"prometheusQuery", "unitOverride"}
    for g, row in zip(groups, plan.rows, strict=True):  # each group spans exactly its row's charts
        inside = [t for t in charts if _cells(t) <= _cells(g)]
        assert [t["widget"]["title"] for t in inside] == [p.title for p in row.panels]
    assert plan.json_text() == dashboard_plan(shipped_config(name), name).json_text()


@pytest.mark.parametrize("name", STACKS)
def test_dashboard_json_parses_as_the_apis_dashboard_message(name: str) -> None:
    """The Dashboard API's own message types (google-cloud-monitoring-dashboards) read the JSON with unknown fields
    refused, and keep every query and unit."""
    with warnings.catch_warnings():  # google.api_core's notice about Python 3.11's end of life
        warnings.simplefilter("ignore", FutureWarning)
        from google.cloud.monitoring_dashboard_v1 import types as api

    plan = dashboard_plan(shipped_config(name), name)
    board = api.Dashboard.from_json(plan.json_text(), ignore_unknown_fields=False)
    queries = [
        ds.time_series_query.prometheus_query
        for tile in board.mosaic_layout.tiles
        for ds in tile.widget.xy_chart.data_sets
    ]
    assert queries == plan.queries
    assert board.mosaic_layout.columns == COLUMNS
    groups = [t for t in board.mosaic_layout.tiles if "collapsible_group" in t.widget]
    assert len(groups) == len(plan.rows)
    with pytest.raises(Exception, match="prometheusQery"):
        api.Dashboard.from_json(
            plan.json_text().replace('"prometheusQuery"', '"prometheusQery"'), ignore_unknown_fields=False
        )


def test_dashboard_picture_has_a_band_per_row_and_a_box_per_chart() -> None:
    plan = dashboard_plan(shipped_config("prod-dws"), "prod-dws")
    svg = render_dashboard_svg(plan.to_json())
    assert svg.count('class="pool-row"') == 2
    assert svg.count('class="panel"') == sum(len(r.panels) for r in plan.rows)
    assert "ray_tpu_duty_cycle" in svg and "kueue_admission_checks_wait_time_seconds" in svg


# ---- the idle alert -------------------------------------------------------------------------------------------
def test_idle_alert_watches_every_pool_but_the_excluded() -> None:
    v = values("prod")
    v["monitoring"] = {"enabled": True, "idleAlert": {"window": "45m", "excludePools": ["v6e-flex"]}}
    alert = idle_alert_plan(parse_stack_config(v, stack="prod"), "prod")
    assert alert is not None and alert.pools == ("v5p-train",) and alert.duration_seconds == 45 * 60
    assert 'TpuType="tpu-v5p-slice"' in alert.query and "tpu-v6e-slice" not in alert.query
    assert alert.query.endswith("< 1") and alert.query.startswith("max by (ip, ")
    v["monitoring"]["idleAlert"] = {"metric": "tensorcoreUtilization", "belowPercent": 5}
    alert = idle_alert_plan(parse_stack_config(v, stack="prod"), "prod")
    assert alert is not None and "ray_tpu_tensorcore_utilization" in alert.query and alert.query.endswith("< 5")
    v["monitoring"]["idleAlert"] = {"enabled": False}
    assert idle_alert_plan(parse_stack_config(v, stack="prod"), "prod") is None


# ---- bad monitoring settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "path", "words"),
    [
        ({"idleAlert": {"excludePools": ["v6e-flx"]}}, "monitoring.idleAlert.excludePools[0]", "not a slice pool"),
        ({"idleAlert": {"window": 0}}, "monitoring.idleAlert.window", "greater than 0"),
        ({"idleAlert": {"window": "0m"}}, "monitoring.idleAlert.window", "greater than 0"),
        ({"idleAlert": {"window": "-5m"}}, "monitoring.idleAlert.window", "duration like"),
        ({"idleAlert": {"metric": "hbm"}}, "monitoring.idleAlert.metric", "dutyCycle"),
        ({"idleAlert": {"belowPercent": 0}}, "monitoring.idleAlert.belowPercent", "greater than 0"),
        (
            {"idleAlert": {"notificationChannels": ["slack"]}},
            "monitoring.idleAlert.notificationChannels[0]",
            "PROJECT_ID_OR_NUMBER/notificationChannels/CHANNEL_ID",
        ),
        ({"idleAlerts": {}}, "monitoring.idleAlerts", "did you mean 'idleAlert'"),
    ],
)
def test_bad_monitoring_settings_name_the_field(setting: dict[str, Any], path: str, words: str) -> None:
    v = values("prod")
    v["monitoring"] = {"enabled": True, **setting}
    with pytest.raises(ConfigError) as e:
        parse_stack_config(v, stack="prod")
    assert any(p == path and words in text for p, text in e.value.problems), e.value.problems


def test_unknown_pool_is_reported_beside_another_sections_error() -> None:
    """The pool-name rule runs even when another section fails on its own."""
    v = values("prod")
    v["monitoring"] = {"idleAlert": {"excludePools": ["nope"]}}
    v["region"] = "Nowhere"
    with pytest.raises(ConfigError) as e:
        parse_stack_config(v, stack="prod")
    paths = [p for p, _ in e.value.problems]
    assert "monitoring.idleAlert.excludePools[0]" in paths and "region" in paths


def test_excluding_one_of_two_same_shape_pools_is_an_error() -> None:
    v = two_v5p_pools()
    v["monitoring"] = {"enabled": True, "idleAlert": {"excludePools": ["v5p-spot"]}}
    with pytest.raises(ConfigError) as e:
        parse_stack_config(v, stack="prod")
    assert e.value.problems[0][0] == "monitoring.idleAlert.excludePools[0]"
    assert "v5p-train" in e.value.problems[0][1]
    v["monitoring"]["idleAlert"]["excludePools"] = ["v5p-spot", "v5p-train"]
    assert idle_alert_plan(parse_stack_config(v, stack="prod"), "prod") is not None


# ---- every query against a real Prometheus ---------------------------------------------------------------------
def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {value}"


def exposition(cfg: StackConfig, tick: int) -> str:
    """What the producers serve for one slice of every pool, as metric_names and the catalog describe them: Ray's
    per-chip TPU gauges (device plugin ``model`` = GKE accelerator, ``tpu_topology``), the trainer's gauges tagged
    with the run and its slice, and Kueue's histograms per ClusterQueue."""
    lines: list[str] = []
    for i, pool in enumerate(cfg.slice_pools):
        s: TpuSlice = pool.tpu_slice
        for host in range(s.hosts):
            for chip in range(s.chips_per_host):
                labels = {
                    mn.RAY_NODE_IP_LABEL: f"10.0.{i}.{host}",
                    mn.RAY_SESSION_LABEL: "session_1",
                    mn.RAY_TPU_INDEX_LABEL: str(chip),
                    mn.RAY_TPU_DEVICE_NAME_LABEL: f"{host}-{chip}",
                    mn.RAY_TPU_TYPE_LABEL: s.gke_accelerator,
                    mn.RAY_TPU_TOPOLOGY_LABEL: s.topology,
                }
                for name in mn.RAY_TPU_METRICS:
                    lines.append(_line(mn.ray_exported(name), labels, 50.0))
        run = {mn.TRAIN_RUN_TAG: f"run-{pool.name}", mn.TRAIN_SLICE_TAG: str(s)}
        for name in mn.TRAIN_METRICS:
            if name != mn.TRAIN_BADPUT:
                lines.append(_line(mn.ray_exported(name), run, 0.5))
        for bucket in mn.BADPUT_BUCKETS:
            lines.append(_line(mn.ray_exported(mn.TRAIN_BADPUT), {**run, mn.TRAIN_BUCKET_TAG: bucket}, 3.0))
    if cfg.kueue.enabled:
        cq = {mn.KUEUE_CLUSTER_QUEUE_LABEL: kueue_of(cfg).cluster_queue}
        for name in (mn.KUEUE_ADMISSION_WAIT, mn.KUEUE_ADMISSION_CHECKS_WAIT):
            for le in ("1", "10", "100", "+Inf"):
                lines.append(_line(f"{name}_bucket", {**cq, "le": le}, tick * (1 + int(le != "1"))))
            lines.append(_line(f"{name}_sum", cq, tick * 20.0))
            lines.append(_line(f"{name}_count", cq, 2.0 * tick))
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.prometheus
def test_every_query_parses_and_finds_its_series_on_a_real_prometheus(tmp_path: Path) -> None:
    cfg = shipped_config("prod-dws")
    plan = dashboard_plan(cfg, "prod-dws")
    alert = idle_alert_plan(cfg, "prod-dws")
    assert alert is not None
    exporter = Exporter()
    try:
        exporter.set(exposition(cfg, 1))
        with prometheus_scraping(exporter, tmp_path) as prom:
            prom.wait_for_scrapes(1)
            exporter.set(exposition(cfg, 2))
            prom.wait_for_scrapes(3)
            for row in plan.rows:
                pool = next(p for p in cfg.slice_pools if p.name == row.pools[0])
                for panel in row.panels:
                    for source in panel.sources:  # every metric a chart names is served
                        assert prom.series(f'count({{__name__=~"{source}(_bucket)?"}})'), source
                    found = prom.series(panel.query)
                    assert found, f"{row.pools} {panel.title}: {panel.query} finds nothing"
                    if panel.per_chip:  # one series per chip of the slice
                        assert len(found) == pool.tpu_slice.chips, panel.query
                    else:
                        assert len(found) == (len(mn.BADPUT_BUCKETS) if panel.key == "badput" else 1), panel.query
            # The alert's query: valid, one series per host; quiet while the chips work, firing once they idle.
            assert prom.series(alert.query) == []
            hosts = sum(p.tpu_slice.hosts for p in cfg.slice_pools)
            assert len(prom.series(alert.query.rsplit("<", 1)[0])) == hosts
            exporter.set(exposition(cfg, 3).replace(" 50.0\n", " 0.0\n"))
            prom.wait_for_scrapes(5)
            assert len(prom.series(alert.query)) == hosts
            # prod's elastic job: its live-slices query parses (prod-dws's queued capacity cannot train elastically)
            prod = dashboard_plan(shipped_config("prod"), "prod")
            live = next(p for r in prod.rows for p in r.panels if p.key == "liveSlices")
            assert prom.query(live.query)["status"] == "success", live.query
            # and a broken query is refused by the same API (so "success" above means it parsed)
            assert prom.query("ray_tpu_duty_cycle{TpuType=}")["status"] == "error"
    finally:
        exporter.close()
