"""Sharded training through Ray Train on the emulated single-host v5e 2x2 slice: one SPMD worker drives the host's 4
chips (4 virtual CPU devices), trains the GPT sharded ``fsdp=2 x tensor=2``, checkpoints its shards through
``ray.train.report``, SIGKILLs itself mid-run and resumes sharded from ``get_checkpoint()``.

On the session cluster this folder's conftest shares (``emulated_slices``); the worker takes one of the two v5e
slices' VMs (4 chips, 1 of its 4 CPUs) and gives it back.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.workload import training_state_bytes_per_device

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SINGLE = TpuSlice.parse("v5e:2x2")
FSDP, TENSOR = 2, 2
DIMS = GptDims(vocab_size=32, seq_len=8, d_model=16, layers=1)  # the train function's GPT


def spmd_train(config: dict[str, Any]) -> None:
    """One process per host, as PyTorch/XLA SPMD runs on a TPU VM: the mesh over the host's chips, the GPT marked
    from the sharding table, its shards checkpointed with torch.distributed.checkpoint."""
    from tpuray.workloads.sharding import spmd_devices

    chips = spmd_devices()  # SpmdConfig's backend did this already (CPU_NUM_DEVICES); the same count again

    import ray.train
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla.distributed.spmd import xla_sharding as xs

    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.gpt.model import GPT, next_token_loss
    from tpuray.workloads.sharding import fsdp_v2, local_bytes, mesh_plan, shard_gpt, spmd_mesh
    from tpuray.workloads.sharding.checkpoint import load_sharded, save_sharded

    out = Path(config["out"])
    fsdp, tensor = config["fsdp"], config["tensor"]
    mesh = spmd_mesh(mesh_plan(chips, 1, fsdp, tensor))
    torch.manual_seed(0)
    model = GPT(ModelShape(vocab_size=32, layers=1, d_model=16, heads=4, seq_len=8)).to(torch_xla.device())
    shard_gpt(model, mesh, fsdp, tensor)
    wrapped = fsdp_v2(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def moments() -> list[torch.Tensor]:
        return [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]

    def held(tensors: list[torch.Tensor]) -> list[int]:
        xm.wait_device_ops()  # local shards are read from finished buffers
        return sorted(set(local_bytes(tensors).values()))

    start, restored = 0, None
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as where:
            start = load_sharded(where, model, opt)
        restored = held([*model.parameters(), *moments()])
    seat = {
        "start": start,
        "devices": xr.global_runtime_device_count(),
        "cpu_num_devices": os.environ.get("CPU_NUM_DEVICES"),
        "process_group": torch.distributed.get_world_size() if torch.distributed.is_initialized() else None,
        "restored_bytes": restored,
        "world_size": ray.train.get_context().get_world_size(),
    }
    (out / f"start-{start}.json").write_text(json.dumps(seat))
    with (out / "losses.jsonl").open("a") as log:
        for step in range(start, config["steps"]):
            if step == config["kill_at"] and not (out / "killed").exists():
                # Ray Train registers a report asynchronously: wait until it has, then die mid-run
                ray.train.get_all_reported_checkpoints()
                (out / "killed").touch()
                os.kill(os.getpid(), signal.SIGKILL)
            g = torch.Generator().manual_seed(step)
            tokens = torch.randint(0, 32, (8, 9), generator=g).to(torch_xla.device())
            xs.mark_sharding(tokens, mesh, (("data", "fsdp"), None))
            loss = next_token_loss(wrapped, tokens)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            torch_xla.sync()
            if step == config["steps"] - 1:  # the whole training state, as each device holds it
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                (out / "final.json").write_text(
                    json.dumps({"bytes": held([*model.parameters(), *grads, *moments()]), "grads": len(grads)})
                )
            opt.zero_grad()  # set_to_none: a zeroed gradient would stay whole on every device
            log.write(json.dumps({"step": step, "loss": float(loss.detach())}) + "\n")
            log.flush()
            if (step + 1) % config["every"] == 0:
                with __import__("tempfile").TemporaryDirectory() as tmp:
                    save_sharded(tmp, model, opt, step + 1)
                    ray.train.report({"step": step + 1}, checkpoint=ray.train.Checkpoint.from_directory(tmp))


@pytest.fixture(scope="module", autouse=True)
def by_value() -> None:
    # the train function runs in a Ray worker, which cannot import this test module: send it by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _losses(out: Path) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {}
    for line in (out / "losses.jsonl").read_text().splitlines():
        row = json.loads(line)
        found.setdefault(row["step"], []).append(row["loss"])
    return found


def _chips_and_cpus() -> dict[str, float]:
    return {k: v for k, v in ray.available_resources().items() if k in ("TPU", "CPU")}


def test_a_sharded_spmd_run_survives_a_sigkill_and_resumes_sharded_from_its_checkpoint(
    emulated_slices: None, tmp_path: Path
) -> None:
    """The worker checkpoints its shards after step 3 and SIGKILLs itself before step 5; Ray Train restarts it,
    it restores the shards from ``get_checkpoint()`` and redoes steps 3 and 4 with the losses they had (step 4's
    needs AdamW's restored moments too), every device holding its share of the state after the restore and at the
    end."""
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    from tpuray.workloads.sharding import spmd_scaling_config
    from tpuray.workloads.sharding.backend import SpmdConfig
    from tpuray.workloads.sharding.checkpoint import STEP_FILE

    before = _chips_and_cpus()
    config = {"out": str(tmp_path), "fsdp": FSDP, "tensor": TENSOR, "steps": 6, "every": 3, "kill_at": 5}
    result = TorchTrainer(
        spmd_train,
        train_loop_config=config,
        scaling_config=spmd_scaling_config(SINGLE, pjrt_device="CPU"),
        torch_config=SpmdConfig(),
        run_config=RunConfig(
            storage_path=str(tmp_path / "storage"), name="spmd", failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    assert result.error is None
    assert (tmp_path / "killed").exists()
    starts = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in tmp_path.glob("start-*.json")}
    assert sorted(starts) == [0, 3]  # the restart began from the checkpoint after step 3
    for seat in starts.values():  # one worker driving the host's 4 chips as 4 devices
        assert seat["world_size"] == 1 and seat["devices"] == SINGLE.chips and seat["cpu_num_devices"] == "4"
        assert seat["process_group"] == 1  # the hosts' gloo group the checkpoint's planners coordinate through
    share = training_state_bytes_per_device(DIMS, FSDP, TENSOR)
    assert share < training_state_bytes_per_device(DIMS, 1, 1) // 2  # the mesh does shard it
    # restored in place into the sharded model and optimizer: parameters and moments, each device its share
    assert starts[3]["restored_bytes"] == [share // 4 * 3], starts[3]
    final = json.loads((tmp_path / "final.json").read_text())
    assert final == {"bytes": [share], "grads": 16}, final  # weights, gradients and moments: the estimate
    losses = _losses(tmp_path)
    assert sorted(losses) == list(range(6))
    assert [len(losses[s]) for s in range(6)] == [1, 1, 1, 2, 2, 1]
    for s in (3, 4):
        first, redone = losses[s]
        assert redone == pytest.approx(first, rel=1e-6)
    assert losses[3][0] != losses[4][0]  # the steps did train: different batches, moving weights
    assert result.checkpoint is not None
    with result.checkpoint.as_directory() as last:
        assert json.loads((Path(last) / STEP_FILE).read_text()) == {"step": 6}
        assert (Path(last) / ".metadata").exists() and (Path(last) / "__0_0.distcp").exists()
    # the cluster as it was: the slice's chips and CPU given back (Ray frees a group's bundles asynchronously)
    deadline = time.monotonic() + 30
    while _chips_and_cpus() != before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _chips_and_cpus() == before
    assert [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"] == []


def test_the_built_in_gpt_job_trains_sharded_and_reports_the_mesh_and_bytes_per_device(
    emulated_slices: None, tmp_path: Path
) -> None:
    """The entrypoint's sharded path (``workload.parallelism`` 2 x 2 on the v5e 2x2 slice): its trainer, its
    train function and its summary, on the shared cluster."""
    from ray.train import FailureConfig, RunConfig

    from tpuray.workloads.gpt.cli import _summary
    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.gpt.sharded import train_gpt_sharded
    from tpuray.workloads.launch import trainer
    from tpuray.workloads.signals.goodput import JOB_END, JOB_START, record_job_event

    shape = ModelShape(vocab_size=64, layers=1, d_model=16, heads=4, seq_len=8)
    run_dir = tmp_path / "gpt"
    job = GptJob(shape, 8, 2, 1e-2, 4, str(SINGLE), bf16=False, log_every=4, cpu_threads=1, run_dir=str(run_dir))
    rc = RunConfig(name="gpt", storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=0))
    record_job_event(run_dir, JOB_START)  # as the CLI does around the fit
    config = {"job": job, "fsdp": FSDP, "tensor": TENSOR}
    result = trainer(train_gpt_sharded, config, SINGLE, 1, rc, spmd=True, pjrt_device="CPU").fit()
    record_job_event(run_dir, JOB_END)
    summary = _summary(result, job, SINGLE, 1, "xla", True, 1.0)
    assert summary["mesh"] == {"data": 1, "fsdp": FSDP, "tensor": TENSOR}
    share = training_state_bytes_per_device(GptDims(vocab_size=64, seq_len=8, d_model=16, layers=1), FSDP, TENSOR)
    assert summary["bytes_per_device"] == {"parameters": share // 4, "optimizer": share // 2}
    losses = summary["losses"]
    assert isinstance(losses, list) and len(losses) == 8 and summary["final_step"] == 8
    assert losses[-1] < losses[0]  # it learns the synthetic progressions
    goodput = summary["goodput"]
    assert isinstance(goodput, dict) and goodput["productive_s"] > 0  # the steps were recorded
    assert summary["checkpoint"] is not None and Path(str(summary["checkpoint"]), "history.json").exists()
