"""The stack's Cloud Monitoring dashboard and its idle-slice alert, derived from the topology, as plain data.

Pure Python; imports no Pulumi. One row per slice pool, each row a collapsible group of PromQL charts:

- per chip: duty cycle, TensorCore utilisation, HBM used against the generation's HBM per chip (the catalog's);
- training: step time, tokens/s per chip, MFU against the catalog's peak bf16 TFLOP/s per chip;
- goodput and badput by cause;
- where Kueue admits the pool: admission wait and (queued pools) slice provisioning time.

The dashboard JSON is the Cloud Monitoring API's ``Dashboard`` object
(https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards), which ``gcp.monitoring.Dashboard``
takes as ``dashboard_json``: a ``mosaicLayout`` of at most 48 columns (google-apis-monitoring_v1 ``MosaicLayout``:
"between 1 and 48"), tiles holding widgets, an ``xyChart`` whose data sets carry a ``TimeSeriesQuery`` with
``prometheusQuery`` (the PromQL form of ``TimeSeriesQuery``, beside ``timeSeriesFilter`` and
``timeSeriesQueryLanguage``: @google-cloud/monitoring-dashboards ``ITimeSeriesQuery``), and a ``collapsibleGroup``
widget grouping the tiles it spans (googleapis ``google/monitoring/dashboard/v1/collapsible_group.proto``).

The alert is a ``conditionPrometheusQueryLanguage`` condition (pulumi-gcp ``AlertPolicyConditionConditionPrometheus
QueryLanguageArgs``: ``query``, ``duration``, ``evaluation_interval`` a multiple of 30 s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.config import Queued, SlicePoolConfig, StackConfig
from tpuray.components.planning import dashboard_metrics as m
from tpuray.components.planning.kueue import kueue_spec
from tpuray.components.topology import TpuSlice

__all__ = [
    "COLUMNS",
    "AlertPlan",
    "DashboardError",
    "DashboardPlan",
    "Panel",
    "PoolRow",
    "dashboard_plan",
    "idle_alert_plan",
    "pool_selector",
]

COLUMNS = 48
"""Mosaic grid width (the API allows 1 to 48)."""
PANEL_W = 12
PANEL_H = 16
HEADER_H = 1
"""A collapsible group's own header takes no room of its own: it spans the tiles below its top edge."""
RATE_WINDOW = "5m"


class DashboardError(ValueError):
    """A dashboard that does not cover the stack's slice pools (a planner bug, never bad config)."""


@dataclass(frozen=True)
class Panel:
    """One chart of a pool's row."""

    key: str
    """What it shows, e.g. ``dutyCycle`` (the idle alert's ``metric`` names one of these)."""
    title: str
    query: str
    """PromQL; every query selects the pool's series with :func:`pool_selector` (or its ClusterQueue's)."""
    unit: str
    """``unitOverride``: a UCUM unit as Cloud Monitoring writes it (``%``, ``s``, ``1/s``, ``By``)."""
    per_chip: bool
    """One series per chip (the TPU panels)."""
    sources: tuple[str, ...]
    """The metric names the query reads."""
    legend: str = ""
    threshold: float | None = None
    """A horizontal line (e.g. 100 % of the chip's HBM)."""


