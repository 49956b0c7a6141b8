"""The built-in GPT's train function: an example of the public API, nothing more.

It runs on every worker of a ``TorchTrainer(train_gpt, torch_config=XlaChipConfig(), scaling_config=
tpu_scaling_config(...))``: :func:`~tpuray.workloads.runtime` for the rank, the device and
the gradient average (whichever runtime's backend bound it), ``ray.train.report(..., checkpoint=...)`` to
save, ``ray.train.get_checkpoint()`` to resume. A newest checkpoint that cannot be read falls back to the one
before (``ray.train.get_all_reported_checkpoints()``); one from a different model is a clear error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tpuray.workloads import Runtime, _ray_compat, runtime
from tpuray.workloads.gpt.metrics import ModelShape, speed_metrics
from tpuray.workloads.signals.drain import CheckpointSignal
from tpuray.workloads.signals.goodput import GoodputRecorder
from tpuray.workloads.signals.training_metrics import report_step_metrics, xla_compiles

__all__ = ["CheckpointError", "GptJob", "check_fingerprint", "over_ranks", "train_gpt", "xla_on_tpu"]

STATE_FILE = "state.pt"

# Progress goes through logging, not print: Ray Train patches print in its workers to log each call and, when
# Ray has redirected the stream, also print it, so a printed line reaches the driver twice.
log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """No usable checkpoint to resume from: every reported one is unreadable, or they belong to another model."""


@dataclass(frozen=True)
class GptJob:
    """What every worker trains. Picklable: Ray sends it to each worker."""

    model: ModelShape
    steps: int
    batch_size_per_chip: int
    learning_rate: float
    checkpoint_every: int
    slice_spec: str
    dataset: str | None = None
    seed: int = 0
    bf16: bool = True
    """bf16 autocast on TPU; the CPU emulation trains in fp32."""
    log_every: int = 10
    drain_check_every: int = 1
    """Steps between the ranks' agreement on whether to checkpoint out of turn
    (:mod:`tpuray.workloads.signals.drain`)."""
    cpu_threads: int | None = None
    """torch intra-op threads per worker (the CPU emulation uses 1: several workers share few cores)."""
    run_dir: str | None = None
    """The run's directory (``<storage path>/<run name>``) on a file system: its goodput log goes there."""
    run_name: str = "train"
    """The ``run`` tag of the exported metrics."""
    elastic: tuple[int, int] | None = None
    """An elastic job's ``(min, max)`` slices (:mod:`tpuray.workloads.gpt.elastic`); None: a fixed size."""

    @property
    def fingerprint(self) -> str:
        """Identifies the model a checkpoint belongs to: shape and dataset (not the step count or the LR)."""
        key = json.dumps({"model": asdict(self.model), "dataset": self.dataset}, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:16]


def _to_cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _read_state(path: str, fingerprint: str) -> dict[str, Any]:
    import torch

    file = Path(path) / STATE_FILE
    try:
        state: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
            raise ValueError("it lacks the step/model/optimizer entries")
    except Exception as e:  # torch raises a zoo of types for a damaged file
        raise OSError(f"checkpoint {str(file)!r} is unreadable ({type(e).__name__}: {e})") from None
    check_fingerprint(str(file), state.get("fingerprint"), fingerprint)
    return state


def check_fingerprint(where: str, found: object, fingerprint: str) -> None:
    """Refuse a checkpoint at ``where`` whose model ``found`` is not this job's ``fingerprint``."""
    if found != fingerprint:
        raise CheckpointError(
            f"checkpoint {where!r} belongs to another model (fingerprint {found!r}, this job {fingerprint!r}); give "
            "this run another name (--run-name) or storage path"
        )


def _resume(job: GptJob) -> tuple[dict[str, Any] | None, list[str]]:
    """The newest readable checkpoint's state (or None for a fresh run) and notes on what was skipped."""
    import ray.train

    newest = ray.train.get_checkpoint()
    if newest is None:
        return None, []
    notes: list[str] = []
    candidates = [newest]
    errors = []
    for i in range(2):  # the newest first; only if it is unreadable, ask Ray for every reported one
        for ck in candidates:
            try:
                return _read_state(ck.path, job.fingerprint), notes
            except OSError as e:
                errors.append(str(e))
                notes.append(f"skipping an unreadable checkpoint: {e}")
        if i == 0:
            # Ray 2.60 waits here until this attempt's report count matches the restored run's, which after a
            # restart it never does; it returns every reported checkpoint once the timeout ends the wait.
            older = ray.train.get_all_reported_checkpoints(timeout_s=1)
            older.sort(key=lambda r: int(r.metrics.get("step", 0)), reverse=True)
            candidates = [r.checkpoint for r in older if r.checkpoint.path != newest.path]
    raise CheckpointError("no readable checkpoint to resume from: " + "; ".join(errors))


