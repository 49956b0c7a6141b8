"""Ray Tune across emulated TPU slices: one trial per free slice, each trial a GPU-style Ray Train script unchanged
but for its configs.

The train function below uses only Ray Train's portable API (``get_device``, ``prepare_model``,
``prepare_data_loader``, ``report``) and imports nothing from tpuray: what a team already runs on GPUs with
``ScalingConfig(num_workers=N, use_gpu=True)``. Only the trainer's configs change: ``tpu_scaling_config(...)`` and
``XlaChipConfig()``.

The emulated cluster is the one this folder's conftest shares with the other train tests; its two single-host v5e
2x2 slices (4 chips each) are Tune's. Every worker a trial starts costs seconds of CPU (it imports torch and
torch_xla and compiles its steps) on the suite's two cores, so each trial proves the per-chip facts of its run
besides the tuning ones. The same script's facts on the multi-host slice, its restart through ``get_checkpoint()``
and its compile count per step are the contract's (test_portable_contract.py); a finished run resumed by a new
``fit()`` of the same name is the GPT example's (test_train_on_emulated_slices.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.chip_seats import ENV_PREFIXES, Seat, check_seats
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import XlaChipConfig, tpu_scaling_config

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SINGLE = TpuSlice.parse("v5e:2x2")
SAMPLES = 256  # 64 per chip on 4 chips: whole batches of 16
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
    from torch.utils.data import DataLoader, TensorDataset

    out = Path(config["out"])
    ctx = ray.train.get_context()
    began = time.time()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = ray.train.torch.prepare_model(net)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 8, generator=g)
    y = x @ (torch.arange(8.0) / 8).unsqueeze(1)
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    rank = ctx.get_world_rank()
    seen: list[list[float]] = []
    losses: list[float] = []
    for epoch in range(config["epochs"]):
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
        "seen": seen,
        "losses": losses,
        "slice": labels["ray.io/tpu-slice-name"],
        "began": began,
        "ended": time.time(),
    }
    (out / f"{config['tag']}-{rank}.json").write_text(json.dumps(record))


@pytest.fixture(scope="module", autouse=True)
def by_value() -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this module


def _check_chips(s: TpuSlice, runs: list[dict[str, Any]]) -> None:
    """What every run of the GPU-style script must show on its chips, whatever its learning rate."""
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


def _mean_loss(runs: list[dict[str, Any]], epoch: int) -> float:
    return float(sum(r["losses"][epoch] for r in runs)) / len(runs)


def tune_trial(config: dict[str, Any]) -> None:
    """A Tune trial: one TorchTrainer on one v5e 2x2 slice, its reports passed on to Tune."""
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    name = f"lr{config['lr']}"
    # a Ray Train V2 callback; ray.train.RunConfig is annotated with the V1 (Ray Tune) Callback
    report: Any = TuneReportCallback()  # type: ignore[no-untyped-call]
    TorchTrainer(
        gpu_style_train,
        train_loop_config={**config, "tag": name},
        # the only lines that differ from the script's GPU run: ScalingConfig(num_workers=4, use_gpu=True)
        scaling_config=tpu_scaling_config(SINGLE),
        torch_config=XlaChipConfig(),
        run_config=RunConfig(
            storage_path=config["out"],
            name=name,
            failure_config=FailureConfig(max_failures=0),
            callbacks=[report],
        ),
    ).fit()


def test_tune_runs_one_trial_per_free_slice_and_picks_the_best(emulated_slices: None, tmp_path: Path) -> None:
    from ray import tune

    from tpuray.workloads.signals.tuning import trials_at_once

    at_once = trials_at_once(SINGLE)
    assert at_once == 2  # the two idle v5e 2x2 slices; the other slices are other shapes
    tuner = tune.Tuner(
        tune_trial,
        param_space={"lr": tune.grid_search(list(LRS)), "epochs": 2, "out": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=at_once),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="tune"),
    )
    results = tuner.fit()
    assert results.num_errors == 0 and len(results) == len(LRS)
    assert (results.get_best_result().config or {})["lr"] == max(LRS)
    trials = {lr: [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"lr{lr}-*.json"))] for lr in LRS}
    for lr, workers in trials.items():
        # the GPU-style script per chip on a single-host slice, in every trial
        _check_chips(SINGLE, workers)
        assert len({w["slice"] for w in workers}) == 1, lr  # each trial's workers on one slice
    assert _mean_loss(trials[max(LRS)], -1) < _mean_loss(trials[max(LRS)], 0)  # the best trial learned
    spans = [(min(w["began"] for w in ws), max(w["ended"] for w in ws)) for ws in trials.values()]
    overlapping = max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)
    assert overlapping <= at_once
    deadline = time.monotonic() + 30  # the last trial's placement group goes as its controller exits
    while ray.available_resources().get("TPU", 0) < ray.cluster_resources()["TPU"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("TPU", 0) == ray.cluster_resources()["TPU"]  # every slice released
