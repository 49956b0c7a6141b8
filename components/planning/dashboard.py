"""The stack's Cloud Monitoring dashboard and its idle-slice alert, derived from the topology, as plain data.

Pure Python; imports no Pulumi. One row per slice pool (pools of one slice shape share theirs: the metrics carry the
shape, not the pool), each row a collapsible group of PromQL charts:

- per chip: duty cycle, TensorCore utilisation, HBM used against the generation's HBM per chip (the catalog's);
- training: step time, tokens/s per chip, MFU against the catalog's peak bf16 TFLOP/s per chip;
- goodput and badput by cause; where the job trains elastically (``workload.elastic``), its live slices;
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

from tpuray.components.catalog import metric_names as m
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import SlicePoolConfig, StackConfig, slice_shape
from tpuray.components.planning.kueue import cluster_queue_name

__all__ = [
    "COLUMNS",
    "AlertPlan",
    "DashboardError",
    "DashboardPlan",
    "Panel",
    "PoolRow",
    "dashboard_plan",
    "idle_alert_plan",
    "shape_selector",
    "training_selector",
]

COLUMNS = 48
"""Mosaic grid width (the API allows 1 to 48)."""
PANEL_W = 12
PANEL_H = 16
HEADER_H = 1
"""One grid row for a collapsible group's title, above the charts it spans."""


class DashboardError(ValueError):
    """A dashboard that does not cover the stack's slice pools (a planner bug, never bad config)."""


@dataclass(frozen=True)
class Panel:
    """One chart of a pool's row."""

    key: str
    """What it shows, e.g. ``dutyCycle`` (the idle alert's ``metric`` names one of these)."""
    title: str
    query: str
    """PromQL; TPU charts select the row's shape (:func:`shape_selector`), training charts its runs
    (:func:`training_selector`), Kueue charts the stack's ClusterQueue."""
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
    """The row of one slice shape: its pools (usually one) and their charts."""

    pools: tuple[str, ...]
    tpu_slice: TpuSlice
    panels: tuple[Panel, ...]

    @property
    def title(self) -> str:
        s = self.tpu_slice
        shared = " (one slice shape: Ray's TPU metrics carry the shape, not the pool)" if len(self.pools) > 1 else ""
        return f"{' + '.join(self.pools)}: {s.generation} {s.topology} ({s.pod_type}), {s.chips} chips a slice{shared}"


