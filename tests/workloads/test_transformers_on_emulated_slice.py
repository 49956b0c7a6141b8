"""A Hugging Face Transformers ``Trainer`` through Ray Train (``prepare_trainer`` + ``RayTrainReportCallback``) on
the emulated ``v5e:2x2`` slice, with only the trainer's configs from tpuray (``tpu_scaling_config``,
``XlaChipConfig``) and a tiny GPT-2 built in the test (no download).

Accelerate takes torch_xla's path on these workers: it must see the 4 chips as its world (each would otherwise
train alone on the whole dataset, and the chips would still end equal, each having seen the same batches), shard
the data over them, average gradients over them and write the checkpoint once (:mod:`tpuray.workloads.frameworks`).

Suite time: one run on the shared cluster, a few steps: its first attempt trains and checkpoints (and shows
Transformers' default fused optimizer refused), then fails on purpose; Ray Train restarts the workers, and the
second attempt resumes from the checkpoint ``ray.train.get_checkpoint()`` hands it (Ray Train V2 has no
``TorchTrainer(resume_from_checkpoint=...)``: it raises a ``DeprecationWarning``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tpuray.workloads import XlaChipConfig, tpu_scaling_config

ray = pytest.importorskip("ray")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORKERS = 4  # the v5e 2x2 slice's chips
STEPS, MORE_STEPS, SAVE_EVERY = 6, 2, 3
BATCH, ROWS, SEQ = 2, 64, 16


def hf_train(config: dict[str, Any]) -> None:
    """An ordinary Transformers script under Ray Train: nothing of tpuray in it."""
    import os

    import ray.train
    import torch
    import torch.distributed as dist
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    out = Path(config["out"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=SEQ))
    # learnable next tokens: each row counts up from its own start
    ids = (torch.arange(ROWS).unsqueeze(1) + torch.arange(SEQ)) % 64
    rows = [{"input_ids": r, "labels": r} for r in ids]
    ckpt = ray.train.get_checkpoint()
    common: dict[str, Any] = {
        # one per rank: RayTrainReportCallback copies the output dir on every rank right after its own save, and
        # Transformers waits for no rank after saving (transformers/trainer.py, _save_checkpoint), so a shared dir
        # is copied while other ranks still write to it, and the reported checkpoint can hold a truncated file
        "output_dir": str(out / f"hf-{rank}"),
        "per_device_train_batch_size": BATCH,
        "learning_rate": 3e-3,
        "logging_steps": 1,
        "save_steps": SAVE_EVERY,
        "report_to": [],
        "seed": 0,
    }

    def trainer(**kwargs: Any) -> Any:
        return prepare_trainer(
            Trainer(
                model=model,
                args=TrainingArguments(**common, **kwargs),
                train_dataset=rows,
                callbacks=[RayTrainReportCallback()],  # type: ignore[no-untyped-call]
            )
        )

    facts: dict[str, Any] = {"resumed": ckpt is not None}
    if ckpt is None:
        try:  # Transformers' default optimizer (adamw_torch_fused with torch >= 2.8)
            trainer(max_steps=STEPS).create_optimizer()
            facts["default_optim"] = "made"
        except RuntimeError as e:
            facts["default_optim"] = str(e)
        t = trainer(max_steps=STEPS, optim="adamw_torch")
        t.train()
    else:
        t = trainer(max_steps=STEPS + MORE_STEPS, optim="adamw_torch")
        with ckpt.as_directory() as d:
            t.train(resume_from_checkpoint=str(Path(d) / RayTrainReportCallback.CHECKPOINT_NAME))
    state = t.accelerator.state
    facts |= {
        "processes": state.num_processes,
        "process_index": state.process_index,
        "dist_rank": dist.get_rank(),
        "device": str(t.args.device),
        "param_device": str(next(t.model.parameters()).device),
        "steps": [h["step"] for h in t.state.log_history if "loss" in h],
        "losses": [h["loss"] for h in t.state.log_history if "loss" in h],
        "global_step": t.state.global_step,
        "params": [p.detach().cpu().reshape(-1).tolist() for p in t.model.parameters()],
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")},
    }
    tag = "resume" if ckpt is not None else "first"
    (out / f"{tag}-{rank}.json").write_text(json.dumps(facts))
    if ckpt is None:
        raise RuntimeError("planned restart: the next attempt resumes from get_checkpoint()")


@pytest.fixture(scope="module")
def runs(emulated_slices: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module
    tmp = tmp_path_factory.mktemp("transformers")
    result = TorchTrainer(
        hf_train,
        train_loop_config={"out": str(tmp)},
        # the only lines a GPU script changes
        scaling_config=tpu_scaling_config("v5e:2x2"),
        torch_config=XlaChipConfig(),
        run_config=RunConfig(storage_path=str(tmp / "storage"), name="hf", failure_config=FailureConfig(1)),
    ).fit()
    ranks = {t: [json.loads((tmp / f"{t}-{r}.json").read_text()) for r in range(WORKERS)] for t in ("first", "resume")}
    return {"result": result, "ranks": ranks}


def test_the_trainer_trains_on_each_chips_xla_device_over_all_four_chips(runs: dict[str, Any]) -> None:
    assert runs["result"].error is None
    for tag in ("first", "resume"):
        ranks = runs["ranks"][tag]
        assert [r["processes"] for r in ranks] == [WORKERS] * WORKERS  # Accelerate's world: the chips
        assert sorted(r["process_index"] for r in ranks) == list(range(WORKERS))
        assert all(r["process_index"] == r["dist_rank"] for r in ranks)  # torch_xla's ordinal is the group's rank
        assert {(r["device"], r["param_device"]) for r in ranks} == {("xla:0", "xla:0")}
        assert sorted(r["env"]["RANK"] for r in ranks) == [str(i) for i in range(WORKERS)]  # as stock Ray Train


def test_the_chips_end_in_sync_and_the_loss_falls(runs: dict[str, Any]) -> None:
    for tag in ("first", "resume"):
        ranks = runs["ranks"][tag]
        assert all(r["params"] == ranks[0]["params"] for r in ranks), tag
    losses = runs["ranks"]["first"][0]["losses"]
    assert len(losses) == STEPS
    assert losses[-1] < 0.95 * losses[0], losses
    # 4 chips x batch 2 per step: the 64 rows are 8 steps, so 6 steps never see the same batch twice on one chip;
    # were each chip alone (a world of one) it would step through the same rows as the others, and the loss logged
    # (Trainer's mean over the world) would be each chip's own


def test_after_a_restart_the_trainer_resumes_from_get_checkpoint(runs: dict[str, Any]) -> None:
    steps = []
    for ckpt, _ in runs["result"].best_checkpoints:  # every one RayTrainReportCallback reported, in order
        with ckpt.as_directory() as d:
            hf = Path(d) / "checkpoint"
            assert (hf / "model.safetensors").is_file() and (hf / "optimizer.pt").is_file()
            steps.append(json.loads((hf / "trainer_state.json").read_text())["global_step"])
    assert steps == [SAVE_EVERY, STEPS, STEPS + MORE_STEPS]
    for r in runs["ranks"]["resume"]:
        assert r["resumed"]
        assert r["steps"][-MORE_STEPS:] == list(range(STEPS + 1, STEPS + MORE_STEPS + 1))
        assert r["global_step"] == STEPS + MORE_STEPS
    first_loss = runs["ranks"]["first"][0]["losses"]
    assert runs["ranks"]["resume"][0]["losses"][-1] < first_loss[0]  # it went on from the trained weights


def test_transformers_default_fused_optimizer_is_refused_naming_the_alternative(runs: dict[str, Any]) -> None:
    from tpuray.workloads.frameworks import FUSED_OPTIMIZER_REFUSAL

    for r in runs["ranks"]["first"]:
        assert r["default_optim"] == FUSED_OPTIMIZER_REFUSAL.format(name="torch.optim.AdamW")


def test_the_runs_leave_no_placement_group_behind(runs: dict[str, Any]) -> None:
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []
