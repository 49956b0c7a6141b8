"""PyTorch Lightning through ``ray.train.lightning`` (``RayDDPStrategy``, ``RayLightningEnvironment``,
``prepare_trainer``, ``RayTrainReportCallback``) on the emulated ``v5e:2x2`` slice, written as Ray's Lightning guide
writes it (``accelerator="auto"``, no tpuray import), with only the trainer's configs from tpuray
(:mod:`tpuray.workloads.xla.lightning` says what tpuray sets for it).

Suite time: one short run on the shared cluster, two fits: the first trains two epochs (the callback reports a
checkpoint after each); the second, a new ``Trainer`` and a new module, resumes from the checkpoint
``ray.train.get_checkpoint()`` hands it with ``trainer.fit(ckpt_path=...)``, as Ray's guide does after a restart, for
one more epoch. (A restart of the workers would cost the suite as much again; the Transformers test and the
portable API's test resume after one.)
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.framework_runs import WORKERS, fit_on_v5e_2x2

ray = pytest.importorskip("ray")
pytest.importorskip("lightning")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EPOCHS, MORE_EPOCHS = 2, 1
ROWS, BATCH = 64, 4  # per chip: 16 rows, 4 steps an epoch


def lightning_train(config: dict[str, Any]) -> None:
    """Ray's Lightning guide's script: nothing of tpuray in it."""
    import os

    import lightning.pytorch as pl
    import ray.train
    import torch
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    from torch.utils.data import DataLoader, TensorDataset

    out = Path(config["out"])
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(rank)  # each chip starts from its own weights: DDP must start them all from rank 0's

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, index: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Record(pl.Callback):
        """What the test reads: the device the module trains on, the wrapper, each step's loss."""

        def __init__(self) -> None:
            self.losses: list[Any] = []
            self.graphs: list[list[int]] = []  # XLA graphs compiled, and cut (compiled or found), so far
            self.seen: dict[str, Any] = {}

        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.seen |= {
                "start_step": trainer.global_step,
                "start_epoch": trainer.current_epoch,
                "start_params": [p.detach().cpu().reshape(-1).tolist() for p in module.parameters()],
            }

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
            import torch_xla.debug.metrics as met

            self.losses.append(outputs["loss"].detach())  # read after training: no graph cut mid-run
            compiled = int((met.metric_data("CompileTime") or [0])[0])  # type: ignore[no-untyped-call]
            found = int(met.counter_value("CachedCompile") or 0)  # type: ignore[no-untyped-call]
            self.graphs.append([compiled, compiled + found])
            self.seen |= {
                "param_device": str(next(module.parameters()).device),
                "batch_device": str(batch[0].device),
                "wrapper": type(trainer.strategy.model).__name__,
                "accelerator": type(trainer.accelerator).__name__,
            }

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, 4, generator=gen)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    data = TensorDataset(x, y)
    loaders = {"train_dataloaders": DataLoader(data, batch_size=BATCH), "val_dataloaders": DataLoader(data, BATCH)}

    def fit(tag: str, epochs: int, ckpt: Any = None) -> None:
        record = Record()
        trainer = pl.Trainer(
            max_epochs=epochs,
            devices="auto",
            accelerator="auto",
            strategy=RayDDPStrategy(),  # type: ignore[no-untyped-call]
            plugins=[RayLightningEnvironment()],  # type: ignore[no-untyped-call]
            callbacks=[RayTrainReportCallback(), record],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            num_sanity_val_steps=0,
            default_root_dir=str(out / f"pl-{rank}"),
        )
        trainer = prepare_trainer(trainer)
        model = Regression()  # the second fit's starts from other weights, unless it resumes
        if ckpt:
            with ckpt.as_directory() as d:
                trainer.fit(model, ckpt_path=os.path.join(d, "checkpoint.ckpt"), **loaders)
        else:
            trainer.fit(model, **loaders)
        facts = record.seen | {
            "losses": [float(t) for t in record.losses],
            "graphs": record.graphs,
            "global_step": trainer.global_step,
            "params": [p.detach().cpu().reshape(-1).tolist() for p in model.parameters()],
            "local_rank_env": os.environ.get("LOCAL_RANK"),
            "world": trainer.world_size,
        }
        (out / f"{tag}-{rank}.json").write_text(json.dumps(facts))

    fit("first", EPOCHS)
    # Ray Train V2's get_checkpoint() is the latest checkpoint reported (ray/train/v2/_internal/execution/
    # context.py, _wait_then_report), as after a restart: here, RayTrainReportCallback's last one
    fit("resume", EPOCHS + MORE_EPOCHS, ray.train.get_checkpoint())


