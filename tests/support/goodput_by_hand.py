"""The goodput split of an emulated run, computed by hand from the run's own event log, against the module's.

Written out bucket by bucket for a run of two attempts (one disruption), from the definitions of
``ml-goodput-measurement`` (see :mod:`tpuray.workloads.signals.goodput`), so a slip in the module's arithmetic shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpuray.components.catalog import metric_names as mn
from tpuray.workloads.signals.goodput import EVENTS_FILE, compute_goodput, read_events

TOLERANCE = 0.02
"""Each bucket agrees with the hand split within this share of the wall time."""


def _dur(e: dict[str, Any]) -> float:
    return float(e["t1"] - e["t"])


def _startup_and_rest(steps: list[dict[str, Any]]) -> tuple[float, float]:
    """(first step's excess over the mean of the others, the steps' total time)."""
    d = [_dur(s) for s in steps]
    return max(0.0, d[0] - sum(d[1:]) / (len(d) - 1)), sum(d)


def check_goodput_by_hand(run_dir: Path, resumed_at: int, lost_steps: list[int] | None = None) -> dict[str, float]:
    """Assert the module's split of ``run_dir``'s log matches the hand split; returns the hand split.
    ``lost_steps``: the steps the first attempt ran that the second redid, if the test knows them."""
    events = read_events(run_dir / EVENTS_FILE)
    (job_start,) = [e["t"] for e in events if e["e"] == "job_start"]
    (job_end,) = [e["t"] for e in events if e["e"] == "job_end"]
    wall = job_end - job_start
    cut = [i for i, e in enumerate(events) if e["e"] == "attempt_start"]
    assert len(cut) == 2, f"expected two attempts, the log has {len(cut)}"
    first, second = events[cut[0] : cut[1]], [e for e in events[cut[1] :] if e["e"] != "job_end"]

    def one(att: list[dict[str, Any]], kind: str) -> dict[str, Any]:
        (e,) = [e for e in att if e["e"] == kind]
        return e

    steps1 = [e for e in first if e["e"] == "step"]
    steps2 = [e for e in second if e["e"] == "step"]
    assert one(second, "prep_end")["step"] == resumed_at
    if lost_steps is not None:
        assert [s["n"] for s in steps1 if s["n"] >= resumed_at] == lost_steps, "the log's steps after the resume point"
    kept1 = [s for s in steps1 if s["n"] < resumed_at]
    last1 = max(e.get("t1", e["t"]) for e in first)
    a2 = one(second, "attempt_start")["t"]
    saves1 = [e for e in first if e["e"] == "save"]
    lost_from = next((s["t"] for s in steps1 if s["n"] >= resumed_at), None)

    startup1, total1 = _startup_and_rest(kept1)
    startup2, total2 = _startup_and_rest(steps2)
    data = sum(s["data_s"] for s in kept1 + steps2)
    restore = sum(_dur(e) for e in events if e["e"] == "restore")
    hand = {
        mn.BADPUT_TPU_INITIALIZATION: (one(first, "tpu_ready")["t"] - job_start) + (one(second, "tpu_ready")["t"] - a2),
        mn.BADPUT_CHECKPOINT_RESTORE: restore,
        mn.BADPUT_TRAINING_PREP: (one(first, "prep_end")["t"] - one(first, "tpu_ready")["t"])
        + (one(second, "prep_end")["t"] - one(second, "tpu_ready")["t"])
        - restore,
        mn.BADPUT_CHECKPOINT_SAVE: sum(_dur(e) for e in events if e["e"] == "save"),
        mn.BADPUT_DATA_LOADING_SYNC: data,
        mn.BADPUT_PROGRAM_STARTUP: startup1 + startup2,
        mn.BADPUT_WASTED_PROGRESS: 0.0
        if lost_from is None
        else last1 - lost_from - sum(_dur(e) for e in saves1 if e["t"] >= lost_from),
        mn.BADPUT_INFRASTRUCTURE_RECOVERY: a2 - last1,
    }
    productive = total1 + total2 - data - startup1 - startup2
    hand[mn.BADPUT_OTHER] = wall - productive - sum(hand.values())

    g = compute_goodput(events)
    assert g.elapsed_s == wall and g.restarts == 1
    assert abs(g.productive_s - productive) <= TOLERANCE * wall, (g.productive_s, productive)
    for bucket, seconds in hand.items():
        assert abs(g.badput_s[bucket] - seconds) <= TOLERANCE * wall, (bucket, g.badput_s[bucket], seconds, wall)
    assert g.productive_s + sum(g.badput_s.values()) == pytest.approx(wall)
    assert hand[mn.BADPUT_INFRASTRUCTURE_RECOVERY] > 0 and hand[mn.BADPUT_TPU_INITIALIZATION] > 0
    return {**hand, "productive": productive, "wall": wall}
