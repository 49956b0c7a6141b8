"""The built-in GPT trained elastically (``workload.elastic``): the training math the user chose, at any live size.

Ray Train restarts the worker group at each resize and the train function resumes from the last checkpoint. So that
a run through resizes trains the same model as an unbroken one:

* the global batch stays ``batch_size_per_chip`` times the workers at the most slices: fewer workers each take more
  of its rows, in micro-batches of at most ``batch_size_per_chip`` (a chip's batch cannot grow), gradients
  accumulated, each micro-batch's loss weighted by its share of the global batch so that the runtime's mean over
  workers is the global batch's mean gradient (and loss);
* a step's rows are a pure function of the step and the global batch (:meth:`TokenBatches.rows
  <tpuray.workloads.gpt.data.TokenBatches.rows>`), each worker taking a contiguous range of them;
* the checkpoint holds the slice count it was written at, and an attempt that starts at another size records the
  resize (from, to, step, cause) in the run's events (:meth:`GoodputRecorder.resized
  <tpuray.workloads.signals.goodput.GoodputRecorder.resized>`), which the goodput breakdown reads.

The data-parallel checkpoint is the whole replicated state, written by rank 0, so it restores at any size; TorchTPU's
sharded job (:mod:`tpuray.workloads.gpt.fsdp2_loop`) uses the same pieces, its DCP checkpoint resharded on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuray.components.catalog.runtimes import BACKENDS, RUNTIMES
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.signals.goodput import GoodputRecorder

if TYPE_CHECKING:
    import torch

    from tpuray.workloads.api.worker import Runtime
    from tpuray.workloads.gpt.data import TokenBatches

__all__ = ["SLICES_KEY", "ElasticStep", "accumulate", "elastic_step", "record_size", "resize_cause"]

SLICES_KEY = "slices"
"""The checkpoint's entry: the live slices it was written at."""


@dataclass(frozen=True)
class ElasticStep:
    """One worker's share of every optimizer step at the live size."""

    global_batch: int
    """Rows per optimizer step: the per-chip batch times the workers at the most slices, at every size."""
    micro: int
    """The most rows one forward takes: the per-chip batch."""
    rank: int
    world: int
    """Live workers."""
    slices: int
    """Live slices."""
    max_slices: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world or self.world > self.global_batch or self.micro < 1:
            raise ValueError(
                f"rank {self.rank} of {self.world} workers, {self.global_batch} rows, micro-batch {self.micro}: "
                "every worker needs a row and a rank below the workers"
            )

    @property
    def rows(self) -> tuple[int, int]:
        """This worker's contiguous range ``[lo, hi)`` of the global batch (sizes differ by at most one)."""
        g, w, r = self.global_batch, self.world, self.rank
        return r * g // w, (r + 1) * g // w

    def micro_batches(self) -> list[tuple[int, int]]:
        """This worker's rows in forwards of at most :attr:`micro` rows."""
        lo, hi = self.rows
        return [(a, min(hi, a + self.micro)) for a in range(lo, hi, self.micro)]

    @property
    def rows_per_worker(self) -> float:
        """The global batch's rows per live worker: what a step's throughput counts per chip (more than the
        per-chip batch below the most slices)."""
        return self.global_batch / self.world

    @property
    def accumulation(self) -> int:
        """Forwards per optimizer step on the busiest worker (1 at the most slices)."""
        per_worker = -(-self.global_batch // self.world)
        return -(-per_worker // self.micro)


def elastic_step(
    bounds: tuple[int, int] | None, batch_size_per_chip: int, slice_spec: str, c: Runtime
) -> ElasticStep | None:
    """This worker's :class:`ElasticStep` for an elastic job (``bounds``: its ``(min, max)`` slices), from the live
    worker group the runtime describes; None for a fixed-size job."""
    if bounds is None:
        return None
    lo, hi = bounds
    s = TpuSlice.parse(slice_spec)
    if c.name not in BACKENDS:
        raise ValueError(f"runtime {c.name!r}: valid choices are {', '.join(BACKENDS)}")
    per_slice = RUNTIMES[c.name].workers_per_slice(s)
    slices, rest = divmod(c.world_size, per_slice)
    if rest or not lo <= slices <= hi:
        raise ValueError(
            f"{c.world_size} workers are not whole {s} slices between {lo} and {hi} ({per_slice} workers each)"
        )
    return ElasticStep(batch_size_per_chip * per_slice * hi, batch_size_per_chip, c.rank, c.world_size, slices, hi)


def accumulate(
    plan: ElasticStep,
    model: Any,
    data: TokenBatches,
    step: int,
    seq_len: int,
    device: Any,
    autocast: AbstractContextManager[Any],
    loading: Callable[[], AbstractContextManager[Any]],
    lockstep: bool = False,
) -> torch.Tensor:
    """Forward and backward this worker's rows of ``step`` in micro-batches, gradients accumulated; returns its
    weighted loss, whose mean over the live workers is the global batch's mean loss (as the runtime's gradient
    mean is its mean gradient). ``loading`` times the blocking data reads (the goodput step timer's).

    ``lockstep``: every worker runs :attr:`ElasticStep.accumulation` forwards, one with fewer rows repeating its
    first micro-batch weighted 0, for a model whose forward and backward are collectives (FSDP2 all-gathers
    parameters in each forward and reduce-scatters gradients in each backward, so ranks must run as many)."""
    import torch

    batches = plan.micro_batches()
    own = len(batches)
    if lockstep:
        batches += [batches[0]] * (plan.accumulation - own)
    total: torch.Tensor | None = None
    for i, (lo, hi) in enumerate(batches):
        with loading():
            tokens = torch.from_numpy(data.rows(step, lo, hi, plan.global_batch, seq_len))
        with autocast:
            loss = model.loss(tokens.to(device))
        share = (hi - lo) * plan.world / plan.global_batch if i < own else 0.0
        weighted = loss * share
        weighted.backward()
        total = weighted.detach() if total is None else total + weighted.detach()
    assert total is not None  # every worker has a row (ElasticStep checks it)
    return total


def resize_cause(before: int, after: int) -> str:
    """Why the group changed size between two attempts, as the train function can tell it."""
    return "slice lost (preempted, drained or failed)" if after < before else "slice returned"


def record_size(rec: GoodputRecorder, plan: ElasticStep, state: dict[str, Any] | None, step: int) -> None:
    """Record the attempt's live size, and a resize where the checkpoint it resumes was written at another."""
    rec.size(plan.slices, plan.max_slices)
    before = int(state[SLICES_KEY]) if state is not None and SLICES_KEY in state else None
    if before is not None and before != plan.slices:
        rec.resized(before, plan.slices, step, resize_cause(before, plan.slices))