@pytest.fixture(scope="module")
def runs(emulated_slices: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return fit_on_v5e_2x2(lightning_train, "lightning", tmp_path_factory.mktemp("lightning"))


STEPS_PER_EPOCH = ROWS // WORKERS // BATCH
GRAPHS_PER_STEP = 2
"""What a ``prepare_model`` loop cuts per step on the emulated slice (:mod:`tpuray.workloads.xla.portable`): forward and
backward (the gradient average reads the gradients), then the update (the optimizer-step hook)."""


def test_lightning_trains_on_each_chips_xla_device(runs: dict[str, Any]) -> None:
    assert runs["result"].error is None
    for tag in ("first", "resume"):
        ranks = runs["ranks"][tag]
        assert {(r["param_device"], r["batch_device"]) for r in ranks} == {("xla:0", "xla:0")}, tag
        assert {(r["wrapper"], r["accelerator"]) for r in ranks} == {("XlaDDP", "XlaChipAccelerator")}, tag
        # Lightning sees Ray Train's workers (stock Ray Train's torchrun variables) and launches none of its own
        assert sorted(r["local_rank_env"] for r in ranks) == [str(i) for i in range(WORKERS)]
        assert {r["world"] for r in ranks} == {WORKERS}


def test_the_chips_start_and_end_in_sync_and_the_loss_falls(runs: dict[str, Any]) -> None:
    for tag in ("first", "resume"):
        ranks = runs["ranks"][tag]
        assert all(r["params"] == ranks[0]["params"] for r in ranks), tag  # averaged gradients on sharded data
    first = runs["ranks"]["first"]
    assert len({json.dumps(r["start_params"]) for r in first}) == 1  # rank 0's weights, though each seeded its own
    losses = first[0]["losses"]
    assert len(losses) == EPOCHS * STEPS_PER_EPOCH
    assert losses[-1] < 0.5 * losses[0], losses


def test_each_step_runs_the_graphs_a_portable_loop_runs_and_compiles_none(runs: dict[str, Any]) -> None:
    for tag in ("first", "resume"):
        for r in runs["ranks"][tag]:
            graphs = r["graphs"]  # (compiled, cut) so far, after each step
            for e in range(0, len(graphs), STEPS_PER_EPOCH):
                epoch = graphs[e : e + STEPS_PER_EPOCH]
                cuts = [b - a for (_, a), (_, b) in itertools.pairwise(epoch)]
                assert cuts == [GRAPHS_PER_STEP] * (STEPS_PER_EPOCH - 1), (tag, graphs)
                assert {c for c, _ in epoch[1:]} == {epoch[1][0]}, (tag, graphs)  # the same graphs every step


def test_a_second_fit_resumes_from_get_checkpoint(runs: dict[str, Any]) -> None:
    import torch

    reported = []
    for ckpt, metrics in runs["result"].best_checkpoints:  # every one RayTrainReportCallback reported, in order
        with ckpt.as_directory() as d:
            state = torch.load(Path(d) / "checkpoint.ckpt", map_location="cpu", weights_only=False)
        reported.append((metrics["epoch"], state["global_step"], "val_loss" in metrics))
        assert {t.device.type for t in state["state_dict"].values()} == {"cpu"}  # loads without torch_xla
    assert reported == [(e, (e + 1) * STEPS_PER_EPOCH, True) for e in range(EPOCHS + MORE_EPOCHS)]
    first, resumed = runs["ranks"]["first"][0], runs["ranks"]["resume"][0]
    assert (resumed["start_epoch"], resumed["start_step"]) == (EPOCHS, EPOCHS * STEPS_PER_EPOCH)
    assert resumed["start_params"] == first["params"]  # from the trained weights, on every chip
    assert all(r["start_params"] == first["params"] for r in runs["ranks"]["resume"])
    assert resumed["global_step"] == (EPOCHS + MORE_EPOCHS) * STEPS_PER_EPOCH
    assert max(resumed["losses"]) < first["losses"][0]


def test_the_run_leaves_no_placement_group_behind(runs: dict[str, Any]) -> None:
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []
