"""tpuray.workloads.signals.drain without a Ray cluster: the ranks' agreement, the flex-start deadline on a fake
clock, and the drain watch's polling.

Ranks are threads here; their collective is a real one (every rank contributes, waits for the others, and gets the
element-wise mean), so a rank that would decide alone deadlocks or disagrees, and the tests see it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.names import MAX_RUN_ENV
from tpuray.workloads.signals.drain import CheckpointSignal, DrainWatch, RunDeadline, agree


class World:
    """A collective among ``n`` threads: each calls ``mean(values)`` with its own values and gets the mean."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self._values: dict[int, Sequence[float]] = {}
        self._barrier = threading.Barrier(n)
        self._lock = threading.Lock()

    def mean_for(self, rank: int) -> Callable[[Sequence[float]], Sequence[float]]:
        def mean(values: Sequence[float]) -> Sequence[float]:
            with self._lock:
                self._values[rank] = list(values)
            self._barrier.wait(timeout=30)
            out = [sum(v[i] for v in self._values.values()) / self.n for i in range(len(values))]
            if self._barrier.wait(timeout=30) == 0:
                self.calls += 1
            return out

        return mean


def test_agree_is_any_rank_per_cause() -> None:
    ranks = [[False, False], [True, False], [False, False], [False, True]]
    mean = lambda v: [sum(r[i] for r in ranks) / len(ranks) for i in range(2)]  # noqa: E731
    assert agree([False, False], mean) == [True, True]
    ranks = [[False, False]] * 3
    assert agree([False, False], mean) == [False, False]


