"""PyTorch/XLA SPMD on one host, on N virtual CPU devices: a sharded step is the unsharded step, and each device
holds the config's per-device share of the training state (spmd_sharded_step.py beside this, in a subprocess:
torch_xla reads PJRT_DEVICE and CPU_NUM_DEVICES once, when it initialises)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.workload import training_state_bytes_per_device
from tpuray.workloads.sharding.spmd import TENSOR_PARALLEL_SPECS, SpmdError, check_spmd_slice, spmd_scaling_config

SCRIPT = Path(__file__).with_name("spmd_sharded_step.py")
DIMS = GptDims(vocab_size=32, seq_len=8, d_model=16, layers=1)  # the script's GPT


def _run(devices: int, *plans: str) -> list[dict[str, object]]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices), "OMP_NUM_THREADS": "1"}
    env.pop("TPU_VISIBLE_CHIPS", None)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *plans], env=env, capture_output=True, text=True, check=False, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
@pytest.mark.parametrize(("devices", "plans"), [(4, ("4,1", "1,4")), (8, ("2,4",))])
def test_a_sharded_spmd_step_is_the_unsharded_step_and_each_device_holds_its_share(
    devices: int, plans: tuple[str, ...]
) -> None:
    results = _run(devices, *plans)
    assert len(results) == len(plans)
    for r, plan in zip(results, plans, strict=True):
        fsdp, tensor = (int(x) for x in plan.split(","))
        assert r["devices"] == devices
        assert isinstance(r["max_diff"], float) and r["max_diff"] <= 1e-6, r
        assert r["state_tensors"] == 2 * 16  # AdamW's two moments of each of the 16 parameters
        # every device holds the same bytes of weights, gradients and moments: the config's estimate
        assert r["bytes_per_device"] == [training_state_bytes_per_device(DIMS, fsdp, tensor)], r
        assert r["param_bytes_per_device"] == [training_state_bytes_per_device(DIMS, fsdp, tensor) // 4], r


def test_the_tensor_parallel_table_splits_the_megatron_matrices() -> None:
    table = dict(TENSOR_PARALLEL_SPECS)
    assert table[r"blocks\.\d+\.qkv\.weight"] == ("tensor", None)  # nn.Linear weights are [out, in]
    assert table[r"blocks\.\d+\.proj\.weight"] == (None, "tensor")
    assert table[r"blocks\.\d+\.fc\.bias"] == ("tensor",)
    assert len(table) == 6


@pytest.mark.parametrize(
    ("spec", "slices", "device"), [("v5e:4x4", 1, "CPU"), ("v5p:2x2x2", 1, None), ("v6e:2x4", 2, "CPU")]
)
def test_multi_host_spmd_off_a_tpu_is_refused_before_any_worker_starts(
    spec: str, slices: int, device: str | None
) -> None:
    with pytest.raises(SpmdError, match="only TPUs can run multi-host SPMD"):
        check_spmd_slice(TpuSlice.parse(spec), slices, pjrt_device=device or "")
    check_spmd_slice(TpuSlice.parse(spec), slices, pjrt_device="TPU")
    check_spmd_slice(TpuSlice.parse("v6e:2x4"), 1, pjrt_device="CPU")  # one host: the emulation runs it


def test_the_spmd_scaling_config_refuses_an_emulated_multi_host_slice_and_sizes_one_worker_per_host() -> None:
    with pytest.raises(SpmdError, match="only TPUs can run multi-host SPMD"):
        spmd_scaling_config("v5e:4x4", pjrt_device="CPU")
    one = spmd_scaling_config("v6e:2x4", pjrt_device="CPU")
    assert one.num_workers == 1 and one.resources_per_worker == {"TPU": 8}
    assert spmd_scaling_config("v5p:4x4x4", num_slices=2, pjrt_device="TPU").num_workers == 32
