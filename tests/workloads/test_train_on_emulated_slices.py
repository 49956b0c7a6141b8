"""A user's train function, written with tpuray's own verbs (``chip()``, ``optimizer_step``), through
TorchTrainer + XlaChipConfig + tpu_scaling_config on emulated slices.

On the emulated cluster this folder's conftest shares (``emulated_slices``): single-host v5e 2x2 slices (4 chips,
one VM), a multi-host v5p 2x2x2 slice (8 chips on two VMs) and a one-chip v6e 1x1 slice. Covers one worker per
chip, each worker's env, identical parameters across chips that saw different data, SIGKILL recovery through Ray
Train, the placement group after a failed backend start, and the GPT example's checkpoints (separate run names,
corrupt newest checkpoint). Checks that need no second chip run on the one-chip slice: every worker a test starts
costs seconds of CPU (it imports torch and torch_xla and compiles its step), and the suite runs on two cores. So
the multi-host slice's seats and env are checked on the portable-API contract's run (test_portable_contract.py),
with :func:`chip_seats.check_seats`, the check the runs here use.
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

from tests.support.chip_seats import ENV_PREFIXES, Seat, check_seats
from tests.support.goodput_by_hand import check_goodput_by_hand
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import XlaChipConfig, tpu_scaling_config

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SINGLE = TpuSlice.parse("v5e:2x2")
MULTI = TpuSlice.parse("v5p:2x2x2")
ONE = TpuSlice.parse("v6e:1x1")  # its own generation, so no request for it lands on the other slices' VMs


def user_train(config: dict[str, Any]) -> None:
    """What an ML team writes: a model, an optimizer, its own data per chip, checkpoints through Ray Train."""
    import ray.train
    import torch
    import torch_xla

    from tpuray.workloads import chip, optimizer_step
    from tpuray.workloads.api import compile_cache
    from tpuray.workloads.signals.goodput import GoodputRecorder

    entered = time.time()
    c = chip()
    rec = GoodputRecorder(config.get("run_dir"), enabled=c.rank == 0, started=entered)  # the goodput log
    rec.tpu_ready()
    out = Path(config["out"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(c.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with rec.restoring():
            state = torch.load(Path(ckpt.path) / "state.pt", weights_only=True)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start = int(state["step"])
    ctx = ray.get_runtime_context()
    seat = {
        "rank": c.rank,
        "world_size": c.world_size,
        "ray_chip": int(ctx.get_accelerator_ids()["TPU"][0]),
        "labels": {str(k): str(v) for k, v in ctx.get_node_labels().items()},
        "chip": c.chip,
        "worker_id": c.worker_id,
        "slice_index": c.slice_index,
        "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
        "start": start,
        # the compile cache XlaChipConfig set before this function ran (None without one)
        "cache": {k: v for k, v in os.environ.items() if k.startswith("XLA_PERSISTENT_CACHE")},
        "cache_files_before": getattr(compile_cache.current(), "files_before", None),
    }
    (out / f"start-{c.rank}-{start}.json").write_text(json.dumps(seat))
    w_true = torch.arange(8.0) / 8
    rec.prep_done(start)
    with (out / f"losses-{c.rank}.jsonl").open("a") as log:
        for step in range(start, config["steps"]):
            if config.get("kill_at") == step and c.rank == 1 and not (out / "killed").exists():
                # Ray Train registers a report asynchronously: wait until it has, then die mid-run
                ray.train.get_all_reported_checkpoints()
                (out / "killed").touch()
                os.kill(os.getpid(), signal.SIGKILL)
            with rec.step(step) as timer:
                with timer.loading():
                    g = torch.Generator().manual_seed(1000 * step + c.rank)  # each chip its own data
                    x = torch.randn(32, 8, generator=g)
                    y = (x @ w_true).unsqueeze(1)
                loss = ((model(x.to(c.device)) - y.to(c.device)) ** 2).mean()
                loss.backward()
                optimizer_step(opt)
                opt.zero_grad()
                torch_xla.sync()
                log.write(json.dumps({"step": step, "loss": float(loss.detach()), "x0": float(x[0, 0])}) + "\n")
                log.flush()
            if (step + 1) % config["every"] == 0:
                with __import__("tempfile").TemporaryDirectory() as tmp, rec.saving():
                    saved = None
                    if c.rank == 0:
                        torch.save(
                            {"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                            Path(tmp) / "state.pt",
                        )
                        saved = ray.train.Checkpoint.from_directory(tmp)
                    ray.train.report({"step": step + 1}, checkpoint=saved)
    params = [p.detach().cpu().reshape(-1).tolist() for p in model.parameters()]
    (out / f"final-{c.rank}.json").write_text(json.dumps(params))


@pytest.fixture(scope="module", autouse=True)
def by_value() -> None:
    # test functions run in Ray workers, which cannot import this test module: send them by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _fit(tpu_slice: TpuSlice, out: Path, cache: Path | None = None, **config: Any) -> Any:
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    out.mkdir(parents=True, exist_ok=True)
    return TorchTrainer(
        user_train,
        train_loop_config={"out": str(out), "steps": 12, "every": 3, "run_dir": str(out / "storage" / "run"), **config},
        scaling_config=tpu_scaling_config(tpu_slice),
        torch_config=XlaChipConfig(compile_cache_dir=str(cache) if cache else None),
        run_config=RunConfig(
            storage_path=str(out / "storage"), name="run", failure_config=FailureConfig(max_failures=2)
        ),
    ).fit()


def _losses(out: Path, rank: int) -> dict[int, list[float]]:
    """Every loss one rank computed, per step: two values where a resumed attempt redid a step."""
    found: dict[int, list[float]] = {}
    for line in (out / f"losses-{rank}.jsonl").read_text().splitlines():
        row = json.loads(line)
        found.setdefault(row["step"], []).append(row["loss"])
    return found


def _check_run(s: TpuSlice, out: Path) -> list[list[list[float]]]:
    world = s.chips
    seats = [json.loads(p.read_text()) for p in sorted(out.glob("start-*-0.json"))]
    check_seats(s, [Seat(x["rank"], x["ray_chip"], x["labels"], x["env"]) for x in seats])
    for x in seats:  # chip() tells each worker the seat Ray gave it
        assert x["world_size"] == world and x["chip"] == x["ray_chip"]
        assert x["worker_id"] == int(x["labels"]["ray.io/tpu-worker-id"])
    finals = [json.loads((out / f"final-{r}.json").read_text()) for r in range(world)]
    assert all(f == finals[0] for f in finals)  # identical parameters on every chip...
    firsts = {json.dumps(_first_x(out, r)) for r in range(world)}
    assert len(firsts) == world  # ...although every chip saw different data
    mean = [sum(_losses(out, r)[step][-1] for r in range(world)) / world for step in (0, 11)]
    assert mean[1] < 0.5 * mean[0]  # and the loss fell
    return finals


def _first_x(out: Path, rank: int) -> float:
    return float(json.loads((out / f"losses-{rank}.jsonl").read_text().splitlines()[0])["x0"])


def test_user_function_on_a_single_host_slice_survives_a_sigkill(emulated_slices: None, tmp_path: Path) -> None:
    """A worker SIGKILLs itself before step 8; Ray Train restarts the group, which resumes from the checkpoint
    reported after step 6 and redoes steps 6 and 7 with exactly the losses they had: the same curve. The restarted
    group uses the compile cache directory the first attempt wrote, rank 0 writing, the others reading."""
    from tpuray.workloads.signals.goodput import JOB_END, JOB_START, record_job_event

    run_dir = tmp_path / "storage" / "run"
    record_job_event(run_dir, JOB_START)
    result = _fit(SINGLE, tmp_path, cache=tmp_path / "cache", kill_at=8)
    record_job_event(run_dir, JOB_END)
    assert result.error is None
    assert (tmp_path / "killed").exists()
    # the second attempt started from the last reported checkpoint (after step 6), on every chip
    assert sorted(p.name for p in tmp_path.glob("start-*-6.json")) == [f"start-{r}-6.json" for r in range(4)]
    assert not list(tmp_path.glob("start-*-3.json"))
    _check_run(SINGLE, tmp_path)  # ends at the last step: one worker per chip, env, identical params, learning
    for r in range(SINGLE.chips):
        losses = _losses(tmp_path, r)
        assert sorted(losses) == list(range(12))
        assert [len(losses[s]) for s in range(12)] == [1] * 6 + [2, 2] + [1] * 4
        for s in (6, 7):
            first, redone = losses[s]
            assert redone == pytest.approx(first, rel=1e-6)
    check_goodput_by_hand(run_dir, resumed_at=6, lost_steps=[6, 7])
    attempts = {at: [json.loads((tmp_path / f"start-{r}-{at}.json").read_text()) for r in range(4)] for at in (0, 6)}
    dirs = {x["cache"]["XLA_PERSISTENT_CACHE_PATH"] for a in attempts.values() for x in a}
    assert len(dirs) == 1  # one key: both attempts, every chip
    [cache_dir] = dirs
    assert Path(cache_dir).parent.parent.parent == tmp_path / "cache" and "/v5litepod-4-2x2-x1/" in cache_dir
    for a in attempts.values():
        assert [x["cache"]["XLA_PERSISTENT_CACHE_READ_ONLY"] for x in sorted(a, key=lambda x: x["rank"])] == [
            "0",
            "1",
            "1",
            "1",
        ]
    assert attempts[0][0]["cache_files_before"] == 0  # cold on the first attempt...
    assert attempts[6][0]["cache_files_before"] > 0  # ...and the restart found what it wrote


def test_failed_backend_start_leaves_no_reservation(emulated_slices: None, tmp_path: Path) -> None:
    """An error while the backend sets up the workers ends the run with that error and frees the slice."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2.api.config import FailureConfig, RunConfig

    run_config: Any = RunConfig(  # Ray Train V2's RunConfig; TorchTrainer is annotated with the V1 class
        storage_path=str(tmp_path),
        name="bad",
        failure_config=FailureConfig(max_failures=0, controller_failure_limit=0),
    )
    trainer = TorchTrainer(
        user_train,
        train_loop_config={"out": str(tmp_path), "steps": 1, "every": 1},
        scaling_config=tpu_scaling_config(ONE),
        torch_config=XlaChipConfig(base_port=65535),  # leaves no room for the chip's port
        run_config=run_config,
    )
    with pytest.raises(Exception, match=r"base_port 65535: must be 1\.\.65534"):
        trainer.fit()
    deadline = time.monotonic() + 30
    while ray.available_resources().get("TPU", 0) < ray.cluster_resources()["TPU"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("TPU", 0) == ray.cluster_resources()["TPU"]  # every chip free
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []


def test_a_slice_the_cluster_lacks_is_named(emulated_slices: None) -> None:
    import argparse

    from tpuray.workloads.gpt import cli as train
    from tpuray.workloads.placement.seats import PlacementError

    args = argparse.Namespace(chips=None, num_slices=None)
    with pytest.raises(PlacementError, match=r"--topology v6e:2x2: the cluster has no idle .*1 x v5p-16 \(2x2x2\)"):
        train._slices_for(TpuSlice.parse("v6e:2x2"), args)
    with pytest.raises(PlacementError, match="straddle"):
        train._slices_for(MULTI, argparse.Namespace(chips=MULTI.chips + 4, num_slices=None))
    with pytest.raises(PlacementError, match="needs 2"):
        train._slices_for(MULTI, argparse.Namespace(chips=None, num_slices=2))


def test_gpt_checkpoints_by_run_name_and_corrupt_newest_falls_back(emulated_slices: None, tmp_path: Path) -> None:
    from ray.train import FailureConfig, RunConfig

    from tpuray.workloads import launch
    from tpuray.workloads.gpt.loop import STATE_FILE, GptJob, train_gpt
    from tpuray.workloads.gpt.metrics import ModelShape

    cache = tmp_path / "cache"

    def gpt(name: str, steps: int, lr: float = 3e-3) -> Any:
        job = GptJob(ModelShape(64, 1, 16, 2, 8), steps, 2, lr, 2, str(ONE), bf16=False, log_every=2)
        rc = RunConfig(name=name, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=0))
        result = launch.trainer(train_gpt, {"job": job}, ONE, 1, rc, compile_cache_dir=str(cache)).fit()
        assert result.error is None
        return result

    a = gpt("a", 4)  # checkpoints after steps 2 and 4
    # the run's checkpoints live in <storage>/<run name>: another name is another folder (what the CLI's
    # --run-name and the RayJob's --checkpoint-dir rely on; test_run_names_are_checkpoint_folders checks the CLI)
    assert Path(a.checkpoint.path).parent == tmp_path / "a"
    assert {p.name for p in tmp_path.iterdir()} == {"a", "cache"}
    # the compile cache: written on the first run, counted in its metrics (what the summary reports)
    cold = a.metrics["compile_cache"]
    assert cold["warm"] is False and cold["files_written"] > 0 and cold["writer"]
    assert a.metrics["step"] == 4 and a.metrics["resumes"] == []
    (Path(a.checkpoint.path) / STATE_FILE).write_bytes(b"\x00 not a checkpoint")
    again = gpt("a", 6)
    assert again.metrics["resumes"] == [2]  # the newest (step 4) was unreadable: resumed from step 2
    assert len(again.metrics["losses"]) == 6
    assert again.metrics["losses"][:2] == a.metrics["losses"][:2]
    # the second run of the job: the same key, and it finds the first run's files (PJRT CPU cannot reload them,
    # so it counts them as reload failures; on TPUs they are hits)
    warm = again.metrics["compile_cache"]
    assert warm["key"] == cold["key"] and warm["warm"] is True
    assert warm["files_before"] == cold["files_after"]
    assert warm["reload_failures"] + warm["hits"] >= 1
