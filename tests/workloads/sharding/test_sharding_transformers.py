"""Hugging Face's ``Trainer`` with ``fsdp_config={"xla": True, "xla_fsdp_v2": True}`` trains a tiny Llama sharded
over tpuray's ``spmd_mesh(mesh_plan(4, fsdp=4))`` on 4 virtual CPU devices, in a subprocess (hf_fsdp_v2_step.py
beside this: torch_xla reads PJRT_DEVICE and CPU_NUM_DEVICES once, when it initialises).

Transformers 5.24's path runs on CPU devices (nothing in it asks for a TPU) once two of its faults are put right by
``tpuray.workloads.sharding.hf.XlaFsdpV2Trainer``: ``Trainer.__init__`` replaces the global mesh with its own, and
``Trainer._prepare_for_training`` never creates the optimizer when ``fsdp_config["xla"]`` is on
(``transformers/trainer.py``; the stock ``Trainer`` fails in ``create_scheduler`` with ``'NoneType' object has no
attribute 'param_groups'``, which the last test asserts so that it notices a fix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tpuray.workloads.sharding.mesh import mesh_plan

SCRIPT = Path(__file__).with_name("hf_fsdp_v2_step.py")

# fp32 on both sides: the sharded program adds the same products in another order (each device's partial sums of
# a matmul over its shard of the contracted dimension, then their all-reduce), each sum rounding at ~1.2e-7
# relative, and AdamW's update is bounded by the learning rate, so six steps stay near that (measured: 2.4e-7 at
# most on a loss near 4). A wrong step (a shard of the batch or of a gradient lost) moves a loss by about what a
# step does, 0.05 to 0.2 here, far above this.
RELATIVE_TOLERANCE = 1e-5


def _run(mode: str) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TPU_VISIBLE_CHIPS", None)
    if mode == "plain":
        env["USE_TORCH_XLA"] = "0"  # transformers' is_torch_xla_available reads it: plain torch on the CPU
    else:
        env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), mode], env=env, capture_output=True, text=True, check=False, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # the Trainer prints its logs as Python dicts ('{'loss': ...}'), the script its result as JSON
    [result] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"')]
    assert isinstance(result, dict)
    return result


@pytest.mark.slow
def test_the_trainer_with_xla_fsdp_v2_trains_sharded_on_tpurays_mesh_with_the_unsharded_losses() -> None:
    sharded, plain = _run("sharded"), _run("plain")
    losses, reference = sharded["losses"], plain["losses"]
    assert len(losses) == len(reference) == 6
    assert sharded["dtypes"] == plain["dtypes"] == ["torch.float32"]
    assert losses[-1] < losses[0] - 0.25, losses  # it learns
    for got, want in zip(losses, reference, strict=True):
        assert abs(got - want) <= RELATIVE_TOLERANCE * abs(want), (losses, reference)
    # Transformers' FSDPv2 wrap ran over tpuray's mesh, which the Trainer no longer replaces
    mesh = [[1, 4, 1], ["data", "fsdp", "tensor"]]
    assert sharded["wrapper"] == "SpmdFullyShardedDataParallel"
    assert sharded["mesh_after_init"] == mesh and sharded["mesh_used"] == mesh
    # each device holds a quarter of every parameter (every dimension FSDPv2 splits is a multiple of 4: no padding)
    assert sharded["param_bytes_per_device"] == {f"CPU:{i}": sharded["param_bytes"] // 4 for i in range(4)}
    assert sharded["embed_shape"] == [64, 32] and sharded["embed_shards"] == [[16, 32]] * 4
    assert sharded["embed_spec"] == "{devices=[4,1]0,1,2,3}"


def test_plans_with_a_data_or_tensor_axis_are_refused_for_transformers_fsdp_v2() -> None:
    pytest.importorskip("transformers")
    from tpuray.workloads.sharding.hf import xla_fsdp_v2_args

    assert xla_fsdp_v2_args(mesh_plan(8, fsdp=8)) == {
        "fsdp": "full_shard",
        "fsdp_config": {"xla": True, "xla_fsdp_v2": True},
    }
    for plan in (mesh_plan(4, fsdp=2, tensor=2), mesh_plan(4, fsdp=2), mesh_plan(4, 2, fsdp=4)):
        with pytest.raises(ValueError, match="along 'fsdp' only"):
            xla_fsdp_v2_args(plan)


def _stub(base: type[Any]) -> Any:
    """A ``base`` Trainer whose ``_prepare_for_training`` runs its own branches of the XLA FSDP path, with the wrap
    stubbed out (no torch_xla device in this process)."""
    import types

    import torch

    class _Stub(base):  # type: ignore[misc]
        is_fsdp_xla_enabled = True
        is_fsdp_enabled = False
        is_deepspeed_enabled = False
        is_distributed_loading_by_transformers = False

        def __init__(self) -> None:
            self.model = self.model_wrapped = torch.nn.Linear(2, 2)
            self.optimizer: Any = None
            self.lr_scheduler: Any = None
            self._created_lr_scheduler = False
            self.accelerator = types.SimpleNamespace(prepare=lambda x: x)
            self.callback_handler = types.SimpleNamespace()
            self.args = types.SimpleNamespace(
                lr_scheduler_type="constant", lr_scheduler_kwargs={}, get_warmup_steps=lambda n: 0
            )

        def _wrap_model(self, model: Any, training: bool = True, dataloader: Any = None) -> Any:
            return torch.nn.Sequential(model)  # as wrap_model_xla_fsdp does: not self.model

        def create_optimizer(self, model: Any = None) -> Any:
            self.optimizer = torch.optim.SGD((model or self.model).parameters(), lr=0.1)
            return self.optimizer

    return _Stub()


def test_the_stock_trainer_still_leaves_out_the_optimizer_on_the_xla_fsdp_path_and_tpurays_creates_it() -> None:
    pytest.importorskip("transformers")
    from transformers import Trainer

    from tpuray.workloads.sharding.hf import XlaFsdpV2Trainer

    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'param_groups'"):
        _stub(Trainer)._prepare_for_training(6, None, None)
    fixed = _stub(XlaFsdpV2Trainer)
    fixed._prepare_for_training(6, None, None)
    assert fixed.optimizer is not None and fixed.lr_scheduler is not None
