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

An elastic job (``GptJob.elastic``, whole slices) builds the mesh of the slices live at each start, so the ``data``
axis (HSDP's replicas) is the live slice count, and keeps the global batch of the most slices with
:mod:`tpuray.workloads.gpt.elastic`'s accumulation; DCP restores the checkpoint of any size onto the live mesh.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuray.workloads import _ray_compat, runtime
from tpuray.workloads.gpt import elastic
from tpuray.workloads.gpt.elastic import ElasticStep
from tpuray.workloads.gpt.loop import GptJob, over_ranks
from tpuray.workloads.gpt.metrics import speed_metrics
from tpuray.workloads.gpt.sharded import HISTORY_FILE, read_history
from tpuray.workloads.sharding.mesh import MeshError, MeshPlan
from tpuray.workloads.signals.drain import CheckpointSignal
from tpuray.workloads.signals.goodput import GoodputRecorder

if TYPE_CHECKING:
    import torch

    from tpuray.workloads.api.worker import Runtime
    from tpuray.workloads.gpt.data import TokenBatches

__all__ = ["live_plan", "restore", "save", "sharded_gpt", "step_loss", "train_gpt_fsdp2"]

log = logging.getLogger(__name__)


def _state(model: Any, opt: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, opt)}


def restore(where: str, model: Any, opt: Any, fingerprint: str) -> dict[str, Any]:
    """Load the DCP checkpoint at ``where`` into the sharded ``model`` and ``opt`` in place (on any mesh: each rank
    reads the parts of the global tensors its shards cover, AdamW's moments included); returns the run's history
    beside it. ``get_optimizer_state_dict`` initialises the moments of an optimizer that has not stepped yet, so
    they exist to be loaded into (torch 2.9 ``distributed/checkpoint/state_dict.py``, ``_init_optim_state``)."""
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    history = read_history(where, fingerprint)
    state = _state(model, opt)
    state_dict_loader.load(state, checkpoint_id=where)  # every rank reads its own shards, in place
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optimizer"])
    return history


def save(where: str, model: Any, opt: Any, history: dict[str, Any], rank: int) -> None:
    """Write this rank's shards of ``model`` and ``opt`` into ``where`` (rank 0 also the DCP index and ``history``
    beside them)."""
    from torch.distributed.checkpoint import state_dict_saver

    state_dict_saver.save(_state(model, opt), checkpoint_id=where)
    if rank == 0:
        (Path(where) / HISTORY_FILE).write_text(json.dumps(history))


def live_plan(job: GptJob, fsdp: int, tensor: int, num_slices: int, c: Runtime) -> tuple[MeshPlan, ElasticStep | None]:
    """The mesh of the live worker group and this worker's share of every step: a fixed-size job's mesh spans
    ``num_slices``; an elastic one's (``job.elastic``) the whole slices of the group Ray Train started, its ``data``
    axis (HSDP's replicas) growing and shrinking with them while ``fsdp`` stays inside a slice, the global batch
    kept by gradient accumulation (:mod:`tpuray.workloads.gpt.elastic`)."""
    from tpuray.components.catalog.runtimes import RUNTIMES
    from tpuray.components.catalog.topology import TpuSlice
    from tpuray.workloads.sharding import mesh_plan

    if job.elastic is not None and tensor > 1:
        raise MeshError(
            f"workload.parallelism.tensor={tensor} with workload.elastic: at more than one slice the mesh has a data "
            "axis, and this path averages gradients across replicas only through FSDP2 over fsdp; set tensor: 1 "
            "(fsdp inside a slice), or remove workload.elastic"
        )
    plan = elastic.elastic_step(job.elastic, job.batch_size_per_chip, job.slice_spec, c)
    s = TpuSlice.parse(job.slice_spec)
    slices = plan.slices if plan is not None else num_slices
    return mesh_plan(RUNTIMES["torch_tpu"].devices_per_host(s) * s.hosts, slices, fsdp, tensor), plan