@dataclass(frozen=True)
class PoolRow:
    pool: str
    tpu_slice: TpuSlice
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class DashboardPlan:
    display_name: str
    rows: tuple[PoolRow, ...]

    def panel(self, pool: str, key: str) -> Panel:
        row = next(r for r in self.rows if r.pool == pool)
        return next(p for p in row.panels if p.key == key)

    @property
    def queries(self) -> list[str]:
        return [p.query for r in self.rows for p in r.panels]

    def to_json(self) -> dict[str, Any]:
        """The ``Dashboard`` object: per pool, a collapsible group over its charts, four charts a line."""
        tiles: list[dict[str, Any]] = []
        y = 0
        per_line = COLUMNS // PANEL_W
        for row in self.rows:
            lines = -(-len(row.panels) // per_line)
            s = row.tpu_slice
            tiles.append(
                {
                    "xPos": 0,
                    "yPos": y,
                    "width": COLUMNS,
                    "height": HEADER_H + lines * PANEL_H,
                    "widget": {
                        "title": f"{row.pool}: {s.generation} {s.topology} ({s.pod_type}), {s.chips} chips a slice",
                        "collapsibleGroup": {"collapsed": False},
                    },
                }
            )
            for i, p in enumerate(row.panels):
                tiles.append(
                    {
                        "xPos": (i % per_line) * PANEL_W,
                        "yPos": y + HEADER_H + (i // per_line) * PANEL_H,
                        "width": PANEL_W,
                        "height": PANEL_H,
                        "widget": {"title": p.title, "xyChart": _chart(p)},
                    }
                )
            y += HEADER_H + lines * PANEL_H
        return {"displayName": self.display_name, "mosaicLayout": {"columns": COLUMNS, "tiles": tiles}}

    def json_text(self) -> str:
        """``dashboard_json``: sorted keys, so the same stack gives the same bytes."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _chart(p: Panel) -> dict[str, Any]:
    data_set: dict[str, Any] = {
        "plotType": "LINE",
        "timeSeriesQuery": {"prometheusQuery": p.query, "unitOverride": p.unit},
    }
    if p.legend:
        data_set["legendTemplate"] = p.legend
    chart: dict[str, Any] = {"chartOptions": {"mode": "COLOR"}, "dataSets": [data_set]}
    if p.threshold is not None:
        chart["thresholds"] = [{"label": "", "value": p.threshold}]
    return chart


@dataclass(frozen=True)
class AlertPlan:
    """The idle-slice alert policy."""

    display_name: str
    query: str
    duration_seconds: int
    notification_channels: tuple[str, ...]
    pools: tuple[str, ...]
    documentation: str


# ---- queries ----------------------------------------------------------------------------------------------
def pool_selector(pool: str) -> str:
    """The label matcher of one pool's series: Managed Prometheus copies the pod's pool label onto every sample
    it scrapes from the pool's Ray pods (see :mod:`.dashboard_metrics`)."""
    return f'{m.POOL_METRIC_LABEL}="{pool}"'


def _tpu_panels(pool: str, s: TpuSlice) -> list[Panel]:
    sel = pool_selector(pool)
    chip_legend = "${" + m.HOST_LABEL + "} chip ${" + m.CHIP_INDEX_LABEL + "}"
    hbm = s.spec.hbm_gib_per_chip
    return [
        Panel(
            "dutyCycle",
            "TPU duty cycle per chip (%)",
            f"{m.TPU_DUTY_CYCLE}{{{sel}}}",
            "%",
            True,
            (m.TPU_DUTY_CYCLE,),
            chip_legend,
        ),
        Panel(
            "tensorcoreUtilization",
            "TensorCore utilisation per chip (%)",
            f"{m.TPU_TENSORCORE_UTILIZATION}{{{sel}}}",
            "%",
            True,
            (m.TPU_TENSORCORE_UTILIZATION,),
            chip_legend,
        ),
        Panel(
            "hbmUsed",
            f"HBM used per chip (% of {s.generation}'s {hbm} GiB)",
            f"100 * {m.TPU_MEMORY_USED}{{{sel}}} / {s.hbm_bytes_per_chip}",
            "%",
            True,
            (m.TPU_MEMORY_USED,),
            chip_legend,
            threshold=100.0,
        ),
    ]


def _training_panels(pool: str, s: TpuSlice) -> list[Panel]:
    sel = pool_selector(pool)
    peak = s.spec.peak_bf16_tflops_per_chip
    w = RATE_WINDOW
    return [
        Panel(
            "stepTime",
            "Step time (s)",
            f"sum by ({m.RUN_LABEL}) (rate({m.STEP_SECONDS}_sum{{{sel}}}[{w}])) / "
            f"sum by ({m.RUN_LABEL}) (rate({m.STEP_SECONDS}_count{{{sel}}}[{w}]))",
            "s",
            False,
            (m.STEP_SECONDS,),
        ),
        Panel(
            "tokensPerChip",
            "Tokens/s per chip",
            f"avg by ({m.RUN_LABEL}) ({m.TOKENS_PER_SECOND_PER_CHIP}{{{sel}}})",
            "1/s",
            False,
            (m.TOKENS_PER_SECOND_PER_CHIP,),
        ),
        Panel(
            "mfu",
            f"MFU (% of {peak:g} bf16 TFLOP/s per {s.generation} chip)",
            f"100 * avg by ({m.RUN_LABEL}) ({m.MODEL_TFLOPS_PER_CHIP}{{{sel}}}) / {peak:g}",
            "%",
            False,
            (m.MODEL_TFLOPS_PER_CHIP,),
            threshold=100.0,
        ),
        Panel(
            "goodput",
            "Goodput (% of chip-time that made progress)",
            f"100 * max by ({m.RUN_LABEL}) ({m.GOODPUT_RATIO}{{{sel}}})",
            "%",
            False,
            (m.GOODPUT_RATIO,),
        ),
        Panel(
            "badput",
            "Badput by cause (s)",
            f"max by ({m.RUN_LABEL}, {m.BADPUT_CAUSE_LABEL}) ({m.BADPUT_SECONDS}{{{sel}}})",
            "s",
            False,
            (m.BADPUT_SECONDS,),
            "${" + m.BADPUT_CAUSE_LABEL + "}",
        ),
    ]


def _kueue_panels(pool: SlicePoolConfig, cluster_queue: str) -> list[Panel]:
    """Kueue's histograms are per ClusterQueue (kueue pkg/metrics/metrics.go); the stack has one."""
    cq = f'{m.KUEUE_CLUSTER_QUEUE_LABEL}="{cluster_queue}"'
    w = "30m"

    def p90(name: str) -> str:
        return f"histogram_quantile(0.9, sum by (le) (rate({name}_bucket{{{cq}}}[{w}])))"

    panels = [
        Panel(
            "admissionWait",
            "Kueue admission wait, p90 (s)",
            p90(m.KUEUE_ADMISSION_WAIT),
            "s",
            False,
            (m.KUEUE_ADMISSION_WAIT,),
        )
    ]
    if isinstance(pool.capacity, Queued):
        # A queued pool's admission check is its ProvisioningRequest: the time from quota reservation to admission
        # is the time GKE took to provision the slice.
        panels.append(
            Panel(
                "sliceProvisioning",
                "Slice provisioning (admission checks), p90 (s)",
                p90(m.KUEUE_ADMISSION_CHECKS_WAIT),
                "s",
                False,
                (m.KUEUE_ADMISSION_CHECKS_WAIT,),
            )
        )
    return panels


# ---- plans ------------------------------------------------------------------------------------------------
def dashboard_plan(cfg: StackConfig, stack: str) -> DashboardPlan:
    """The dashboard of a stack: one row per slice pool."""
    cluster_queue = kueue_spec(cfg).cluster_queue if cfg.kueue.enabled else None
    rows = []
    for pool in cfg.slice_pools:
        panels = _tpu_panels(pool.name, pool.tpu_slice) + _training_panels(pool.name, pool.tpu_slice)
        if cluster_queue is not None:
            panels += _kueue_panels(pool, cluster_queue)
        rows.append(PoolRow(pool.name, pool.tpu_slice, tuple(panels)))
    plan = DashboardPlan(display_name=f"tpuray {stack}: TPU slices", rows=tuple(rows))
    check_coverage(plan, [p.name for p in cfg.slice_pools])
    return plan


def check_coverage(plan: DashboardPlan, pools: Sequence[str]) -> None:
    """Every slice pool has its row, and every TPU panel of a row selects that pool's series and no other's."""
    rows = {r.pool: r for r in plan.rows}
    missing = [p for p in pools if p not in rows or not rows[p].panels]
    if missing:
        raise DashboardError(f"no dashboard panel covers slice pool(s) {', '.join(missing)}")
    for r in plan.rows:
        per_chip = [p for p in r.panels if p.per_chip]
        if not per_chip:
            raise DashboardError(f"slice pool {r.pool}: no per-chip TPU panel")
        for p in r.panels:
            if (p.per_chip or p.key in TRAINING_KEYS) and pool_selector(r.pool) not in p.query:
                raise DashboardError(f"slice pool {r.pool}: panel {p.title!r} does not select the pool's series")


TRAINING_KEYS = frozenset({"stepTime", "tokensPerChip", "mfu", "goodput", "badput"})


def idle_alert_plan(cfg: StackConfig, stack: str) -> AlertPlan | None:
    """The held-but-idle alert: a pool's chips all under ``belowPercent`` for ``window`` while its pods run.

    "While its pods run": the TPU series exist only while a Ray worker pod of the pool runs on the slice (the
    device plugin serves them for containers that hold chips), so ``max`` over a pool's chips is absent, not 0,
    when nothing runs, and a pool without pods never fires.
    """
    alert = cfg.monitoring.idle_alert
    if not alert.enabled:
        return None
    pools = tuple(p.name for p in cfg.slice_pools if p.name not in alert.exclude_pools)
    if not pools:
        return None
    metric = {"dutyCycle": m.TPU_DUTY_CYCLE, "tensorcoreUtilization": m.TPU_TENSORCORE_UTILIZATION}[alert.metric]
    pool_re = "|".join(pools)
    query = f'max by ({m.POOL_METRIC_LABEL}) ({metric}{{{m.POOL_METRIC_LABEL}=~"{pool_re}"}}) < {alert.below_percent:g}'
    doc = (
        f"Every chip of slice pool {{{{$labels.{m.POOL_METRIC_LABEL}}}}} has had {alert.metric} below "
        f"{alert.below_percent:g}% for {alert.window // 60} min while its Ray worker pods run: the slice is held "
        "(and paid for) but idle. Check the training job, or scale the pool down."
    )
    return AlertPlan(
        display_name=f"tpuray {stack}: TPU slice held but idle",
        query=query,
        duration_seconds=alert.window,
        notification_channels=tuple(alert.notification_channels),
        pools=pools,
        documentation=doc,
    )