@settings(deadline=None, max_examples=25)
@given(
    onsets=st.lists(st.one_of(st.none(), st.integers(0, 30)), min_size=1, max_size=4),
    every=st.integers(1, 5),
)
def test_every_rank_fires_once_at_the_same_step(onsets: list[int | None], every: int) -> None:
    """Ranks whose nodes start draining at different steps (or never) all fire at the first checked step at or
    after the earliest onset, exactly once."""
    world = World(len(onsets))
    step_now = [0] * len(onsets)

    def draining(rank: int) -> Callable[[], bool]:
        onset = onsets[rank]
        return lambda: onset is not None and step_now[rank] >= onset

    signals = [
        CheckpointSignal(draining=draining(r), deadline=None, every=every, mean_over_ranks=world.mean_for(r))
        for r in range(len(onsets))
    ]
    fired: list[list[int]] = [[] for _ in onsets]

    def loop(rank: int) -> None:
        for step in range(40):
            step_now[rank] = step
            if signals[rank](step):
                fired[rank].append(step)

    threads = [threading.Thread(target=loop, args=(r,)) for r in range(len(onsets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    known = [o for o in onsets if o is not None]
    if not known:
        assert fired == [[] for _ in onsets]
    else:
        first = next(s for s in range(min(known), 40 + every) if s % every == 0)
        expected = [first] if first < 40 else []
        assert fired == [expected for _ in onsets]
        assert all(s.reason == ("drain" if expected else None) for s in signals)
    # the collective ran on the same steps for all (only checked steps, none after the one cause fired)
    checked = [s for s in range(40) if s % every == 0]
    assert world.calls == (len([s for s in checked if s <= fired[0][0]]) if fired[0] else len(checked))


class FakeUptime:
    """Seconds since boot, advanced by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_flex_start_deadline_on_a_fake_clock() -> None:
    """Two hosts of a flex-start slice with maxRunDuration 1 h booted 50 s apart: the later-booted host does not
    see the deadline yet, but both ranks checkpoint at the first step where the earlier one is within the margin,
    and only then."""
    max_run, margin, step_s = 3600.0, 420.0, 7.0
    early, late = FakeUptime(2500.0), FakeUptime(2450.0)
    world = World(2)
    signals = [
        CheckpointSignal(
            draining=lambda: False,
            deadline=RunDeadline(max_run, margin, clock),
            mean_over_ranks=world.mean_for(r),
        )
        for r, clock in enumerate((early, late))
    ]
    fired: list[list[int]] = [[], []]

    def loop(rank: int, clock: FakeUptime) -> None:
        for step in range(200):
            clock.now += step_s  # one training step
            if signals[rank](step):
                fired[rank].append(step)

    threads = [threading.Thread(target=loop, args=(r, c)) for r, c in enumerate((early, late))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # the early host is within 420 s of 3600 s once its uptime reaches 3180 s: after (3180 - 2500) / 7 = 97.1 steps
    first = next(s for s in range(200) if 2500 + (s + 1) * step_s >= max_run - margin)
    assert first == 97
    assert fired == [[first], [first]]
    assert late.now < early.now and signals[1].deadline is not None
    assert signals[1].deadline.remaining_s() > signals[0].deadline.remaining_s()  # type: ignore[union-attr]
    assert all(s.fired == {"deadline": first} and s.reason is None for s in signals)  # fired once, long ago


def test_deadline_from_the_env() -> None:
    clock = FakeUptime(100.0)
    d = RunDeadline.from_env({MAX_RUN_ENV: "600"}, margin_s=120, uptime=clock)
    assert d is not None and d.remaining_s() == 500 and not d.near()
    clock.now = 480.0
    assert d.near()
    assert RunDeadline.from_env({}) is None  # capacity without a maxRunDuration
    with pytest.raises(ValueError, match=f"{MAX_RUN_ENV}: must be a number of seconds, got '1h'"):
        RunDeadline.from_env({MAX_RUN_ENV: "1h"})
    with pytest.raises(ValueError, match=f"{MAX_RUN_ENV}: must be a positive"):
        RunDeadline.from_env({MAX_RUN_ENV: "0"})
    with pytest.raises(ValueError, match="margin_s"):
        RunDeadline(60, margin_s=-1)


def test_a_drain_and_a_deadline_fire_separately() -> None:
    """A drain, then later the run deadline: two out-of-turn checkpoints, each cause once."""
    state = {"drain": False, "near": False}

    class Deadline(RunDeadline):
        def near(self) -> bool:
            return state["near"]

    sig = CheckpointSignal(draining=lambda: state["drain"], deadline=Deadline(3600), mean_over_ranks=lambda v: list(v))
    assert not sig(1)
    state["drain"] = True
    assert sig(2) and sig.reason == "drain"
    assert not sig(3)
    state["near"] = True
    assert sig(4) and sig.reason == "deadline"
    assert not sig(5) and sig.fired == {"drain": 2, "deadline": 4}
    with pytest.raises(ValueError, match="every"):
        CheckpointSignal(every=0, deadline=None)


def test_drain_watch_sees_its_own_node_only() -> None:
    nodes: dict[str, int] = {"other-node": 0}
    calls = threading.Semaphore(0)

    def draining_nodes() -> dict[str, int]:
        calls.release()
        if nodes.get("boom"):
            raise ConnectionError("GCS unavailable")
        return dict(nodes)

    watch = DrainWatch("my-node", poll_s=0.01, draining_nodes=draining_nodes)
    try:
        assert calls.acquire(timeout=30) and calls.acquire(timeout=30)  # the thread polls
        assert not watch.draining  # another node's drain is not this worker's
        nodes["boom"] = 1
        assert calls.acquire(timeout=30) and calls.acquire(timeout=30)
        assert watch.errors >= 1 and not watch.draining  # a failed poll is retried, not fatal
        del nodes["boom"]
        assert watch.observed_at is None
        before = time.time()
        nodes["my-node"] = 1_700_000_000_000
        assert watch.poll_once() and watch.draining and watch.deadline_ms == 1_700_000_000_000
        after = time.time()
        # when the drain was first seen (by the thread or this poll), on the clock the drain's other events use
        seen = watch.observed_at
        assert seen is not None and before <= seen <= after
        assert watch.poll_once() and watch.observed_at == seen  # a later poll does not move it
    finally:
        watch.stop()
    with pytest.raises(ValueError, match="poll_s"):
        DrainWatch("n", poll_s=0, draining_nodes=dict)


def test_a_rank_that_does_not_watch_follows_the_watchers() -> None:
    """One worker per host watches its node (``watch_node``); the others raise nothing themselves and still fire
    with it, at the same step."""
    world = World(2)
    signals = [
        CheckpointSignal(draining=lambda: True, watch_node=r == 0, deadline=None, mean_over_ranks=world.mean_for(r))
        for r in range(2)
    ]
    assert signals[1].local_flags() == [False, False]
    fired: list[bool] = [False, False]

    def call(rank: int) -> None:
        fired[rank] = signals[rank](7)

    threads = [threading.Thread(target=call, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert fired == [True, True] and signals[1].fired == {"drain": 7}