@dataclass(frozen=True)
class DashboardPlan:
    display_name: str
    rows: tuple[PoolRow, ...]

    def row(self, pool: str) -> PoolRow:
        return next(r for r in self.rows if pool in r.pools)

    def panel(self, pool: str, key: str) -> Panel:
        return next(p for p in self.row(pool).panels if p.key == key)

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
            tiles.append(
                {
                    "xPos": 0,
                    "yPos": y,
                    "width": COLUMNS,
                    "height": HEADER_H + lines * PANEL_H,
                    "widget": {
                        "title": row.title,
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
RAY_DUTY_CYCLE = m.ray_exported(m.RAY_TPU_DUTY_CYCLE)
RAY_TENSORCORE = m.ray_exported(m.RAY_TPU_TENSORCORE_UTILIZATION)
RAY_MEMORY_USED = m.ray_exported(m.RAY_TPU_MEMORY_USED)
STEP_TIME = m.ray_exported(m.TRAIN_STEP_TIME)
TOKENS_PER_CHIP = m.ray_exported(m.TRAIN_TOKENS_PER_CHIP)
MFU = m.ray_exported(m.TRAIN_MFU)
GOODPUT = m.ray_exported(m.TRAIN_GOODPUT)
BADPUT = m.ray_exported(m.TRAIN_BADPUT)
TIME_TO_FIRST_STEP = m.ray_exported(m.TRAIN_TIME_TO_FIRST_STEP)
LIVE_SLICES = m.ray_exported(m.TRAIN_LIVE_SLICES)
IDLE_METRICS = {"dutyCycle": RAY_DUTY_CYCLE, "tensorcoreUtilization": RAY_TENSORCORE}
"""The config's ``idleAlert.metric`` -> the per-chip gauge it watches."""
TRAINING_KEYS = frozenset({"stepTime", "tokensPerChip", "mfu", "goodput", "badput", "timeToFirstStep"})


def shape_selector(s: TpuSlice) -> str:
    """The label matchers of one slice shape's per-chip TPU series.

    Ray's reporter agent tags each chip's gauges with the device plugin's ``model`` (GKE's accelerator label value)
    and ``tpu_topology``; the pool is not among its tags, so pools of one shape share a row.
    """
    return f'{m.RAY_TPU_TYPE_LABEL}="{s.gke_accelerator}",{m.RAY_TPU_TOPOLOGY_LABEL}="{s.topology}"'


def training_selector(slices: Sequence[TpuSlice]) -> str:
    """The label matcher of the training metrics of runs on these slice shapes (their ``tpu_slice`` tag)."""
    specs = sorted({str(s) for s in slices})
    if len(specs) == 1:
        return f'{m.TRAIN_SLICE_TAG}="{specs[0]}"'
    return f'{m.TRAIN_SLICE_TAG}=~"{"|".join(specs)}"'


def _tpu_panels(s: TpuSlice) -> list[Panel]:
    sel = shape_selector(s)
    chip_legend = "${" + m.RAY_NODE_IP_LABEL + "} chip ${" + m.RAY_TPU_INDEX_LABEL + "}"
    hbm = s.spec.hbm_gib_per_chip
    return [
        Panel("dutyCycle", "TPU duty cycle per chip (%)", f"{RAY_DUTY_CYCLE}{{{sel}}}", "%", True, (RAY_DUTY_CYCLE,),
              chip_legend),
        Panel("tensorcoreUtilization", "TensorCore utilisation per chip (%)", f"{RAY_TENSORCORE}{{{sel}}}", "%",
              True, (RAY_TENSORCORE,), chip_legend),
        # The catalog's HBM per chip, not the plugin's memory_total: a chip that reports less than the generation
        # has shows up as never reaching 100 %.
        Panel("hbmUsed", f"HBM used per chip (% of {s.generation}'s {hbm} GiB)",
              f"100 * {RAY_MEMORY_USED}{{{sel}}} / {s.hbm_bytes_per_chip}", "%", True, (RAY_MEMORY_USED,),
              chip_legend, threshold=100.0),
    ]  # fmt: skip


def _training_panels(slices: Sequence[TpuSlice]) -> list[Panel]:
    sel = training_selector(slices)
    s = slices[0]
    peak = s.spec.peak_bf16_tflops_per_chip
    run = m.TRAIN_RUN_TAG
    bucket = m.TRAIN_BUCKET_TAG
    return [
        Panel("stepTime", "Step time, median so far (s)", f"max by ({run}) ({STEP_TIME}{{{sel}}})", "s", False,
              (STEP_TIME,), "${" + run + "}"),
        Panel("tokensPerChip", "Tokens/s per chip", f"avg by ({run}) ({TOKENS_PER_CHIP}{{{sel}}})", "1/s", False,
              (TOKENS_PER_CHIP,), "${" + run + "}"),
        # The trainer computes MFU against the catalog's peak (metric_names.TRAIN_MFU); the title says which peak.
        Panel("mfu", f"MFU (% of {peak:g} bf16 TFLOP/s per {s.generation} chip)",
              f"100 * avg by ({run}) ({MFU}{{{sel}}})", "%", False, (MFU,), "${" + run + "}", threshold=100.0),
        Panel("goodput", "Goodput (% of run time making progress)",
              f"100 * max by ({run}) ({GOODPUT}{{{sel}}})", "%", False, (GOODPUT,), "${" + run + "}"),
        Panel("badput", "Badput by cause (s)", f"max by ({run}, {bucket}) ({BADPUT}{{{sel}}})", "s", False,
              (BADPUT,), "${" + run + "} ${" + bucket + "}"),
        # what a start costs before training moves: TPU initialisation, prep, restore and the first compile
        # (metric_names.TRAIN_TIME_TO_FIRST_STEP); a warm compile cache shows here as a shorter bar after a restart
        Panel("timeToFirstStep", "Time to first step, latest start (s)",
              f"max by ({run}) ({TIME_TO_FIRST_STEP}{{{sel}}})", "s", False, (TIME_TO_FIRST_STEP,), "${" + run + "}"),
    ]  # fmt: skip


def _live_slices_panel(slices: Sequence[TpuSlice]) -> Panel:
    """An elastic job's live slices (``workload.elastic``): a step down is a lost slice, a step up its return."""
    run = m.TRAIN_RUN_TAG
    return Panel("liveSlices", "Live slices of elastic runs (each step is a resize)",
                 f"max by ({run}) ({LIVE_SLICES}{{{training_selector(slices)}}})", "1", False, (LIVE_SLICES,),
                 "${" + run + "}")  # fmt: skip


def _kueue_panels(pools: Sequence[SlicePoolConfig], cluster_queue: str) -> list[Panel]:
    """Kueue's histograms are per ClusterQueue (one per stack), so these charts are the queue's, shown in each
    pool's row for reading beside its chips."""
    cq = f'{m.KUEUE_CLUSTER_QUEUE_LABEL}="{cluster_queue}"'

    def p90(name: str) -> str:
        return f"histogram_quantile(0.9, sum by (le) (rate({name}_bucket{{{cq}}}[30m])))"

    panels = [
        Panel("admissionWait", "Kueue admission wait, p90 (s)", p90(m.KUEUE_ADMISSION_WAIT), "s", False,
              (m.KUEUE_ADMISSION_WAIT,))
    ]  # fmt: skip
    if any(p.capacity.queued_provisioning for p in pools):
        # A queued-provisioning pool's admission check is its ProvisioningRequest: quota reservation -> admission is
        # the time GKE took to provision the slice.
        panels.append(
            Panel("sliceProvisioning", "Slice provisioning (DWS), p90 (s)",
                  p90(m.KUEUE_ADMISSION_CHECKS_WAIT), "s", False, (m.KUEUE_ADMISSION_CHECKS_WAIT,))
        )  # fmt: skip
    return panels


# ---- plans ------------------------------------------------------------------------------------------------
def _shape_groups(cfg: StackConfig) -> list[list[SlicePoolConfig]]:
    groups: dict[tuple[str, str], list[SlicePoolConfig]] = {}
    for pool in cfg.slice_pools:
        groups.setdefault(slice_shape(pool.tpu_slice), []).append(pool)
    return list(groups.values())


def dashboard_plan(cfg: StackConfig, stack: str) -> DashboardPlan:
    """The dashboard of a stack: one row per slice pool (pools of one slice shape share theirs)."""
    cluster_queue = cluster_queue_name(cfg.cluster.name) if cfg.kueue.enabled else None
    rows = []
    for group in _shape_groups(cfg):
        slices = [p.tpu_slice for p in group]
        panels = _tpu_panels(slices[0]) + _training_panels(slices)
        if cfg.workload.elastic is not None:
            panels.append(_live_slices_panel(slices))
        if cluster_queue is not None:
            panels += _kueue_panels(group, cluster_queue)
        rows.append(PoolRow(tuple(p.name for p in group), slices[0], tuple(panels)))
    plan = DashboardPlan(display_name=f"tpuray {stack}: TPU slices", rows=tuple(rows))
    check_coverage(plan, cfg.slice_pools)
    return plan


def check_coverage(plan: DashboardPlan, pools: Sequence[SlicePoolConfig]) -> None:
    """Every slice pool is in a row whose per-chip panels select its slice shape and whose training panels select
    its runs; a pool no panel covers is a :class:`DashboardError` naming it."""
    uncovered: list[str] = []
    for pool in pools:
        rows = [r for r in plan.rows if pool.name in r.pools]
        tpu = [p for r in rows for p in r.panels if p.per_chip and shape_selector(pool.tpu_slice) in p.query]
        spec = str(pool.tpu_slice)
        training = {p.key for r in rows for p in r.panels if p.key in TRAINING_KEYS and spec in p.query}
        if len(rows) != 1 or not tpu or training != TRAINING_KEYS:
            uncovered.append(pool.name)
    if uncovered:
        raise DashboardError(f"no dashboard row covers slice pool(s) {', '.join(uncovered)}")


def idle_alert_plan(cfg: StackConfig, stack: str) -> AlertPlan | None:
    """The held-but-idle alert: every chip of a host of a watched slice shape under ``belowPercent`` for
    ``window``, while its Ray worker pod runs.

    "While its pods run": Ray's TPU gauges exist only while a Ray worker pod runs on the host (its reporter agent
    exports them), so a host without a pod has no series and never fires; one with a pod whose chips sit idle
    does. One series per host (``ip``): an idle multi-host slice opens an incident per host.
    """
    alert = cfg.monitoring.idle_alert
    if not alert.enabled:
        return None
    watched = [p for p in cfg.slice_pools if p.name not in alert.exclude_pools]
    if not watched:
        return None
    metric = IDLE_METRICS[alert.metric]
    shapes = sorted({(p.tpu_slice.gke_accelerator, p.tpu_slice.topology) for p in watched})
    matchers = " or ".join(
        f'{metric}{{{m.RAY_TPU_TYPE_LABEL}="{acc}",{m.RAY_TPU_TOPOLOGY_LABEL}="{topo}"}}' for acc, topo in shapes
    )
    by = f"{m.RAY_NODE_IP_LABEL}, {m.RAY_TPU_TYPE_LABEL}, {m.RAY_TPU_TOPOLOGY_LABEL}"
    query = f"max by ({by}) ({matchers}) < {alert.below_percent:g}"
    doc = (
        f"Every chip of TPU host {{{{$labels.{m.RAY_NODE_IP_LABEL}}}}} ({{{{$labels.{m.RAY_TPU_TYPE_LABEL}}}}} "
        f"{{{{$labels.{m.RAY_TPU_TOPOLOGY_LABEL}}}}}) has had {alert.metric} below {alert.below_percent:g}% for "
        f"{alert.window // 60} min while its Ray worker pod runs: the slice is held (and paid for) but idle. "
        f"Watched pools: {', '.join(p.name for p in watched)}. Check the training job, or scale the pool down."
    )
    return AlertPlan(
        display_name=f"tpuray {stack}: TPU slice held but idle",
        query=query,
        duration_seconds=alert.window,
        notification_channels=tuple(alert.notification_channels),
        pools=tuple(p.name for p in watched),
        documentation=doc,
    )