def _digest_spread(model: Any, mean_over_chips: Any) -> float:
    """0.0 if every chip holds the same parameters: the variance over chips of a number derived from a hash of
    this chip's parameter bytes."""
    import torch

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    x = int(h.hexdigest()[:12], 16) / float(1 << 48)
    m = mean_over_chips(torch.tensor([x, x * x], dtype=torch.float64))
    return max(0.0, float(m[1] - m[0] * m[0]))


def _torch_tpu_cache(job: GptJob, rank: int, world: int) -> None:  # pragma: no cover - needs torch_tpu and TPUs
    """TorchTPU's tier-3 compile cache under the stack's key. The env callback set it on this worker before the
    process group started, which is when it must be set; this keeps that value."""
    from tpuray.workloads.api import compile_cache

    s = _slice(job)
    compile_cache.enable_torch_tpu(rank, s, max(1, world // s.chips))


def train_gpt(config: dict[str, Any]) -> None:
    """Train the GPT described by ``config["job"]`` (a :class:`GptJob`) on this worker's chip.

    ``config["runtime"]`` is ``xla`` (default: :class:`~tpuray.workloads.XlaChipConfig` workers) or
    ``torch_tpu`` (Ray Train's own TorchTPU workers).
    """
    import ray.train
    import torch

    from tpuray.workloads.gpt import elastic
    from tpuray.workloads.gpt.data import open_dataset
    from tpuray.workloads.gpt.model import GPT

    t_start, wall_start = time.perf_counter(), time.time()
    _ray_compat.quiet_train_report_log()  # the progress lines say what its per-report lines would
    job: GptJob = config["job"]
    c = runtime()  # bound by the runtime's backend: XlaChipConfig's, or TorchTPU's env callback
    if c.name == "torch_tpu":
        _torch_tpu_cache(job, c.rank, c.world_size)  # PyTorch/XLA's is set by XlaChipConfig before this runs
    rec = GoodputRecorder(job.run_dir, enabled=c.rank == 0, started=wall_start)
    rec.tpu_ready()
    real_chips = c.name == "torch_tpu" or xla_on_tpu()  # MFU means something only there
    if job.cpu_threads:
        torch.set_num_threads(job.cpu_threads)
    data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
    torch.manual_seed(job.seed)  # identical initial weights on every chip
    model = GPT(job.model)
    with rec.restoring():
        state, notes = _resume(job)
        if state is not None:
            model.load_state_dict(state["model"])
    device = c.device  # once: the runtime's device is looked up, not stored
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate, weight_decay=0.01)
    start, history, resumes, drains = 0, [], [], []
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        start, history, resumes = int(state["step"]), list(state["losses"]), [*state["resumes"], int(state["step"])]
        drains = list(state.get("drains", []))
    if c.rank == 0:
        for note in notes:
            log.warning(note)
        if state is not None:
            log.info(f"resumed from step {start}")

    autocast = torch.autocast(c.autocast_device, dtype=torch.bfloat16, enabled=job.bf16)
    pending: list[torch.Tensor] = []
    first_step_s: float | None = None
    pending_start = start
    chunk_t = time.perf_counter()
    step_times: list[float] = []
    # a draining node or the end of the VMs' run time makes every rank checkpoint at the same step boundary
    signal = CheckpointSignal(
        watch_node=c.first_on_host, every=job.drain_check_every, mean_over_ranks=over_ranks(c)
    )  # one drain watcher per host: the agreement spreads its flag
    plan = elastic.elastic_step(job.elastic, job.batch_size_per_chip, job.slice_spec, c)  # None: a fixed size
    if plan is not None:
        elastic.record_size(rec, plan, state, start)
    rec.prep_done(start)
    for step in range(start, job.steps):
        with rec.step(step) as timer:
            if plan is not None:  # the global batch kept at the live size (gpt/elastic.py)
                seq = job.model.seq_len
                loss = elastic.accumulate(plan, model, data, step, seq, device, autocast, timer.loading)
            else:
                with timer.loading():
                    batch = data.batch(step, c.rank, c.world_size, job.batch_size_per_chip, job.model.seq_len)
                    tokens = torch.from_numpy(batch)
                with autocast:
                    loss = model.loss(tokens.to(device))
                loss.backward()  # type: ignore[no-untyped-call]
            c.optimizer_step(opt)
            opt.zero_grad(set_to_none=True)
            c.sync()
            pending.append(loss.detach())
            if first_step_s is None:
                float(pending[-1])  # wait for the device: the time covers compile and run
        done = step + 1
        if first_step_s is None:
            first_step_s = time.perf_counter() - t_start
            chunk_t = time.perf_counter()
            pending_start = done
        out_of_turn = signal(done)  # a collective on every rank, at every boundary the signal checks
        if out_of_turn:
            drains.append(done)
            if c.rank == 0:
                log.info(f"checkpointing at step {done}: {signal.reason}")
        save = done % job.checkpoint_every == 0 or done == job.steps or out_of_turn
        if done % job.log_every and not save:
            continue
        # one device sync and one all-chip average per chunk, not per step
        losses = c.mean(torch.stack(pending)).tolist() if pending else []
        n_timed = done - pending_start
        if n_timed > 0:
            step_times.append((time.perf_counter() - chunk_t) / n_timed)
        history += losses
        pending, chunk_t, pending_start = [], time.perf_counter(), done
        metrics: dict[str, Any] = {"step": done, "loss": history[-1], "first_step_s": first_step_s}
        if step_times:
            median = sorted(step_times)[len(step_times) // 2]
            rows = plan.rows_per_worker if plan is not None else job.batch_size_per_chip  # the kept global batch
            metrics |= speed_metrics(job.model, _slice(job), c.world_size, rows, median, real_chips)
        if c.rank == 0:
            log.info(_progress(done, job.steps, history[-1], metrics))
            gp = rec.goodput()
            metrics |= {"goodput": gp.goodput}
            report_step_metrics(
                job.run_name,
                job.slice_spec,
                step_time_s=metrics.get("step_time_s"),
                tokens_per_s_per_chip=metrics["tokens_per_s"] / c.world_size if "tokens_per_s" in metrics else None,
                mfu=metrics.get("mfu"),
                compiles=xla_compiles() if c.autocast_device == "xla" else None,
                goodput=gp,
                live_slices=plan.slices if plan is not None else None,
            )
        if done == job.steps:
            metrics |= {"losses": history, "resumes": resumes, "param_spread": _digest_spread(model, c.mean)}
            metrics["compile_cache"] = _cache_report()
        metrics["drains"] = list(drains)  # a copy: Ray Train may serialise the metrics after later appends
        if not save:
            ray.train.report(metrics)
            continue
        with tempfile.TemporaryDirectory(prefix="tpuray-ckpt-") as tmp, rec.saving():
            checkpoint = None
            if c.rank == 0:  # every chip holds the same weights: one writer
                state_out = {
                    "step": done,
                    "model": _to_cpu(model.state_dict()),
                    "optimizer": _to_cpu(opt.state_dict()),
                    "fingerprint": job.fingerprint,
                    "losses": history,
                    "resumes": resumes,
                    "drains": list(drains),
                    **({elastic.SLICES_KEY: plan.slices} if plan is not None else {}),
                }
                torch.save(state_out, Path(tmp) / STATE_FILE)
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)
    signal.close()


def _cache_report() -> dict[str, Any] | None:
    from tpuray.workloads.api.compile_cache import cache_report

    return cache_report()


def over_ranks(c: Runtime) -> Any:
    """The drain signal's collective for runtime ``c``: the element-wise mean of a list of floats over all ranks."""
    import torch

    device = c.device if c.autocast_device == "tpu" else "cpu"  # torch_tpu's mean reduces in place on its device

    def mean(values: list[float]) -> list[float]:
        out: list[float] = c.mean(torch.tensor(values, dtype=torch.float32, device=device)).tolist()
        return out

    return mean


def _slice(job: GptJob) -> Any:
    from tpuray.components.catalog.topology import TpuSlice

    return TpuSlice.parse(job.slice_spec)


def xla_on_tpu() -> bool:
    """Whether PyTorch/XLA runs on TPUs here, not on the emulated slice's host CPU."""
    import torch_xla.runtime as xr

    return bool(xr.device_type() == "TPU")


def _progress(step: int, total: int, loss: float, m: dict[str, Any], width: int = 20) -> str:
    """One progress line; MFU only where it was measured on real chips (an emulated chip says n/a)."""
    filled = round(width * step / max(1, total))
    text = f"[{'#' * filled}{'-' * (width - filled)}] step {step}/{total} loss {loss:.3f}"
    if "step_time_s" in m:
        mfu = f"{m['mfu']:.2%}" if m.get("mfu") is not None else "n/a (emulated chips)"
        text += f" | {m['step_time_s'] * 1e3:.1f} ms/step | {m['tokens_per_s'] / 1e3:.1f}k tok/s | MFU {mfu}"
    return text
