"""Run a training job on a worker group, surviving worker deaths by resuming from the last checkpoint."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError, WorkerCrashedError

from tpuray.components.topology import TpuSlice
from tpuray.workloads.checkpoint import CheckpointError
from tpuray.workloads.data import DatasetError
from tpuray.workloads.group import WorkerGroup
from tpuray.workloads.job import JobSpec
from tpuray.workloads.loop import ChunkResult, SetupResult
from tpuray.workloads.placement import PlacementError
from tpuray.workloads.report import Progress, steady_step_time, summarise_throughput

__all__ = ["JobFailed", "run_job"]

_WORKER_LOST = (ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError)
_USER_ERRORS = (CheckpointError, DatasetError, PlacementError)


class JobFailed(RuntimeError):
    """Workers kept dying: more restarts than allowed."""


@dataclass
class _Attempt:
    attempt: int
    start_step: int
    end_step: int
    resumed_from: str | None
    losses: list[float]


def _user_error(e: RayTaskError) -> BaseException | None:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, _USER_ERRORS) else None


def run_job(
    spec: JobSpec,
    *,
    chips: int | None = None,
    num_slices: int | None = None,
    max_restarts: int = 3,
    call_timeout_s: float = 600.0,
    progress: Progress | None = None,
    emulated: bool = False,
) -> dict[str, Any]:
    """Train ``spec`` to ``spec.steps`` steps and return the JSON-ready summary."""
    tpu_slice: TpuSlice = spec.tpu_slice
    progress = progress or Progress(spec.steps)
    t_job = time.perf_counter()
    attempts: list[_Attempt] = []
    curve: dict[int, float] = {}
    chunk_times: list[float] = []
    first_step_s: float | None = None
    digests: list[str] = []
    group: WorkerGroup | None = None
    attempt = 0
    while True:
        try:
            group = WorkerGroup.create(tpu_slice, chips=chips, num_slices=num_slices)
            master = group.master() if spec.collective == "gloo" else ("", 0)
            t_setup = time.perf_counter()
            setups: list[SetupResult] = group.call("setup", spec, master, attempt, timeout_s=call_timeout_s)
            step = setups[0].start_step
            if any(s.start_step != step for s in setups):
                raise CheckpointError(f"workers resumed from different steps: {[s.start_step for s in setups]}")
            if setups[0].resumed_from:
                progress.note(f"resumed from {setups[0].resumed_from} (step {step}, loss {setups[0].resumed_loss:.3f})")
            current = _Attempt(attempt, step, step, setups[0].resumed_from, [])
            attempts.append(current)
            times: list[float] = []
            while step < spec.steps:
                until = min(step + spec.log_every, spec.steps)
                chunks: list[ChunkResult] = group.call("run", until, timeout_s=call_timeout_s)
                per_step = [sum(c.losses[i] for c in chunks) / len(chunks) for i in range(len(chunks[0].losses))]
                for i, loss in enumerate(per_step):
                    curve[step + i + 1] = loss
                current.losses += per_step
                firsts = [c.first_step_done_s for c in chunks if c.first_step_done_s is not None]
                if firsts and first_step_s is None:
                    first_step_s = (t_setup - t_job) + max(firsts)
                times.append(max(c.step_time_s for c in chunks))  # the slowest worker sets the pace
                step = current.end_step = until
                t = summarise_throughput(
                    spec.model, tpu_slice, group.world_size, spec.batch_size_per_chip, steady_step_time(times)
                )
                progress.update(step, per_step[-1], t)
            chunk_times += times[1:]
            digests = group.call("digest", timeout_s=call_timeout_s)
            world = group.world_size
            n_slices = group.num_slices
            break
        except RayTaskError as e:
            user = _user_error(e)
            if user is not None:
                raise user from None
            if not isinstance(e, _WORKER_LOST):
                raise
            attempt = _restart(attempt, max_restarts, e, progress)
        except _WORKER_LOST as e:
            attempt = _restart(attempt, max_restarts, e, progress)
        finally:
            if group is not None:
                group.shutdown()
                group = None

    step_time = steady_step_time(chunk_times) if chunk_times else None
    t = summarise_throughput(spec.model, tpu_slice, world, spec.batch_size_per_chip, step_time)
    losses = [curve[s] for s in sorted(curve)]
    return {
        "event": "summary",
        "backend": spec.backend,
        "emulated": emulated,
        "slice": str(tpu_slice),
        "pod_type": tpu_slice.pod_type,
        "num_slices": n_slices,
        "chips": world,
        "steps": spec.steps,
        "final_step": attempts[-1].end_step,
        "restarts": len(attempts) - 1,
        "resumed_from": [a.resumed_from for a in attempts if a.resumed_from],
        "attempts": [
            {"attempt": a.attempt, "start_step": a.start_step, "end_step": a.end_step, "losses": a.losses}
            for a in attempts
        ],
        "loss_first": losses[0] if losses else None,
        "loss_final": losses[-1] if losses else None,
        "losses": losses,
        "step_time_s": step_time,
        "tokens_per_s": t.tokens_per_s if t else None,
        "tokens_per_s_per_chip": t.tokens_per_s_per_chip if t else None,
        "model_tflops_per_s": t.model_tflops_per_s if t else None,
        "mfu": t.mfu if t else None,
        "peak_bf16_tflops_per_chip": tpu_slice.spec.peak_bf16_tflops_per_chip,
        "model_params": spec.model.params,
        "train_flops_per_token": spec.model.train_flops_per_token,
        "time_to_first_step_s": first_step_s,
        "wall_s": time.perf_counter() - t_job,
        "params_identical": len(set(digests)) == 1,
        "param_digests": sorted(set(digests)),
        "checkpoint_dir": spec.checkpoint_dir,
    }


def _restart(attempt: int, max_restarts: int, e: BaseException, progress: Progress) -> int:
    if attempt >= max_restarts:
        raise JobFailed(f"a worker died {attempt + 1} time(s), more than --max-restarts={max_restarts}: {e}") from e
    progress.note(f"a worker died ({type(e).__name__}); restarting the group from the last checkpoint")
    return attempt + 1


def connect(address: str | None) -> None:
    """Join the existing Ray cluster (the RayJob's), or ``address`` if given."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=True)
