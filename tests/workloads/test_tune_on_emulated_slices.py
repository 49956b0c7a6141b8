"""A GPU-style Ray Train script, unchanged but for its configs, on emulated TPU slices; and Ray Tune across slices.

The train function below uses only Ray Train's portable API (``get_device``, ``prepare_model``,
``prepare_data_loader``, ``report``, ``get_checkpoint``) and imports nothing from tpuray: what a team already runs
on GPUs with ``ScalingConfig(num_workers=N, use_gpu=True)``. Only the trainer's configs change:
``tpu_scaling_config(...)`` and ``XlaChipConfig()``.

The emulated cluster is the one this folder's conftest shares with the other train tests: two single-host v5e 2x2
slices (4 chips each; Tune's two slices), a multi-host v5p 2x2x2 slice (8 chips on two VMs) and a one-chip v6e.
Every worker a run starts costs seconds of CPU (it imports torch and torch_xla and compiles its steps) on the
suite's two cores, so each run here proves all it can: the v5p run every per-chip fact, the multi-host slice's
seats and PJRT env among them (:func:`chip_seats.check_seats`, which the runs of tpuray's own verbs use too),
and resumed for two more epochs, the resume through ``get_checkpoint()`` on two hosts; each of the Tune test's
three v5e runs the same facts plus the tuning ones; and the best trial, resumed for four more epochs, the resume on
one host.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.chip_seats import ENV_PREFIXES, Seat, check_seats
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import XlaChipConfig, tpu_scaling_config

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SINGLE = TpuSlice.parse("v5e:2x2")
MULTI = TpuSlice.parse("v5p:2x2x2")
SAMPLES = 256  # 64 per chip on 4 chips, 32 on 8: whole batches of 16 everywhere
LRS = (0.003, 0.03, 0.2)  # a few SGD steps on a well-conditioned regression: the largest lr learns most
# Three trials on the two free v5e slices: one more trial than slices, so one must wait for a slice (the bound on
# trials at once can fail), and no more (each trial starts four workers that import torch and torch_xla).


def gpu_style_train(config: dict[str, Any]) -> None:
    """An ordinary Ray Train loop (as in Ray's own PyTorch examples): no TPU or tpuray call in it."""
    import os
    import tempfile
    import time

    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    import torch_xla.debug.metrics as met  # only to measure compiles; the loop itself is XLA-free
    from torch.utils.data import DataLoader, TensorDataset

    out = Path(config["out"])
    ctx = ray.train.get_context()
    began = time.time()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(Path(d) / "model.pt", weights_only=True)
        net.load_state_dict(state["model"])
        start = int(state["epoch"])
    model = ray.train.torch.prepare_model(net)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 8, generator=g)
    y = x @ (torch.arange(8.0) / 8).unsqueeze(1)
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    rank = ctx.get_world_rank()
    seen: list[list[float]] = []
    compiles: list[int] = []
    losses: list[float] = []
    for epoch in range(start, config["epochs"]):
        if ctx.get_world_size() > 1:
            loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        total = 0.0
        seen.append([])
        for xb, yb in loader:
            seen[-1].extend(xb[:, 0].cpu().tolist())
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            total += float(loss.detach().cpu())
        losses.append(total / len(loader))
        compiles.append(int((met.metric_data("CompileTime") or [0])[0]))  # type: ignore[no-untyped-call]
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if rank == 0:
                torch.save({"model": net.state_dict(), "epoch": epoch + 1}, Path(tmp) / "model.pt")
                saved = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report({"loss": losses[-1], "epoch": epoch + 1}, checkpoint=saved)
    runtime = ray.get_runtime_context()
    labels = {str(k): str(v) for k, v in runtime.get_node_labels().items()}
    record = {
        "rank": rank,
        "world_size": ctx.get_world_size(),
        "dist_rank": dist.get_rank(),
        "dist_world_size": dist.get_world_size(),
        "ray_chip": int(runtime.get_accelerator_ids()["TPU"][0]),  # the chip Ray gave this worker
        "labels": labels,
        "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
        "device": str(ray.train.torch.get_device()),
        "param_devices": sorted({str(p.device) for p in net.parameters()}),
        "params": [p.detach().cpu().reshape(-1).tolist() for p in net.parameters()],
        "start": start,
        "seen": seen,
        "losses": losses,
        "compiles": compiles,
        "slice": labels["ray.io/tpu-slice-name"],
        "began": began,
        "ended": time.time(),
    }
    (out / f"{config.get('tag', 'run')}-{start}-{rank}.json").write_text(json.dumps(record))


@pytest.fixture(scope="module", autouse=True)
def by_value() -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this module


def _check_chips(s: TpuSlice, runs: list[dict[str, Any]], *, warmed_up: bool = True) -> None:
    """What every run of the GPU-style script must show on its chips, whatever its learning rate; the compile
    count only where the run's last epoch came after the warm-up (``warmed_up``)."""
    assert len(runs) == s.chips
    for r in runs:
        assert r["device"].startswith("xla") and r["param_devices"] == [r["device"]]  # the chip, not the host CPU
        assert r["world_size"] == r["dist_world_size"] == s.chips
    # one worker per chip of one slice, each with its seat's PJRT env; the XLA rank (the process group's, which
    # shards the data) is the chip's TPU task id
    check_seats(s, [Seat(r["dist_rank"], r["ray_chip"], r["labels"], r["env"]) for r in runs])
    # every chip ends with the same parameters...
    assert all(r["params"] == runs[0]["params"] for r in runs)
    # ...though each saw its own shard of every epoch (DistributedSampler by XLA rank)
    for epoch in range(len(runs[0]["seen"])):
        seen = [v for r in runs for v in r["seen"][epoch]]
        assert len(seen) == len(set(seen)) == SAMPLES  # the chips' shards split the data set
    # no graph grows without end and nothing recompiles per step: after the warm-up (the first update's graph, the
    # first rank-0 checkpoint reading the parameters) the compile count stays put
    for r in runs:
        assert not warmed_up or r["compiles"][-1] == r["compiles"][-2], r["compiles"]


def _mean_loss(runs: list[dict[str, Any]], epoch: int) -> float:
    return float(sum(r["losses"][epoch] for r in runs)) / len(runs)


def _runs(out: Path, tag: str, start: int) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{tag}-{start}-*.json"))]


def _trainer(s: TpuSlice, config: dict[str, Any], storage: Path, name: str, callbacks: list[Any]) -> Any:
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    return TorchTrainer(
        gpu_style_train,
        train_loop_config=config,
        # the only lines that differ from the script's GPU run: ScalingConfig(num_workers=4, use_gpu=True)
        scaling_config=tpu_scaling_config(s),
        torch_config=XlaChipConfig(),
        run_config=RunConfig(
            storage_path=str(storage), name=name, failure_config=FailureConfig(max_failures=0), callbacks=callbacks
        ),
    )


def test_gpu_style_script_runs_per_chip_on_a_multi_host_slice(emulated_slices: None, tmp_path: Path) -> None:
    result = _trainer(MULTI, {"out": str(tmp_path), "epochs": 4, "lr": 0.1}, tmp_path, "run", []).fit()
    assert result.error is None and result.metrics["epoch"] == 4
    runs = _runs(tmp_path, "run", 0)
    _check_chips(MULTI, runs)
    assert len({r["slice"] for r in runs}) == 1
    assert _mean_loss(runs, -1) < 0.5 * _mean_loss(runs, 0)  # the loss fell
    # two epochs more: Ray Train resumes the run (same storage and name) from its last checkpoint, on both hosts
    again = _trainer(MULTI, {"out": str(tmp_path), "epochs": 6, "lr": 0.1}, tmp_path, "run", []).fit()
    assert again.error is None and again.metrics["epoch"] == 6
    resumed = _runs(tmp_path, "run", 4)
    assert len(resumed) == MULTI.chips  # it started at epoch 4 (get_checkpoint) on every chip
    _check_chips(MULTI, resumed)
    assert resumed[0]["params"] != runs[0]["params"]  # it trained on from there
    assert _mean_loss(resumed, -1) < _mean_loss(runs, -1)  # and the loss kept falling


def tune_trial(config: dict[str, Any]) -> None:
    """A Tune trial: one TorchTrainer on one v5e 2x2 slice, its reports passed on to Tune."""
    from ray.tune.integration.ray_train import TuneReportCallback

    name = f"lr{config['lr']}"
    cb = TuneReportCallback()  # type: ignore[no-untyped-call]
    _trainer(SINGLE, {**config, "tag": name}, Path(config["storage"]), name, [cb]).fit()


def test_tune_runs_one_trial_per_free_slice_and_the_best_resumes(emulated_slices: None, tmp_path: Path) -> None:
    from ray import tune

    from tpuray.workloads.tuning import trials_at_once

    at_once = trials_at_once(SINGLE)
    assert at_once == 2  # the two idle v5e 2x2 slices; the other slices are other shapes
    tuner = tune.Tuner(
        tune_trial,
        param_space={"lr": tune.grid_search(list(LRS)), "epochs": 2, "out": str(tmp_path), "storage": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=at_once),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="tune"),
    )
    results = tuner.fit()
    assert results.num_errors == 0 and len(results) == len(LRS)
    best = (results.get_best_result().config or {})["lr"]
    assert best == max(LRS)
    trials = {lr: _runs(tmp_path, f"lr{lr}", 0) for lr in LRS}
    for lr, workers in trials.items():
        # the GPU-style script per chip on a single-host slice, in every trial (two epochs: all warm-up)
        _check_chips(SINGLE, workers, warmed_up=False)
        assert len({w["slice"] for w in workers}) == 1, lr  # each trial's workers on one slice
    spans = [(min(w["began"] for w in ws), max(w["ended"] for w in ws)) for ws in trials.values()]
    overlapping = max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)
    assert overlapping <= at_once
    deadline = time.monotonic() + 30  # the last trial's placement group goes as its controller exits
    while ray.available_resources().get("TPU", 0) < ray.cluster_resources()["TPU"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("TPU", 0) == ray.cluster_resources()["TPU"]  # every slice released

    # the best trial's run, four epochs more: Ray Train resumes it (same storage and name) from its last checkpoint;
    # the compile count settles over the first two (the first update, the first rank-0 checkpoints)
    name = f"lr{best}"
    config = {"out": str(tmp_path), "epochs": 6, "lr": best, "tag": name}
    again = _trainer(SINGLE, config, tmp_path, name, []).fit()
    assert again.error is None and again.metrics["epoch"] == 6
    resumed = _runs(tmp_path, name, 2)
    assert len(resumed) == SINGLE.chips  # it started at epoch 2 (get_checkpoint) on every chip
    _check_chips(SINGLE, resumed)
    assert _mean_loss(resumed, -1) < 0.5 * _mean_loss(trials[best], 0)  # and the loss kept falling
