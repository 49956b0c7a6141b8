"""Goodput and badput of a training run, as Google's ML goodput definitions split them.

The buckets are those of ``ml-goodput-measurement`` (AI-Hypercomputer/ml-goodput-measurement, PyPI
``ml-goodput-measurement`` 0.2.x, ``goodput_utils.BadputType``), named in :mod:`tpuray.components.catalog.metric_names`.
That library reads its events back from Cloud Logging and writes Cloud Monitoring, so it cannot run off GCP (and
it would upgrade the protobuf Ray runs on); this module records the same events to a JSON-lines file in the run's
directory and does the same arithmetic:

* elapsed: from the job's start (the driver) to its end, or to the newest event while it runs;
* ``tpu_initialization``: from an attempt's start (the job's start, for the first) until the chips are ready;
* ``training_prep``: from then until the first step, less checkpoint restore;
* ``unproductive_checkpoint_restore_time`` and ``unproductive_checkpoint_save_time``: blocking restore and save;
* ``data_loading_sync``: blocking data loading inside the steps that count;
* ``program_startup``: an attempt's first step beyond the attempt's mean step time (XLA compilation), as
  the library's ``first step time - average step time``;
* ``wasted_progress_from_disruption``: from the start of the first step an attempt ran that the next attempt
  redid (it resumed from an earlier checkpoint) until the attempt's last event, less saves in between;
* ``infrastructure_recovery_from_disruption``: from an attempt's last event until the next attempt starts;
* ``other``: the rest of elapsed time that is not productive (reports, logging, the driver's own set-up).

Productive time is the steps that count, less their data loading and start-up excess. Only the recording rank
writes (one writer; all ranks run the same steps).

An elastic run (its worker group resized between attempts) records each attempt's live slices (``size``) and each
resize (``resize``: from, to, the step it resumed at, the cause). Steps at a reduced size are productive at their own
rate: they count as productive time, split by live slices (``productive_s_by_slices``), and
``full_size_equivalent_s`` scales each size's share by its slices over the most, the time the same work would have
taken at full size. The split of elapsed time is unchanged: the time to shrink or grow back is the attempts'
recovery and start-up, as for any restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuray.components.catalog import metric_names as mn

__all__ = [
    "EVENTS_FILE",
    "JOB_END",
    "JOB_START",
    "Goodput",
    "GoodputRecorder",
    "compute_goodput",
    "read_events",
    "record_job_event",
]

EVENTS_FILE = "tpuray-goodput-events.jsonl"
"""The event log's name inside the run's directory (``<storage path>/<run name>/``)."""

# event kinds
JOB_START, JOB_END = "job_start", "job_end"
ATTEMPT_START, TPU_READY, PREP_END = "attempt_start", "tpu_ready", "prep_end"
RESTORE, SAVE, STEP = "restore", "save", "step"
SIZE, RESIZE = "size", "resize"


@dataclass(frozen=True)
class Goodput:
    """A run's split of elapsed time."""

    elapsed_s: float
    productive_s: float
    badput_s: dict[str, float]
    """Seconds per bucket of :data:`tpuray.components.catalog.metric_names.BADPUT_BUCKETS` (every bucket present)."""
    restarts: int
    time_to_first_step_s: float | None = None
    """The latest attempt's start (the job's start, for the first) to the end of its first step; None until then."""
    productive_s_by_slices: dict[int, float] = field(default_factory=dict)
    """An elastic run's productive seconds by live slice count (empty for a fixed-size run)."""
    max_slices: int | None = None
    """An elastic run's most slices (None for a fixed-size run)."""
    resizes: tuple[dict[str, Any], ...] = ()
    """An elastic run's resizes: ``from``, ``to``, ``step``, ``cause`` and the time ``t``, in order."""

    @property
    def full_size_equivalent_s(self) -> float | None:
        """The productive time at full size the run's work is worth: each size's seconds times its share of the
        most slices; None for a fixed-size run."""
        if self.max_slices is None:
            return None
        return sum(t * n / self.max_slices for n, t in self.productive_s_by_slices.items())

    @property
    def goodput(self) -> float:
        """Productive over elapsed time, in [0, 1]."""
        return self.productive_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "goodput_pct": round(100 * self.goodput, 2),
            "productive_s": round(self.productive_s, 3),
            "elapsed_s": round(self.elapsed_s, 3),
            "badput_s": {k: round(v, 3) for k, v in self.badput_s.items()},
        }
        if self.max_slices is not None:  # an elastic run: what ran at which size, and each resize
            equivalent = self.full_size_equivalent_s or 0.0
            out["productive_s_by_slices"] = {
                str(n): round(t, 3) for n, t in sorted(self.productive_s_by_slices.items())
            }
            out["full_size_equivalent_s"] = round(equivalent, 3)
            out["resizes"] = [dict(r) for r in self.resizes]
        return out


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events of a run's log; a torn last line (a writer killed mid-write) is skipped."""
    out = []
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@dataclass
class _Attempt:
    start: float
    tpu_ready: float | None = None
    prep_end: float | None = None
    restored_step: int = 0
    restore_s: float = 0.0
    save_s: float = 0.0
    saves: list[tuple[float, float]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    last: float = 0.0
    slices: int | None = None


def compute_goodput(events: Sequence[dict[str, Any]], now: float | None = None) -> Goodput:
    """The split of a run's events (pure): see the module's docstring for each bucket."""
    job_start = next((e["t"] for e in events if e["e"] == JOB_START), None)
    attempts: list[_Attempt] = []
    max_slices: int | None = None
    resizes: list[dict[str, Any]] = []
    for e in events:
        kind = e["e"]
        if kind == ATTEMPT_START:
            attempts.append(_Attempt(start=e["t"], last=e["t"]))
            continue
        if kind in (JOB_START, JOB_END) or not attempts:
            continue
        a = attempts[-1]
        a.last = max(a.last, e.get("t1", e["t"]))
        if kind == TPU_READY:
            a.tpu_ready = e["t"]
        elif kind == PREP_END:
            a.prep_end, a.restored_step = e["t"], int(e.get("step", 0))
        elif kind == RESTORE:
            a.restore_s += e["t1"] - e["t"]
        elif kind == SAVE:
            a.save_s += e["t1"] - e["t"]
            a.saves.append((e["t"], e["t1"]))
        elif kind == STEP:
            a.steps.append(e)
        elif kind == SIZE:
            a.slices, max_slices = int(e["slices"]), int(e["max"])
        elif kind == RESIZE:
            resizes.append({k: e[k] for k in ("from", "to", "step", "cause", "t")})
    starts = [e["t"] for e in events]
    begin = job_start if job_start is not None else min(starts, default=0.0)
    ends = [e["t"] for e in events if e["e"] == JOB_END]
    end = max([*ends, *(a.last for a in attempts), *starts], default=begin)
    if not ends and now is not None:  # still running
        end = max(end, now)
    bad = dict.fromkeys(mn.BADPUT_BUCKETS, 0.0)
    productive = 0.0
    by_slices: dict[int, float] = {}
    first_step_s: float | None = None
    for i, a in enumerate(attempts):
        origin = begin if i == 0 else a.start
        if a.steps:
            first_step_s = max(0.0, a.steps[0]["t1"] - origin)
        ready = a.tpu_ready if a.tpu_ready is not None else a.last
        bad[mn.BADPUT_TPU_INITIALIZATION] += max(0.0, ready - origin)
        first_step = a.steps[0]["t"] if a.steps else (a.prep_end or a.last)
        prep_end = a.prep_end if a.prep_end is not None else first_step
        bad[mn.BADPUT_TRAINING_PREP] += max(0.0, prep_end - ready - a.restore_s)
        bad[mn.BADPUT_CHECKPOINT_RESTORE] += a.restore_s
        bad[mn.BADPUT_CHECKPOINT_SAVE] += a.save_s
        # steps the next attempt redid: it resumed from a checkpoint before them
        redo_from = attempts[i + 1].restored_step if i + 1 < len(attempts) else None
        kept = [s for s in a.steps if redo_from is None or s["n"] < redo_from]
        lost = [s for s in a.steps if redo_from is not None and s["n"] >= redo_from]
        if kept:
            durations = [s["t1"] - s["t"] for s in kept]
            mean_rest = sum(durations[1:]) / (len(durations) - 1) if len(durations) > 1 else durations[0]
            startup = max(0.0, durations[0] - mean_rest)
            data = sum(float(s.get("data_s", 0.0)) for s in kept)
            bad[mn.BADPUT_PROGRAM_STARTUP] += startup
            bad[mn.BADPUT_DATA_LOADING_SYNC] += data
            productive += sum(durations) - startup - data
            if a.slices is not None:
                by_slices[a.slices] = by_slices.get(a.slices, 0.0) + sum(durations) - startup - data
        if redo_from is not None:  # the attempt was cut off
            if lost:  # from the first step the next attempt redid until the attempt's last sign of life
                lost_from = lost[0]["t"]
                saves_after = sum(t1 - t0 for t0, t1 in a.saves if t0 >= lost_from)
                bad[mn.BADPUT_WASTED_PROGRESS] += max(0.0, a.last - lost_from - saves_after)
            bad[mn.BADPUT_INFRASTRUCTURE_RECOVERY] += max(0.0, attempts[i + 1].start - a.last)
    elapsed = max(0.0, end - begin)
    bad[mn.BADPUT_OTHER] = max(0.0, elapsed - productive - sum(v for k, v in bad.items() if k != mn.BADPUT_OTHER))
    return Goodput(
        elapsed_s=elapsed,
        productive_s=productive,
        badput_s=bad,
        restarts=max(0, len(attempts) - 1),
        time_to_first_step_s=first_step_s if attempts and attempts[-1].steps else None,
        productive_s_by_slices=by_slices,
        max_slices=max_slices,
        resizes=tuple(resizes),
    )


class GoodputRecorder:
    """Appends a run's events to its log: ``enabled`` on one rank (rank 0), a no-op elsewhere.

    In a train function::

        rec = GoodputRecorder(run_dir, enabled=c.rank == 0)  # the attempt starts (first thing in the function)
        rec.tpu_ready()                        # after chip(): the device is usable
        with rec.restoring(): ...              # loading a checkpoint
        rec.prep_done(start_step)              # model and optimizer ready; the steps begin at start_step
        with rec.step(n) as s:                 # one optimizer step
            with s.loading(): batch = ...      # blocking data loading inside it
        with rec.saving(): ray.train.report(..., checkpoint=...)

    The driver calls :func:`record_job_event` with ``job_start`` before the cluster starts and ``job_end``
    after ``fit()``.
    """

    def __init__(self, run_dir: str | Path | None, enabled: bool = True, started: float | None = None) -> None:
        """``started``: the attempt's start (``time.time()`` when the train function was entered), if earlier."""
        self.path = Path(run_dir) / EVENTS_FILE if run_dir is not None and enabled else None
        self.events: list[dict[str, Any]] = []
        self._write({"e": ATTEMPT_START, "t": time.time() if started is None else started})

    def _write(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:  # one line per event, flushed: a SIGKILL loses at most the current one
            f.write(json.dumps(event) + "\n")

    def tpu_ready(self) -> None:
        self._write({"e": TPU_READY, "t": time.time()})

    def size(self, slices: int, max_slices: int) -> None:
        """An elastic run's attempt runs on ``slices`` of at most ``max_slices`` slices."""
        self._write({"e": SIZE, "t": time.time(), "slices": slices, "max": max_slices})

    def resized(self, before: int, after: int, step: int, cause: str) -> None:
        """The worker group went from ``before`` to ``after`` slices, resuming at ``step``, because of ``cause``."""
        self._write({"e": RESIZE, "t": time.time(), "from": before, "to": after, "step": step, "cause": cause})

    def prep_done(self, start_step: int = 0) -> None:
        """Preparation is over; the steps begin at ``start_step`` (the restored checkpoint's step, or 0)."""
        self._write({"e": PREP_END, "t": time.time(), "step": start_step})

    @contextmanager
    def restoring(self) -> Iterator[None]:
        t = time.time()
        yield
        self._write({"e": RESTORE, "t": t, "t1": time.time()})

    @contextmanager
    def saving(self) -> Iterator[None]:
        t = time.time()
        yield
        self._write({"e": SAVE, "t": t, "t1": time.time()})

    @contextmanager
    def step(self, n: int) -> Iterator[_StepTimer]:
        timer = _StepTimer()
        t = time.time()
        yield timer
        self._write({"e": STEP, "n": n, "t": t, "t1": time.time(), "data_s": timer.data_s})

    def goodput(self) -> Goodput:
        """The split so far: the whole log if this rank writes one, else this attempt's events."""
        events = read_events(self.path) if self.path is not None else self.events
        return compute_goodput(events, now=time.time())


def record_job_event(run_dir: str | Path, kind: str, t: float | None = None) -> None:
    """The driver's ``job_start`` (before the cluster starts) or ``job_end`` (after ``fit()``), at ``t``
    (``time.time()``; default now)."""
    if kind not in (JOB_START, JOB_END):
        raise ValueError(f"a job event is {JOB_START!r} or {JOB_END!r}, got {kind!r}")
    path = Path(run_dir) / EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"e": kind, "t": time.time() if t is None else t}) + "\n")


class _StepTimer:
    def __init__(self) -> None:
        self.data_s = 0.0

    @contextmanager
    def loading(self) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.data_s += time.perf_counter() - t
