"""SPMD's sharded checkpoints (tpuray.workloads.sharding.checkpoint), on 4 virtual CPU devices in a subprocess
(spmd_checkpoint.py beside this: torch_xla reads PJRT_DEVICE and CPU_NUM_DEVICES once, when it initialises), and
how an SPMD worker gets one device per chip (spmd_devices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.config.workload import training_state_bytes_per_device
from tpuray.workloads.sharding.checkpoint import STEP_FILE
from tpuray.workloads.sharding.spmd import SpmdError, spmd_devices

SCRIPT = Path(__file__).with_name("spmd_checkpoint.py")
DIMS = GptDims(vocab_size=32, seq_len=8, d_model=16, layers=1)  # the script's GPT


@pytest.mark.slow
def test_a_checkpoint_saved_fsdp_2_x_tensor_2_restores_exactly_into_fsdp_4_and_stays_sharded(tmp_path: Path) -> None:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "OMP_NUM_THREADS": "1"}
    env.pop("TPU_VISIBLE_CHIPS", None)
    where = tmp_path / "ckpt"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(where)], env=env, capture_output=True, text=True, check=False, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [r] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert r["step"] == 2 and json.loads((where / STEP_FILE).read_text()) == {"step": 2}
    assert r["tensors"] == 3 * 16  # the 16 parameters and AdamW's two moments of each
    assert r["max_diff"] == 0.0, r  # the other seed's model and the primed optimizer were overwritten
    assert r["adam_steps"] == [2.0]  # AdamW's step count too, not the priming step's
    assert r["grads"] == 0  # the priming's zeroed gradients were dropped (they would stay whole on every device)
    # restored into fsdp=4: each device holds its share of that mesh, not of the saving one's
    share = training_state_bytes_per_device(DIMS, 4, 1)
    assert r["param_bytes_per_device"] == [share // 4], r
    assert r["moment_bytes_per_device"] == [share // 2], r
    # why save_sharded has its own planner: torch_xla 2.9's drops every tensor replicated on part of the mesh
    # (12 of the 16: only the 4 weight matrices are split on both axes); when this fails, upstream has fixed it
    assert r["plain_planner_tensors"] == 4, r
    assert sorted(p.name for p in where.iterdir()) == [".metadata", "__0_0.distcp", STEP_FILE]


def test_an_emulated_spmd_worker_gets_one_cpu_device_per_chip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    assert spmd_devices(4) == 4 and os.environ["CPU_NUM_DEVICES"] == "4"
    with pytest.raises(SpmdError, match="CPU_NUM_DEVICES=4 is set, but this worker holds 8 chips"):
        spmd_devices(8)
    with pytest.raises(SpmdError, match="holds no TPU chips"):
        spmd_devices(0)
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.delenv("CPU_NUM_DEVICES")
    assert spmd_devices(8) == 8 and "CPU_NUM_DEVICES" not in os.environ  # the TPU runtime finds the chips
