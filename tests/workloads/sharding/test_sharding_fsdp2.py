"""TorchTPU's sharding on CPU: one process per emulated device over gloo (fsdp2_sharded_step.py beside this):
FSDP2 and tensor-parallel steps are the unsharded step, each rank holds the config's per-device share, and a
torch.distributed.checkpoint saved on 8 ranks restores on 4 and into plain torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.config.workload import training_state_bytes_per_device

SCRIPT = Path(__file__).with_name("fsdp2_sharded_step.py")
DIMS = GptDims(vocab_size=32, seq_len=8, d_model=16, layers=1)  # the script's GPT

pytestmark = pytest.mark.slow


def _run(*argv: str) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        env = {**os.environ, "FSDP2_STEP_RESULTS": str(results)}  # the script's RESULTS_ENV
        out = subprocess.run(
            [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, check=False, timeout=1800, env=env
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []


@pytest.mark.parametrize(("world", "plans"), [(4, ("4,1", "1,4")), (8, ("8,1", "2,1"))])
def test_fsdp2_and_tensor_parallel_steps_are_the_unsharded_step(world: int, plans: tuple[str, ...]) -> None:
    results = _run("step", str(world), *plans)
    assert [f"{r['fsdp']},{r['tensor']}" for r in results] == list(plans)
    for r in results:
        assert isinstance(r["max_diff"], float) and r["max_diff"] <= 1e-6, r
        assert r["state_tensors"] == 2 * 16
        fsdp, tensor = int(str(r["fsdp"])), int(str(r["tensor"]))
        assert r["bytes_per_rank"] == [training_state_bytes_per_device(DIMS, fsdp, tensor)], r


def test_a_checkpoint_saved_on_8_ranks_restores_on_4_and_in_plain_torch(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    _run("save", "8", str(tmp_path))
    (loaded,) = _run("load", "4", str(tmp_path))
    assert loaded["max_diff"] == 0.0 and loaded["parameter_types"] == ["DTensor"], loaded
    dcp_to_torch_save(tmp_path / "dcp", tmp_path / "plain.pt")
    plain, expected = torch.load(tmp_path / "plain.pt"), torch.load(tmp_path / "expected.pt")
    assert plain.keys() == expected.keys()
    assert all(torch.equal(plain[k], expected[k]) for k in expected)
