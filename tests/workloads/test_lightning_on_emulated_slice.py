"""PyTorch Lightning through ``ray.train.lightning`` (``RayDDPStrategy``, ``RayLightningEnvironment``,
``prepare_trainer``, ``RayTrainReportCallback``) on the emulated ``v5e:2x2`` slice, written as Ray's Lightning guide
writes it, with only the trainer's configs from tpuray.

Lightning 2.6 pairs no accelerator with ``RayDDPStrategy`` on an XLA device (:mod:`tpuray.workloads.frameworks`
says why), so ``prepare_trainer`` refuses the trainer, naming the reason and what runs on the chips, instead of
Lightning's ``Device should be CPU, got xla:0 instead`` once ``fit`` has started. The run is one short Ray Train
run on the shared cluster (no step trains); it also checks the torchrun variables Lightning reads, without which it
would try to launch processes of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tpuray.workloads import XlaChipConfig, tpu_scaling_config

ray = pytest.importorskip("ray")
pytest.importorskip("lightning")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORKERS = 4


def lightning_train(config: dict[str, Any]) -> None:
    """Ray's Lightning guide's trainer, with nothing of tpuray in it."""
    import os

    import lightning.pytorch as pl
    import ray.train
    import torch
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    trainer = pl.Trainer(
        max_epochs=1,
        devices="auto",
        accelerator="auto",
        strategy=RayDDPStrategy(),  # type: ignore[no-untyped-call]
        plugins=[RayLightningEnvironment()],  # type: ignore[no-untyped-call]
        callbacks=[RayTrainReportCallback()],
        enable_progress_bar=False,
        logger=False,
    )
    strategy: Any = trainer.strategy  # a RayDDPStrategy
    facts: dict[str, Any] = {
        "local_rank_env": os.environ.get("LOCAL_RANK"),
        "world": trainer.world_size,
        "launches_processes": not strategy.cluster_environment.creates_processes_externally,
    }
    try:
        prepare_trainer(trainer)
        facts["prepared"] = "prepared"
    except RuntimeError as e:
        facts["prepared"] = str(e)
    Regression()  # the module builds: the refusal is Lightning's accelerators', not the model's
    rank = ray.train.get_context().get_world_rank()
    (Path(config["out"]) / f"rank-{rank}.json").write_text(json.dumps(facts))


@pytest.fixture(scope="module")
def ranks(emulated_slices: None, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module
    tmp = tmp_path_factory.mktemp("lightning")
    result = TorchTrainer(
        lightning_train,
        train_loop_config={"out": str(tmp)},
        scaling_config=tpu_scaling_config("v5e:2x2"),
        torch_config=XlaChipConfig(),
        run_config=RunConfig(storage_path=str(tmp / "storage"), name="lightning"),
    ).fit()
    assert result.error is None
    return [json.loads((tmp / f"rank-{r}.json").read_text()) for r in range(WORKERS)]


def test_prepare_trainer_refuses_lightning_on_the_chip_saying_why(ranks: list[dict[str, Any]]) -> None:
    from importlib.metadata import version

    from tpuray.workloads.frameworks import LIGHTNING_REFUSAL

    expected = LIGHTNING_REFUSAL.format(version=version("lightning"), device="xla:0")
    assert [r["prepared"] for r in ranks] == [expected] * WORKERS


def test_lightning_sees_ray_trains_workers_and_launches_none(ranks: list[dict[str, Any]]) -> None:
    assert sorted(r["local_rank_env"] for r in ranks) == [str(i) for i in range(WORKERS)]
    assert {(r["world"], r["launches_processes"]) for r in ranks} == {(WORKERS, False)}


def test_the_run_leaves_no_placement_group_behind(ranks: list[dict[str, Any]]) -> None:
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []
