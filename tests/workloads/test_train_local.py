"""The entrypoint end to end on the local emulation: learning, identical weights, fault recovery, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def train(*args: str, cwd: Path, timeout: float = 280) -> tuple[int, dict[str, Any] | None, str]:
    """Run ``python -m tpuray.workloads.train`` in a fresh process; returns (exit code, summary, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run(
        [sys.executable, "-m", "tpuray.workloads.train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else None), proc.stderr


@pytest.mark.timeout(300)
def test_local_run_learns_and_keeps_workers_identical(stack_file: Path, tmp_path: Path) -> None:
    code, s, err = train(
        "--local",
        "--stack-file",
        str(stack_file),
        "--steps",
        "40",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        cwd=tmp_path,
    )
    assert code == 0, err[-3000:]
    assert s is not None
    assert (s["chips"], s["final_step"], s["restarts"]) == (4, 40, 0)
    assert s["loss_final"] < 0.6 * s["loss_first"]
    # all four workers hold the same weights: the gradient all-reduce really happened
    assert s["params_identical"] and len(s["param_digests"]) == 1
    assert s["tokens_per_s"] > 0 and s["mfu"] > 0 and s["time_to_first_step_s"] > 0
    assert "step 40/40" in err  # the driver's progress display
    assert sorted(p.name for p in (tmp_path / "ck").iterdir())[-1] == "step_00000040.pt"


@pytest.mark.timeout(400)
def test_worker_death_resumes_from_the_last_checkpoint(stack_file: Path, tmp_path: Path) -> None:
    code, s, err = train(
        "--local",
        "--stack-file",
        str(stack_file),
        "--steps",
        "30",
        "--checkpoint-every",
        "10",
        "--log-every",
        "5",
        "--fail-at-step",
        "15",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        cwd=tmp_path,
        timeout=380,
    )
    assert code == 0, err[-3000:]
    assert s is not None
    assert s["restarts"] == 1 and s["final_step"] == 30
    first, second = s["attempts"]
    assert first["end_step"] == 15 and second["start_step"] == 10
    assert s["resumed_from"] and s["resumed_from"][0].endswith("step_00000010.pt")
    # the loss curve continues from the checkpoint: step 11 again gives (nearly) the loss it gave before
    assert second["losses"][0] == pytest.approx(first["losses"][10], rel=0.02)
    assert second["losses"][0] < 0.9 * first["losses"][0]  # not a restart from scratch
    assert s["params_identical"]
    assert "restarting the group from the last checkpoint" in err


@pytest.mark.timeout(200)
def test_restarted_job_continues_where_it_stopped(stack_file: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    # A job that has already finished leaves nothing to do; a longer one carries on from its checkpoint.
    code, s, err = train(
        "--local",
        "--stack-file",
        str(stack_file),
        "--steps",
        "10",
        "--checkpoint-every",
        "5",
        "--checkpoint-dir",
        str(ck),
        cwd=tmp_path,
    )
    assert code == 0, err[-3000:]
    code, s2, err = train(
        "--local", "--stack-file", str(stack_file), "--steps", "15", "--checkpoint-dir", str(ck), cwd=tmp_path
    )
    assert code == 0, err[-3000:]
    assert s is not None and s2 is not None
    assert s2["attempts"][0]["start_step"] == 10 and s2["final_step"] == 15
    assert s2["losses"][0] < s["losses"][0]


@pytest.mark.timeout(60)
def test_missing_dataset_is_a_clear_error(stack_file: Path, tmp_path: Path) -> None:
    code, s, err = train(
        "--local", "--stack-file", str(stack_file), "--dataset", str(tmp_path / "nope.bin"), cwd=tmp_path
    )
    assert code == 2 and s is None
    assert "nope.bin" in err and "does not exist" in err


@pytest.mark.timeout(120)
def test_more_chips_than_the_stack_has_is_refused(stack_file: Path, tmp_path: Path) -> None:
    code, s, err = train("--local", "--stack-file", str(stack_file), "--chips", "8", cwd=tmp_path)
    assert code == 2 and s is None
    assert "needs 2" in err and "has 1" in err


@pytest.mark.timeout(180)
def test_corrupt_checkpoint_is_a_clear_error(stack_file: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "step_00000020.pt").write_bytes(b"\x00garbage")
    code, s, err = train("--local", "--stack-file", str(stack_file), "--checkpoint-dir", str(ck), cwd=tmp_path)
    assert code == 2 and s is None
    assert "step_00000020.pt" in err and "unreadable" in err


@pytest.mark.timeout(60)
def test_unknown_topology_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = train("--local", "--topology", "v5e:3x3", cwd=tmp_path)
    assert code == 2 and "3x3" in err and "nearest valid shapes" in err
