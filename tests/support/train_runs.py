"""What a Ray Train run on the emulated cluster has written to its run directory, read by the tests that wait on it."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["registered_steps"]


def registered_steps(run_dir: Path) -> list[int]:
    """The steps of the checkpoints Ray Train has registered (what a restart resumes from)."""
    try:
        snapshot = json.loads((run_dir / "checkpoint_manager_snapshot.json").read_text())
    except (OSError, ValueError):
        return []
    return [int(r["metrics"]["step"]) for r in snapshot["checkpoint_results"]]
