"""When a train function should checkpoint out of turn: its slice is being drained, or its VMs' run time ends.

A TPU worker pod that is going away (spot preemption, maintenance, upgrade, Kueue preemption) runs the
``preStop`` hook of :mod:`tpuray.components.planning.drain`, which drains its Ray node
(``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N``) and keeps it up for N
seconds. Flex-start and queued VMs also end at ``maxRunDuration``, counted from VM creation, which the workers
get as ``TPURAY_MAX_RUN_SECONDS``. A train function calls :func:`should_checkpoint_now` at every step boundary and
reports a checkpoint when it returns True::

    for step in range(start, steps):
        ...  # forward, backward, optimizer_step
        if (step + 1) % checkpoint_every == 0 or should_checkpoint_now(step + 1):
            ray.train.report(metrics, checkpoint=...)

How it is cheap and consistent:

- Each worker learns about its own node from a background thread that asks Ray's GCS for the draining nodes
  every ``poll_s`` seconds (``GcsClient.get_draining_nodes``, through ``ray._private.state.state``: the call Ray
  Train 2.60's own ``PreemptionWatcher`` makes; Ray has no public per-node drain query, and the public
  ``ray.train.get_preemption_info()`` is a barrier through a Ray actor on every call). The step loop only reads
  a flag.
- The ranks agree through one collective over the job's existing process group (gloo on the emulated slice, an
  XLA all-reduce on TPUs), every ``every`` steps: if any rank's node drains, or any rank's VM is within
  ``margin_s`` of its run time, every rank returns True at the same step, so every rank reports at that step
  (Ray Train's ``report`` is itself a collective). Each cause fires once: the job keeps training after the
  checkpoint until its node goes, and resumes from there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuray.components.catalog.names import MAX_RUN_ENV
from tpuray.components.config.capacity import MAX_RUN_MARGIN_SECONDS

__all__ = [
    "DEFAULT_MARGIN_S",
    "CheckpointSignal",
    "DrainWatch",
    "RunDeadline",
    "agree",
    "should_checkpoint_now",
    "vm_uptime_s",
]

DEFAULT_MARGIN_S = float(MAX_RUN_MARGIN_SECONDS)
"""How long before ``maxRunDuration`` ends a flex-start/queued job checkpoints
(:data:`tpuray.components.config.capacity.MAX_RUN_MARGIN_SECONDS`, which ``tpuray plan`` shows as the window)."""

CAUSES = ("drain", "deadline")


def vm_uptime_s(path: str = "/proc/uptime") -> float:
    """Seconds since this VM booted (a container shares the host kernel's ``/proc/uptime``)."""
    return float(Path(path).read_text().split()[0])


@dataclass(frozen=True)
class RunDeadline:
    """The VM's ``maxRunDuration``, measured on a clock of seconds since boot (injectable for tests)."""

    max_run_s: float
    margin_s: float = DEFAULT_MARGIN_S
    uptime: Callable[[], float] = vm_uptime_s

    def __post_init__(self) -> None:
        if self.max_run_s <= 0:
            raise ValueError(f"{MAX_RUN_ENV}: must be a positive number of seconds, got {self.max_run_s}")
        if self.margin_s < 0:
            raise ValueError(f"margin_s: must be >= 0 seconds, got {self.margin_s}")

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        margin_s: float = DEFAULT_MARGIN_S,
        uptime: Callable[[], float] = vm_uptime_s,
    ) -> RunDeadline | None:
        """The deadline of a worker whose pool sets ``TPURAY_MAX_RUN_SECONDS``; None for other capacity."""
        raw = (os.environ if env is None else env).get(MAX_RUN_ENV, "").strip()
        if not raw:
            return None
        try:
            seconds = float(raw)
        except ValueError:
            raise ValueError(f"{MAX_RUN_ENV}: must be a number of seconds, got {raw!r}") from None
        return cls(seconds, margin_s, uptime)

    def remaining_s(self) -> float:
        return self.max_run_s - self.uptime()

    def near(self) -> bool:
        return self.remaining_s() <= self.margin_s


class DrainWatch:
    """A daemon thread that keeps asking whether this worker's Ray node is draining; :attr:`draining` is a flag
    read, so a step boundary costs no RPC. Once a node drains it stays drained (Ray cannot undo a drain)."""

    def __init__(
        self,
        node_id: str | None = None,
        poll_s: float = 1.0,
        draining_nodes: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll_s: must be > 0 seconds, got {poll_s}")
        self.node_id = node_id or _own_node_id()
        self.poll_s = poll_s
        self._query = draining_nodes or _draining_nodes
        self._hit = threading.Event()
        self._stop = threading.Event()
        self.deadline_ms: int | None = None
        """The drain's deadline (UNIX ms) once it drains; None without a deadline."""
        self.observed_at: float | None = None
        """When the poll that first saw the drain returned (``time.time()``: wall clock, so it compares with the
        drain's other events across processes); None until then."""
        self.errors = 0
        self._thread = threading.Thread(target=self._loop, name="tpuray-drain-watch", daemon=True)
        self._thread.start()

    @property
    def draining(self) -> bool:
        return self._hit.is_set()

    def poll_once(self) -> bool:
        try:
            nodes = self._query()
        except Exception:  # a GCS hiccup must not end the watch; the next poll retries
            self.errors += 1
            return False
        if self.node_id in nodes and not self._hit.is_set():
            self.observed_at = time.time()
            self.deadline_ms = int(nodes[self.node_id]) or None
            self._hit.set()
        return self.draining

    def _loop(self) -> None:
        while not self._stop.is_set() and not self.poll_once():
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _own_node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _draining_nodes() -> dict[str, int]:
    """``{node_id_hex: deadline_ms}`` of Ray's draining nodes (0: no deadline), from the GCS."""
    from tpuray.workloads._ray_compat import draining_nodes

    return dict(draining_nodes())


def agree(local: Sequence[bool], mean_over_ranks: Callable[[Sequence[float]], Sequence[float]]) -> list[bool]:
    """Per cause, whether ANY rank raised it: one collective (an element-wise mean over ranks) that every rank
    calls with its own flags and that returns the same answer on every rank."""
    means = mean_over_ranks([1.0 if f else 0.0 for f in local])
    return [float(m) > 0.0 for m in means]


def _mean_over_chips(values: Sequence[float]) -> Sequence[float]:
    import torch

    from tpuray.workloads.api.worker import mean_over_chips

    out: list[float] = mean_over_chips(torch.tensor(list(values), dtype=torch.float32)).tolist()
    return out


class CheckpointSignal:
    """Decides, identically on every rank, at which step boundaries to checkpoint out of turn.

    ``draining``: this rank's drain flag (default: a :class:`DrainWatch` on this worker's Ray node, started on
    first use); ``watch_node``: False leaves the watching to other ranks (one rank per host is enough: the
    agreement spreads its flag; it spares the GCS one poll per chip); ``deadline``: the VM's run time (default:
    from ``TPURAY_MAX_RUN_SECONDS``, None without it);
    ``every``: steps between agreements (the collective runs only on steps divisible by it);
    ``mean_over_ranks``: the collective (default: :func:`tpuray.workloads.mean_over_chips`).
    """

    def __init__(
        self,
        *,
        draining: Callable[[], bool] | None = None,
        watch_node: bool = True,
        deadline: RunDeadline | str | None = "env",
        every: int = 1,
        poll_s: float = 1.0,
        mean_over_ranks: Callable[[Sequence[float]], Sequence[float]] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every: must be a whole number of steps >= 1, got {every}")
        self._draining = draining if watch_node else (lambda: False)
        self._poll_s = poll_s
        self._watch: DrainWatch | None = None
        if isinstance(deadline, str) and deadline != "env":
            raise ValueError(f"deadline: a RunDeadline, None or 'env', got {deadline!r}")
        self.deadline: RunDeadline | None = RunDeadline.from_env() if isinstance(deadline, str) else deadline
        self.every = every
        self._mean = mean_over_ranks or _mean_over_chips
        self.fired: dict[str, int] = {}
        """Each cause that made every rank checkpoint, and at which step."""
        self.reason: str | None = None
        """The cause(s) of the last True, e.g. ``drain`` or ``drain+deadline``."""

    def local_flags(self) -> list[bool]:
        if self._draining is None:
            self._watch = DrainWatch(poll_s=self._poll_s)
            self._draining = lambda: self._watch is not None and self._watch.draining
        return [self._draining(), self.deadline is not None and self.deadline.near()]

    def __call__(self, step: int) -> bool:
        if len(self.fired) == (2 if self.deadline else 1) or step % self.every:
            return False  # every rank skips the collective on the same steps (and once nothing is left to fire)
        raised = agree(self.local_flags(), self._mean)
        new = [c for c, r in zip(CAUSES, raised, strict=True) if r and c not in self.fired]
        for c in new:
            self.fired[c] = step
        self.reason = "+".join(new) or None
        return bool(new)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.stop()


_SIGNAL: CheckpointSignal | None = None


def should_checkpoint_now(step: int) -> bool:
    """True on every rank, at the same step, when any rank's Ray node is draining or its VM is within
    :data:`DEFAULT_MARGIN_S` of ``TPURAY_MAX_RUN_SECONDS``; each cause once per worker process. Call it on every
    rank at every step boundary of a train function run with :class:`~tpuray.workloads.XlaChipConfig`: it is a
    collective. For other settings build a :class:`CheckpointSignal` and call it the same way."""
    global _SIGNAL
    if _SIGNAL is None:
        from tpuray.workloads.api.worker import runtime

        _SIGNAL = CheckpointSignal(watch_node=runtime().first_on_host)  # one watcher per host
    return _SIGNAL(step)
