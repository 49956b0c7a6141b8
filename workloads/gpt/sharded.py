"""The built-in GPT trained sharded (``workload.parallelism`` above 1): PyTorch/XLA SPMD, one Ray worker per host
driving all of its chips, the GPT marked from the sharding table (docs/sharding.md).

Runs on one host: multi-host SPMD needs TPUs and a multi-host checkpoint test that only a TPU can run, and
multislice SPMD is not wired here, so the CLI refuses both before any cluster work
(:func:`~tpuray.components.config.workload.require_entrypoint_sharding`). The batch each step is the
data-parallel job's: every chip's rows, concatenated, so the two runs see the same data.
Checkpoints hold each device's shards (:mod:`tpuray.workloads.sharding.checkpoint`) and a small JSON of the run's
history beside them.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import _ray_compat
from tpuray.workloads.gpt.loop import CheckpointError, GptJob, check_fingerprint, xla_on_tpu
from tpuray.workloads.gpt.metrics import speed_metrics
from tpuray.workloads.signals.goodput import GoodputRecorder

__all__ = ["HISTORY_FILE", "read_history", "train_gpt_sharded"]

HISTORY_FILE = "history.json"
"""Beside the shards: the model's fingerprint, the losses so far and the steps the run resumed from."""

log = logging.getLogger(__name__)


def read_history(where: str, fingerprint: str) -> dict[str, Any]:
    """The run's history beside a sharded checkpoint at ``where``, refused if unreadable or another model's."""
    file = Path(where) / HISTORY_FILE
    try:
        history: dict[str, Any] = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {where!r} has no readable {HISTORY_FILE} ({e})") from None
    check_fingerprint(where, history.get("fingerprint"), fingerprint)
    return history


def train_gpt_sharded(config: dict[str, Any]) -> None:
    """Train ``config["job"]`` sharded ``config["fsdp"] x config["tensor"]`` over this host's chips."""
    from tpuray.workloads.sharding import spmd_devices

    chips = spmd_devices()  # before torch_xla initialises

    import numpy as np
    import ray.train
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla.distributed.spmd import xla_sharding as xs

    from tpuray.workloads.gpt.data import open_dataset
    from tpuray.workloads.gpt.model import GPT, next_token_loss
    from tpuray.workloads.sharding import fsdp_v2, local_bytes, mesh_plan, shard_gpt, spmd_mesh
    from tpuray.workloads.sharding.checkpoint import load_sharded, save_sharded

    t_start, wall_start = time.perf_counter(), time.time()
    _ray_compat.quiet_train_report_log()
    job: GptJob = config["job"]
    rec = GoodputRecorder(job.run_dir, enabled=True, started=wall_start)  # the one worker writes the goodput log
    rec.tpu_ready()
    fsdp, tensor = int(config["fsdp"]), int(config["tensor"])
    if job.cpu_threads:
        torch.set_num_threads(job.cpu_threads)
    plan = mesh_plan(chips, 1, fsdp, tensor)
    mesh = spmd_mesh(plan)
    data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
    torch.manual_seed(job.seed)
    model = GPT(job.model).to(torch_xla.device())
    shard_gpt(model, mesh, fsdp, tensor)
    wrapped = fsdp_v2(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate, weight_decay=0.01)
    start, losses, resumes = 0, [], []
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with rec.restoring(), ckpt.as_directory() as where:
            history = read_history(where, job.fingerprint)
            start = load_sharded(where, model, opt)
        losses, resumes = list(history["losses"])[:start], [*history["resumes"], start]
        log.info(f"resumed from step {start}")
    autocast = torch.autocast("xla", dtype=torch.bfloat16, enabled=job.bf16)
    first_step_s: float | None = None
    t_steps, n_steps = 0.0, 0
    rec.prep_done(start)
    for step in range(start, job.steps):
        t = time.perf_counter()
        with rec.step(step) as timer:
            with timer.loading():
                # every chip's rows of the data-parallel job, in rank order: the same global batch
                rows = [data.batch(step, r, chips, job.batch_size_per_chip, job.model.seq_len) for r in range(chips)]
                tokens = torch.from_numpy(np.concatenate(rows)).to(torch_xla.device())
            xs.mark_sharding(tokens, mesh, (("data", "fsdp"), None))
            with autocast:
                loss = next_token_loss(wrapped, tokens)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad(set_to_none=True)  # a zeroed gradient would stay whole on every device
            torch_xla.sync()
            losses.append(float(loss.detach()))
        if first_step_s is None:
            first_step_s = time.perf_counter() - t_start
        else:
            t_steps, n_steps = t_steps + time.perf_counter() - t, n_steps + 1
        done = step + 1
        if done % job.checkpoint_every and done != job.steps:
            continue
        metrics: dict[str, Any] = {"step": done, "loss": losses[-1], "first_step_s": first_step_s}
        if n_steps:
            s = TpuSlice.parse(job.slice_spec)
            metrics |= speed_metrics(job.model, s, chips, job.batch_size_per_chip, t_steps / n_steps, xla_on_tpu())
        if done == job.steps:
            xm.wait_device_ops()
            params = local_bytes(list(model.parameters()))
            state = [t for st in opt.state.values() for k, t in st.items() if k in ("exp_avg", "exp_avg_sq")]
            metrics |= {
                "losses": losses,
                "resumes": resumes,
                "param_spread": 0.0,  # one SPMD program: each parameter is one tensor, however many devices
                "mesh": dict(zip(plan.axis_names, plan.shape, strict=True)),
                "bytes_per_device": {
                    "parameters": max(params.values()),
                    "optimizer": max(local_bytes(state).values()),
                },
            }
        log.info(f"step {done}/{job.steps} loss {losses[-1]:.3f}")
        with tempfile.TemporaryDirectory(prefix="tpuray-ckpt-") as tmp, rec.saving():
            save_sharded(tmp, model, opt, done)
            history_out = {"fingerprint": job.fingerprint, "losses": losses, "resumes": resumes}
            (Path(tmp) / HISTORY_FILE).write_text(json.dumps(history_out))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))
