"""``tpuray plan``'s drain windows: each pool's window by capacity type, and a warning where the training job's
checkpoint cannot be written inside its pool's drain deadline (``planning.drain``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.stacks import shipped_values
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.config.capacity import MAX_RUN_MARGIN_SECONDS
from tpuray.components.planning.drain import CHECKPOINT_WRITE_BYTES_PER_S, drain_window, pool_drains
from tpuray.components.review.plan import DRAIN_RULE, drain_lines, plan_from_run

# a GPT whose checkpoint (12 bytes a parameter) takes about 13 s to write: past a spot pool's 10 s deadline on GKE's
# 30 s shutdown, inside the 90 s of the 120 s one, and still fits a v5e chip's HBM for training
MODEL = {"vocabSize": 32_000, "layers": 10, "dModel": 2_048, "heads": 16}


def _dev(period: int, model: dict[str, Any] | None = None) -> StackConfig:
    values = shipped_values("dev")
    values["slicePools"][0]["capacity"]["shutdownGracePeriod"] = period
    if model is not None:
        values["workload"]["model"] = model
    return parse_stack_config(values, stack="dev")


def _warnings(cfg: StackConfig) -> list[Any]:
    plan = plan_from_run("dev", cfg, {"project": "tpuray", "resources": [], "config": {}})
    return [w for w in plan.warnings if w.rule == DRAIN_RULE]


def test_the_model_sits_between_the_two_spot_deadlines() -> None:
    """The premise of the warning tests below, computed from the same constants the plan uses."""
    (short,), (long,) = pool_drains(_dev(30, MODEL)), pool_drains(_dev(120, MODEL))
    assert short.checkpoint is not None and long.checkpoint is not None
    seconds = short.checkpoint.bytes / CHECKPOINT_WRITE_BYTES_PER_S
    assert short.window.seconds < seconds < long.window.seconds


@pytest.mark.parametrize("period", [30, 120])
def test_a_spot_training_pool_warns_only_where_its_deadline_cannot_hold_the_checkpoint(period: int) -> None:
    cfg = _dev(period, MODEL)
    found = _warnings(cfg)
    (d,) = pool_drains(cfg)
    assert d.fits == (period == 120)
    if period == 120:
        assert found == []
        return
    (w,) = found
    assert w.advisory and "slice pool v5e-dev (spot)" in w.message
    assert f"{d.window.seconds} s drain deadline" in w.message
    assert "capacity.shutdownGracePeriod: 120" in w.message  # the fix a spot pool on GKE's 30 s has


def test_a_small_model_fits_gkes_default_spot_window_without_a_warning() -> None:
    cfg = _dev(30)  # the dev stack's own small GPT
    assert _warnings(cfg) == [] and all(d.fits for d in pool_drains(cfg))


@pytest.mark.parametrize("period", [30, 120])
def test_the_plan_says_each_spot_pools_shutdown_and_deadline(period: int) -> None:
    cfg = _dev(period)
    window = drain_window(cfg.slice_pools[0].capacity)
    text = "\n".join(drain_lines(cfg))
    assert window.node_shutdown is not None
    how = "asked for" if period == 120 else "GKE's default"
    assert f"graceful node shutdown {period} s ({how}; {window.node_shutdown.pods_seconds} s for the pods)" in text
    assert f"pod grace {window.drain.grace_seconds} s, drain deadline {window.drain.deadline_seconds} s" in text
    assert "the training job's checkpoint: 120,576 parameters" in text and "fits the" in text


def test_the_plan_says_a_time_limited_pools_checkpoint_margin() -> None:
    """prod's flex-start pool ends at maxRunDuration: the workers checkpoint the margin before it; the reservation
    pool has no run time, no shutdown of its own, and the training job's estimate."""
    cfg = parse_stack_config(shipped_values("prod"), stack="prod")
    lines = drain_lines(cfg)
    flex = next(line for line in lines if line.startswith("- v6e-flex (flex-start)"))
    assert f"checkpoints {MAX_RUN_MARGIN_SECONDS} s before maxRunDuration ends" in flex
    train = next(line for line in lines if line.startswith("- v5p-train (reservation)"))
    assert "graceful node shutdown" not in train and "maxRunDuration" not in train
    assert sum("the training job's checkpoint" in line for line in lines) == 1
