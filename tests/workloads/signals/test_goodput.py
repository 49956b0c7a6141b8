"""The goodput split of a hand-made event log: each bucket of ml-goodput-measurement's definitions, on a run with
one disruption, and the recorder's log as the train function writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpuray.components.catalog import metric_names as mn
from tpuray.workloads.signals.goodput import (
    EVENTS_FILE,
    GoodputRecorder,
    compute_goodput,
    read_events,
    record_job_event,
)


def _steps(first: int, start: float, durations: list[float], data: float = 0.0) -> list[dict[str, Any]]:
    out, t = [], start
    for i, d in enumerate(durations):
        out.append({"e": "step", "n": first + i, "t": t, "t1": t + d, "data_s": data})
        t += d
    return out


def test_a_disrupted_run_splits_into_the_libraries_buckets() -> None:
    # attempt 1: job start 0, chips ready 10, prep to 12, steps 0-5 (first 3 s, then 1 s; 0.1 s data each),
    # a save 18-19, then steps 4 and 5, which the next attempt redoes (it restores step 4); last sign of life 21.
    # attempt 2 starts 30, chips ready 33, restore 33-35, prep to 36, steps 4-7 (first 2 s, then 1 s), end 41.
    events = [
        {"e": "job_start", "t": 0.0},
        {"e": "attempt_start", "t": 1.0},
        {"e": "tpu_ready", "t": 10.0},
        {"e": "prep_end", "t": 12.0, "step": 0},
        *_steps(0, 12.0, [3.0, 1.0, 1.0, 1.0], data=0.1),
        {"e": "save", "t": 18.0, "t1": 19.0},
        *_steps(4, 19.0, [1.0, 1.0]),
        {"e": "attempt_start", "t": 30.0},
        {"e": "tpu_ready", "t": 33.0},
        {"e": "restore", "t": 33.0, "t1": 35.0},
        {"e": "prep_end", "t": 36.0, "step": 4},
        *_steps(4, 36.0, [2.0, 1.0, 1.0, 1.0]),
        {"e": "job_end", "t": 41.0},
    ]
    g = compute_goodput(events)
    b = g.badput_s
    assert g.elapsed_s == 41.0 and g.restarts == 1
    assert b[mn.BADPUT_TPU_INITIALIZATION] == pytest.approx(10.0 + 3.0)
    assert b[mn.BADPUT_TRAINING_PREP] == pytest.approx(2.0 + (36.0 - 33.0 - 2.0))
    assert b[mn.BADPUT_CHECKPOINT_RESTORE] == pytest.approx(2.0)
    assert b[mn.BADPUT_CHECKPOINT_SAVE] == pytest.approx(1.0)
    assert b[mn.BADPUT_PROGRAM_STARTUP] == pytest.approx((3.0 - 1.0) + (2.0 - 1.0))
    assert b[mn.BADPUT_DATA_LOADING_SYNC] == pytest.approx(0.4)
    assert b[mn.BADPUT_WASTED_PROGRESS] == pytest.approx(21.0 - 19.0)  # steps 4 and 5 of attempt 1
    assert b[mn.BADPUT_INFRASTRUCTURE_RECOVERY] == pytest.approx(30.0 - 21.0)
    assert g.productive_s == pytest.approx((6.0 - 0.4 - 2.0) + (5.0 - 1.0))
    assert g.productive_s + sum(b.values()) == pytest.approx(41.0)
    assert b[mn.BADPUT_OTHER] == pytest.approx(41.0 - g.productive_s - sum(v for k, v in b.items() if k != "other"))
    assert set(b) == set(mn.BADPUT_BUCKETS)


def test_time_to_first_step_is_the_latest_starts_until_its_first_step_ended() -> None:
    first = [
        {"e": "job_start", "t": 0.0},
        {"e": "attempt_start", "t": 1.0},
        {"e": "tpu_ready", "t": 10.0},
        {"e": "prep_end", "t": 12.0, "step": 0},
        *_steps(0, 12.0, [3.0, 1.0]),
    ]
    # the first attempt counts from the job's start (the driver's, before the cluster came up): 0 to 15
    assert compute_goodput(first).time_to_first_step_s == pytest.approx(15.0)
    # restarted at 30, not stepped yet: unknown until it has, not the first attempt's figure
    restarted = [*first, {"e": "attempt_start", "t": 30.0}, {"e": "tpu_ready", "t": 33.0}]
    assert compute_goodput(restarted).time_to_first_step_s is None
    # its first step (36 to 38, after a restore) ends 8 s after the restart
    resumed = [*restarted, {"e": "prep_end", "t": 36.0, "step": 2}, *_steps(2, 36.0, [2.0, 1.0])]
    assert compute_goodput(resumed).time_to_first_step_s == pytest.approx(8.0)
    assert compute_goodput(first[:4]).time_to_first_step_s is None  # no step at all


def test_the_recorder_writes_what_the_split_reads(tmp_path: Path) -> None:
    record_job_event(tmp_path, "job_start")
    rec = GoodputRecorder(tmp_path, enabled=True)
    rec.tpu_ready()
    with rec.restoring():
        pass
    rec.prep_done(0)
    for n in range(3):
        with rec.step(n) as s, s.loading():
            pass
    with rec.saving():
        pass
    record_job_event(tmp_path, "job_end")
    events = read_events(tmp_path / EVENTS_FILE)
    assert [e["e"] for e in events] == ["job_start", "attempt_start", "tpu_ready", "restore", "prep_end"] + [
        "step"
    ] * 3 + ["save", "job_end"]
    g = rec.goodput()
    assert g.productive_s + sum(g.badput_s.values()) == pytest.approx(g.elapsed_s)
    silent = GoodputRecorder(tmp_path / "other", enabled=False)  # the other ranks write nothing
    assert silent.path is None and not (tmp_path / "other").exists()
    with pytest.raises(ValueError, match="job_start"):
        record_job_event(tmp_path, "step")


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    (tmp_path / EVENTS_FILE).write_text('{"e": "job_start", "t": 1.0}\n{"e": "attempt_st')
    assert read_events(tmp_path / EVENTS_FILE) == [{"e": "job_start", "t": 1.0}]


def test_the_trainers_gauges_carry_the_time_to_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuray.workloads.signals import training_metrics

    class Gauge:  # records what ray.util.metrics.Gauge.set would be given
        def __init__(self, name: str) -> None:
            self.name = name
            self.sets: list[tuple[float, dict[str, str]]] = []

        def set(self, value: float, tags: dict[str, str]) -> None:
            self.sets.append((value, tags))

    gauges: dict[str, Gauge] = {}
    monkeypatch.setattr(training_metrics, "_gauge", lambda name: gauges.setdefault(name, Gauge(name)))
    g = compute_goodput([{"e": "job_start", "t": 0.0}, {"e": "attempt_start", "t": 1.0}, *_steps(0, 5.0, [2.0, 1.0])])
    done = training_metrics.report_step_metrics("r1", "v6e:2x4", goodput=g)
    assert done[mn.TRAIN_TIME_TO_FIRST_STEP] == pytest.approx(7.0)
    assert gauges[mn.TRAIN_TIME_TO_FIRST_STEP].sets == [(7.0, {mn.TRAIN_RUN_TAG: "r1", mn.TRAIN_SLICE_TAG: "v6e:2x4"})]
    assert set(mn.TRAIN_METRICS) <= set(training_metrics._HELP)  # every exported name has its help text
    assert mn.TRAIN_LIVE_SLICES not in done  # a fixed-size run: no live slices
    done = training_metrics.report_step_metrics("r1", "v6e:2x4", live_slices=2)
    assert gauges[mn.TRAIN_LIVE_SLICES].sets == [(2.0, {mn.TRAIN_RUN_TAG: "r1", mn.TRAIN_SLICE_TAG: "v6e:2x4"})]