def sharded_gpt(job: GptJob, plan: MeshPlan, fsdp: int, tensor: int, device: Any) -> tuple[Any, Any]:
    """The job's GPT, identical on every rank before it is sharded over ``plan``'s mesh, and its AdamW."""
    import torch

    from tpuray.workloads.gpt.model import GPT
    from tpuray.workloads.sharding.fsdp2 import device_mesh, shard_gpt

    mesh = device_mesh(plan, device.type)
    torch.manual_seed(job.seed)  # identical initial weights on every rank, before they are sharded
    model = GPT(job.model).to(device)
    shard_gpt(model, mesh, fsdp, tensor)  # in place: FSDP2 and DTensor swap the parameters
    opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate, weight_decay=0.01)
    return model, opt


def step_loss(
    job: GptJob,
    model: Any,
    data: TokenBatches,
    step: int,
    c: Runtime,
    tensor: int,
    plan: ElasticStep | None,
    loading: Callable[[], AbstractContextManager[Any]],
) -> torch.Tensor:
    """Forward and backward this rank's rows of ``step``; returns its loss, whose mean over the ranks is the step's.
    Fixed size: the data-parallel job's rows, replica r (its data and fsdp coordinates) taking devices r*tensor ..
    +tensor-1. Elastic: this rank's rows of the kept global batch, in lockstep micro-batches (FSDP2's forward and
    backward are collectives), weighted so that FSDP2's gradient mean over the ranks is the global batch's."""
    import numpy as np
    import torch

    seq = job.model.seq_len
    if plan is not None:
        return elastic.accumulate(plan, model, data, step, seq, c.device, nullcontext(), loading, lockstep=True)
    replica, world = c.rank // tensor, c.world_size
    with loading():
        rows = [
            data.batch(step, d, world, job.batch_size_per_chip, seq)
            for d in range(replica * tensor, (replica + 1) * tensor)
        ]
        tokens = torch.from_numpy(np.concatenate(rows)).to(c.device)
    loss: torch.Tensor = model.loss(tokens)
    loss.backward()  # type: ignore[no-untyped-call]
    return loss


def train_gpt_fsdp2(config: dict[str, Any]) -> None:
    """Train ``config["job"]`` sharded ``config["fsdp"] x config["tensor"]`` over ``config["num_slices"]`` slices of
    TorchTPU devices, one per worker (an elastic job: over the slices Ray Train gives it, at most that many)."""
    import ray.train
    import torch
    import torch.distributed as dist

    from tpuray.components.catalog.topology import TpuSlice
    from tpuray.workloads.gpt.data import open_dataset
    from tpuray.workloads.sharding.fsdp2 import rank_bytes

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
    plan, grow = live_plan(job, fsdp, tensor, num_slices, c)
    data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
    model, opt = sharded_gpt(job, plan, fsdp, tensor, c.device)
    start, losses, resumes = 0, [], []
    history: dict[str, Any] | None = None
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with rec.restoring(), ckpt.as_directory() as where:
            history = restore(where, model, opt, job.fingerprint)
        start = int(history["step"])
        losses, resumes = list(history["losses"])[:start], [*history["resumes"], start]
        if rank == 0:
            log.info(f"resumed from step {start}")
    if grow is not None:
        elastic.record_size(rec, grow, history, start)
    signal = CheckpointSignal(watch_node=c.first_on_host, every=job.drain_check_every, mean_over_ranks=over_ranks(c))
    first_step_s: float | None = None
    t_steps, n_steps = 0.0, 0
    pending: list[torch.Tensor] = []
    rec.prep_done(start)
    for step in range(start, job.steps):
        t = time.perf_counter()
        with rec.step(step) as timer:
            loss = step_loss(job, model, data, step, c, tensor, grow, timer.loading)
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
            rows = grow.rows_per_worker if grow is not None else job.batch_size_per_chip  # the kept global batch
            metrics |= speed_metrics(job.model, s, world, rows, t_steps / n_steps, False)
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
        out = {"fingerprint": job.fingerprint, "step": done, "losses": losses, "resumes": resumes}
        if grow is not None:
            out[elastic.SLICES_KEY] = grow.slices
        with tempfile.TemporaryDirectory(prefix="tpuray-ckpt-") as tmp, rec.saving():
            save(tmp, model, opt, out, rank)
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
