"""The built-in GPT trained sharded on TorchTPU (``workload.parallelism`` above 1, ``backend: torch_tpu``): one Ray
worker per device through Ray's own TorchTPU path, the GPT sharded by FSDP2 and DTensor tensor parallelism from the
sharding table (:func:`~tpuray.workloads.sharding.shard_gpt`) over the ``(data, fsdp, tensor)`` mesh of the job's
slices (:func:`~tpuray.workloads.sharding.mesh_plan`: ``fsdp`` and ``tensor`` inside a slice, ``data`` across
slices), checkpointed with ``torch.distributed.checkpoint`` through Ray Train and resumed from ``get_checkpoint()``.

The mesh's ranks are in ascending order along each axis (:func:`~tpuray.workloads.sharding.fsdp2.device_mesh`), not
torch_tpu's ``topology_aware_mesh`` order: FSDP2 shards by the rank in the axis's process group, which
``torch.distributed.new_group`` numbers in sorted order, while DTensor (and so DCP) places shards by mesh coordinate,
so a permuted layout writes every shard at another's offset and a checkpoint then restores onto the same layout only
(measured with torch 2.9 and 2.13 on CPU: a 4-rank checkpoint loaded into 8 ranks differed by 0.46).

The batch of each step is the data-parallel job's (every device's rows, the ``tensor`` ranks of one replica
sharing theirs), so the sharded run trains on the same data. Each worker writes its own DCP shards into the
directory it reports; Ray Train gathers them into one checkpoint, with the run's history beside them.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from tpuray.workloads import _ray_compat, runtime
from tpuray.workloads.gpt.loop import GptJob, over_ranks
from tpuray.workloads.gpt.metrics import speed_metrics
from tpuray.workloads.gpt.sharded import HISTORY_FILE, read_history
from tpuray.workloads.signals.drain import CheckpointSignal
from tpuray.workloads.signals.goodput import GoodputRecorder

__all__ = ["train_gpt_fsdp2"]

log = logging.getLogger(__name__)


def _state(model: Any, opt: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, opt)}


def _restore(where: str, model: Any, opt: Any, fingerprint: str) -> dict[str, Any]:
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    history = read_history(where, fingerprint)
    state = _state(model, opt)
    state_dict_loader.load(state, checkpoint_id=where)  # every rank reads its own shards, in place
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optimizer"])
    return history


def train_gpt_fsdp2(config: dict[str, Any]) -> None:
    """Train ``config["job"]`` sharded ``config["fsdp"] x config["tensor"]`` over ``config["num_slices"]`` slices of
    TorchTPU devices, one per worker."""
    import numpy as np
    import ray.train
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import state_dict_saver

    from tpuray.components.catalog.runtimes import RUNTIMES
    from tpuray.components.catalog.topology import TpuSlice
    from tpuray.workloads.gpt.data import open_dataset
    from tpuray.workloads.gpt.model import GPT
    from tpuray.workloads.sharding import mesh_plan
    from tpuray.workloads.sharding.fsdp2 import device_mesh, rank_bytes, shard_gpt

    t_start, wall_start = time.perf_counter(), time.time()
    _ray_compat.quiet_train_report_log()
    job: GptJob = config["job"]
    fsdp, tensor, num_slices = int(config["fsdp"]), int(config["tensor"]), int(config["num_slices"])
    c = runtime()  # TorchTPU's, bound by its env callback
    rank, world = c.rank, c.world_size
    rec = GoodputRecorder(job.run_dir, enabled=rank == 0, started=wall_start)
    rec.tpu_ready()
    if job.cpu_threads:
        torch.set_num_threads(job.cpu_threads)
    s = TpuSlice.parse(job.slice_spec)
    plan = mesh_plan(RUNTIMES["torch_tpu"].devices_per_host(s) * s.hosts, num_slices, fsdp, tensor)
    device = c.device
    mesh = device_mesh(plan, device.type)
    data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
    torch.manual_seed(job.seed)  # identical initial weights on every rank, before they are sharded
    model = GPT(job.model).to(device)
    shard_gpt(model, mesh, fsdp, tensor)  # in place: FSDP2 and DTensor swap the parameters
    opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate, weight_decay=0.01)
    start, losses, resumes = 0, [], []
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with rec.restoring(), ckpt.as_directory() as where:
            history = _restore(where, model, opt, job.fingerprint)
        start = int(history["step"])
        losses, resumes = list(history["losses"])[:start], [*history["resumes"], start]
        if rank == 0:
            log.info(f"resumed from step {start}")
    # the data-parallel job's rows: replica r (its data and fsdp coordinates) takes devices r*tensor .. +tensor-1
    replica = rank // tensor
    signal = CheckpointSignal(watch_node=c.first_on_host, every=job.drain_check_every, mean_over_ranks=over_ranks(c))
    first_step_s: float | None = None
    t_steps, n_steps = 0.0, 0
    pending: list[torch.Tensor] = []
    rec.prep_done(start)
    for step in range(start, job.steps):
        t = time.perf_counter()
        with rec.step(step) as timer:
            with timer.loading():
                rows = [
                    data.batch(step, d, world, job.batch_size_per_chip, job.model.seq_len)
                    for d in range(replica * tensor, (replica + 1) * tensor)
                ]
                tokens = torch.from_numpy(np.concatenate(rows)).to(device)
            loss = model.loss(tokens)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad(set_to_none=True)
            pending.append(loss.detach())
        if first_step_s is None:
            first_step_s = time.perf_counter() - t_start
        else:
            t_steps, n_steps = t_steps + time.perf_counter() - t, n_steps + 1
        done = step + 1
        out_of_turn = signal(done)
        if done % job.checkpoint_every and done != job.steps and not out_of_turn:
            continue
        losses += c.mean(torch.stack(pending)).tolist()  # one all-reduce per report, not per step
        pending = []
        metrics: dict[str, Any] = {"step": done, "loss": losses[-1], "first_step_s": first_step_s}
        if n_steps:
            metrics |= speed_metrics(job.model, s, world, job.batch_size_per_chip, t_steps / n_steps, False)
        if done == job.steps:
            moments = [t for st in opt.state.values() for k, t in st.items() if k in ("exp_avg", "exp_avg_sq")]
            held = torch.tensor([rank_bytes(model.parameters()), rank_bytes(moments)], dtype=torch.float64)
            dist.all_reduce(held, op=dist.ReduceOp.MAX)
            metrics |= {
                "losses": losses,
                "resumes": resumes,
                "param_spread": _replica_spread(model, rank % (fsdp * tensor), world),
                "mesh": dict(zip(plan.axis_names, plan.shape, strict=True)),
                "bytes_per_device": {"parameters": int(held[0]), "optimizer": int(held[1])},
            }
        if rank == 0:
            log.info(f"step {done}/{job.steps} loss {losses[-1]:.3f}" + (f" ({signal.reason})" if out_of_turn else ""))
        with tempfile.TemporaryDirectory(prefix="tpuray-ckpt-") as tmp, rec.saving():
            state_dict_saver.save(_state(model, opt), checkpoint_id=tmp)  # this rank's shards (and rank 0 the index)
            if rank == 0:
                history_out = {"fingerprint": job.fingerprint, "step": done, "losses": losses, "resumes": resumes}
                (Path(tmp) / HISTORY_FILE).write_text(json.dumps(history_out))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))
    signal.close()


def _replica_spread(model: Any, place: int, world: int) -> float:
    """0.0 if every replica along the data axis holds the same shards: the ranks at the same place in their replica
    (``rank % (fsdp * tensor)``, the mesh's ranks being in order) hash their local shards alike; 1.0 if not."""
    import hashlib

    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    h = hashlib.sha256()
    for p in model.parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        h.update(local.detach().cpu().numpy().tobytes())
    seen: list[Any] = [None] * world
    dist.all_gather_object(seen, (place, h.hexdigest()))
    by_place: dict[int, set[str]] = {}
    for at, digest in seen:
        by_place.setdefault(at, set()).add(digest)
    return 0.0 if all(len(d) == 1 for d in by_place.values()) else 1.0
