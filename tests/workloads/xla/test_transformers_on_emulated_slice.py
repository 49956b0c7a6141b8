"""A Hugging Face Transformers ``Trainer`` through Ray Train (``prepare_trainer`` + ``RayTrainReportCallback``) on
the emulated ``v5e:2x2`` slice, with only the trainer's configs from tpuray (``tpu_scaling_config``,
``XlaChipConfig``) and a tiny GPT-2 built in the test (no download).

Accelerate takes torch_xla's path on these workers: it must see the 4 chips as its world (each would otherwise
train alone on the whole dataset, and the chips would still end equal, each having seen the same batches), shard
the data over them, average gradients over them and write the checkpoint once (:mod:`tpuray.workloads.xla.frameworks`).

Suite time: one run on the shared cluster, a few steps: its ``Trainer`` trains and checkpoints (and shows
Transformers' default fused optimizer refused); a second ``Trainer`` in the same workers resumes from the checkpoint
``ray.train.get_checkpoint()`` hands it, Ray Train V2's latest reported one, as after a restart
(ray/train/v2/_internal/execution/context.py; Ray Train V2 has no ``TorchTrainer(resume_from_checkpoint=...)``: it
raises a ``DeprecationWarning``). Restarted workers reading ``get_checkpoint()`` are the contract's restart row and
the SIGKILL test's (test_portable_contract.py, test_train_on_emulated_slices.py): four more workers importing
Transformers would add tens of CPU seconds and nothing Transformers does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.framework_runs import WORKERS, fit_on_v5e_2x2

ray = pytest.importorskip("ray")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

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
    gpt2 = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=SEQ)
    # learnable next tokens: each row counts up from its own start
    ids = (torch.arange(ROWS).unsqueeze(1) + torch.arange(SEQ)) % 64
    rows = [{"input_ids": r, "labels": r} for r in ids]
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

    def trainer(seed: int, **kwargs: Any) -> Any:
        torch.manual_seed(seed)
        return prepare_trainer(
            Trainer(
                model=GPT2LMHeadModel(gpt2),
                args=TrainingArguments(**common, **kwargs),
                train_dataset=rows,
                callbacks=[RayTrainReportCallback()],  # type: ignore[no-untyped-call]
            )
        )

    def record(tag: str, t: Any, **facts: Any) -> None:
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
        (out / f"{tag}-{rank}.json").write_text(json.dumps(facts))

    try:  # Transformers' default optimizer (adamw_torch_fused with torch >= 2.8)
        trainer(0, max_steps=STEPS).create_optimizer()
        default_optim = "made"
    except RuntimeError as e:
        default_optim = str(e)
    t = trainer(0, max_steps=STEPS, optim="adamw_torch")
    t.train()
    record("first", t, default_optim=default_optim, resumed=False)
    ckpt = ray.train.get_checkpoint()  # the latest reported: the first Trainer's last save
    # another model, with other weights: only the checkpoint can bring back the trained ones
    t = trainer(1, max_steps=STEPS + MORE_STEPS, optim="adamw_torch")
    with ckpt.as_directory() as d:
        t.train(resume_from_checkpoint=str(Path(d) / RayTrainReportCallback.CHECKPOINT_NAME))
    record("resume", t, resumed=True)


@pytest.fixture(scope="module")
def runs(emulated_slices: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return fit_on_v5e_2x2(hf_train, "hf", tmp_path_factory.mktemp("transformers"))


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


def test_a_second_trainer_resumes_from_get_checkpoint(runs: dict[str, Any]) -> None:
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
    first = runs["ranks"]["first"][0]["losses"]
    # it went on from the trained weights, not the second model's own: its first step's loss is nearer the first
    # run's last than its start
    assert runs["ranks"]["resume"][0]["losses"][-MORE_STEPS] < (first[0] + first[-1]) / 2, first


def test_transformers_default_fused_optimizer_is_refused_naming_the_alternative(runs: dict[str, Any]) -> None:
    from tpuray.workloads.xla.frameworks import FUSED_OPTIMIZER_REFUSAL

    for r in runs["ranks"]["first"]:
        assert r["default_optim"] == FUSED_OPTIMIZER_REFUSAL.format(name="torch.optim.AdamW")


def test_the_runs_leave_no_placement_group_behind(runs: dict[str, Any]) -> None:
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []
