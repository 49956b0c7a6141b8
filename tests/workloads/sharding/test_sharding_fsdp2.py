"""TorchTPU's sharding on CPU: one process per emulated device over gloo (fsdp2_sharded_step.py beside this):
FSDP2, tensor-parallel and 2-D steps are the unsharded step, each rank holds the config's per-device share, and a
torch.distributed.checkpoint saved on 8 ranks restores on 4 and into plain torch."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from tests.support.gloo_ranks import run_script
from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.config.workload import training_state_bytes_per_device

SCRIPT = Path(__file__).with_name("fsdp2_sharded_step.py")
DIMS = GptDims(vocab_size=32, seq_len=8, d_model=16, layers=1)  # the script's GPT

pytestmark = pytest.mark.slow


def _run(*argv: str) -> list[dict[str, object]]:
    return run_script(SCRIPT, *argv, timeout_s=1800)


PLANS = {8: ("8,1", "2,1", "4,2"), 4: ("4,1", "1,4", "2,2")}
"""Per world: FSDP over all ranks, a plan with a data axis (8) or tensor parallelism over all (4), and a 2-D plan
(FSDP2 over DTensor tensor parallelism)."""


class Runs(NamedTuple):
    results: dict[int, list[dict[str, object]]]
    """Per world, rank 0's JSON line per op."""
    checkpoint: Path
    """Where the 8 ranks saved and the 4 loaded."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """8 processes: each plan's step, then a checkpoint of FSDP over all 8; then 4: each plan's step, then that
    checkpoint loaded as FSDP over 4. One set of processes per world: each process costs seconds to start."""
    where = tmp_path_factory.mktemp("fsdp2")
    eight = _run("8", *(f"step:{p}" for p in PLANS[8]), f"save:{where}")
    return Runs({8: eight, 4: _run("4", *(f"step:{p}" for p in PLANS[4]), f"load:{where}")}, where)


@pytest.mark.parametrize("world", sorted(PLANS))
def test_fsdp2_tensor_parallel_and_2d_steps_are_the_unsharded_step(runs: Runs, world: int) -> None:
    results = [r for r in runs.results[world] if "fsdp" in r]
    assert [f"{r['fsdp']},{r['tensor']}" for r in results] == list(PLANS[world])
    for r in results:
        assert isinstance(r["max_diff"], float) and r["max_diff"] <= 1e-6, r
        assert r["state_tensors"] == 2 * 16
        fsdp, tensor = int(str(r["fsdp"])), int(str(r["tensor"]))
        assert r["bytes_per_rank"] == [training_state_bytes_per_device(DIMS, fsdp, tensor)], r


def test_a_checkpoint_saved_on_8_ranks_restores_on_4_and_in_plain_torch(
    runs: Runs,
) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    [loaded] = [r for r in runs.results[4] if "fsdp" not in r]
    assert loaded["max_diff"] == 0.0 and loaded["parameter_types"] == ["DTensor"], loaded
    where = runs.checkpoint
    dcp_to_torch_save(where / "dcp", where / "plain.pt")
    plain, expected = torch.load(where / "plain.pt"), torch.load(where / "expected.pt")
    assert plain.keys() == expected.keys()
    assert all(torch.equal(plain[k], expected[k]) for k in expected)
