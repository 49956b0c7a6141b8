"""The built-in GPT's TorchTPU loop (``gpt/fsdp2_loop.py``: its mesh, sharded model, step and DCP checkpoint) on
CPU, one process per emulated device over gloo, as an elastic job of ``v5e:2x2`` slices (4 devices each) sharded
``fsdp=4``: ``python fsdp2_elastic_run.py WORLD RUN ...``, each RUN a JSON object:

* ``name``: what rank 0's result line is called;
* ``most``: the job's most slices (``GptJob.elastic = (1, most)``; the live slices are ``WORLD / 4``);
* ``steps``: ``[first, end)`` of the steps it trains, the first resumed from ``restore`` when above 0;
* ``restore``, ``save``: a checkpoint directory to restore from, and one to write after step ``save_at``.

Rank 0 emits ``{"name", "losses", "history", "optimizer_diff", "resizes"}`` per RUN (tests/support/gloo_ranks.py):
the step losses (the mean over the ranks), the history read beside a restored checkpoint, the largest difference
between the restored optimizer state and the one saved (0.0 where nothing was restored), and the resize events."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tests.support.gloo_ranks import emit, spawn_ranks
from tpuray.workloads.gpt.data import open_dataset
from tpuray.workloads.gpt.elastic import SLICES_KEY, record_size
from tpuray.workloads.gpt.fsdp2_loop import live_plan, restore, save, sharded_gpt, step_loss
from tpuray.workloads.gpt.loop import GptJob
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.signals.goodput import GoodputRecorder
from tpuray.workloads.torch_tpu.runtime import TorchTpuRuntime

SHAPE = ModelShape(vocab_size=64, layers=1, d_model=16, heads=4, seq_len=8)
FSDP = 4  # a v5e 2x2 slice's devices: the data axis is the live slice count
JOB = GptJob(SHAPE, steps=8, batch_size_per_chip=1, learning_rate=1e-2, checkpoint_every=2, slice_spec="v5e:2x2")


@dataclasses.dataclass(frozen=True)
class CpuRuntime(TorchTpuRuntime):
    """TorchTPU's runtime on a plain gloo process: the CPU, where Ray would answer ``get_device()``."""

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


def _full_optimizer(model: Any, opt: Any) -> dict[str, Any]:
    """The whole optimizer state, on rank 0 (a collective; the other ranks get an empty one)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    whole: Any = get_optimizer_state_dict(model, opt, options=options)
    state: dict[str, Any] = whole.get("state", {})
    return state


def _diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k][m].double() - b[k][m].double()).abs().max()) for k in a for m in a[k])


def _run(spec: dict[str, Any], rank: int, world: int) -> None:
    job = dataclasses.replace(JOB, elastic=(1, int(spec["most"])))
    c = CpuRuntime(first_on_host=rank == 0)
    plan, grow = live_plan(job, FSDP, 1, int(spec["most"]), c)
    assert grow is not None and plan.shape == (world // FSDP, FSDP, 1), plan
    model, opt = sharded_gpt(job, plan, FSDP, 1, c.device)
    data = open_dataset(job.dataset, SHAPE.vocab_size, job.seed)
    first, end = spec["steps"]
    history: dict[str, Any] | None = None
    optimizer_diff = 0.0
    if spec.get("restore"):
        history = restore(spec["restore"], model, opt, job.fingerprint)
        assert int(history["step"]) == first, history
        restored = _full_optimizer(model, opt)
        if rank == 0:
            optimizer_diff = _diff(restored, torch.load(Path(spec["restore"], "optimizer.pt")))
    rec = GoodputRecorder(None)  # its events in memory
    record_size(rec, grow, history, first)
    losses: list[float] = []
    for step in range(first, end):
        loss = step_loss(job, model, data, step, c, 1, grow, contextlib.nullcontext)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(c.mean(loss.detach().reshape(1))[0]))
        if step + 1 == spec.get("save_at"):
            out = {"fingerprint": job.fingerprint, "step": step + 1, "losses": losses, "resumes": []}
            save(spec["save"], model, opt, out | {SLICES_KEY: grow.slices}, rank)
            whole = _full_optimizer(model, opt)
            if rank == 0:
                torch.save(whole, Path(spec["save"], "optimizer.pt"))
            dist.barrier()
    if rank == 0:
        resizes = [[e["from"], e["to"], e["step"]] for e in rec.events if e["e"] == "resize"]
        result = {"name": spec["name"], "losses": losses, "history": history, "optimizer_diff": optimizer_diff}
        emit(result | {"resizes": resizes})


def _runs(rank: int, world: int, runs: list[dict[str, Any]]) -> None:
    for spec in runs:
        _run(spec, rank, world)


def main(argv: list[str]) -> None:
    spawn_ranks(_runs, int(argv[0]), [json.loads(a) for a in argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
