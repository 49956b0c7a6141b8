"""Checkpoints: one file per saved step in a directory, written atomically, the newest one resumed.

On GKE the directory is the GCS FUSE mount of the checkpoint bucket. Rank 0 writes (every worker holds the
same parameters); every worker reads. torch is imported lazily so the path logic is usable without it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CheckpointError", "checkpoint_path", "latest_checkpoint", "list_checkpoints", "load", "prune", "save"]

_NAME = re.compile(r"^step_(\d{8})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that exists but cannot be used (unreadable, truncated, or from a different model)."""


def checkpoint_path(directory: str | Path, step: int) -> Path:
    """The file of the checkpoint taken after ``step`` optimizer steps."""
    return Path(directory) / f"step_{step:08d}.pt"


def list_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint in ``directory``, oldest first; empty if the directory is missing."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), d / f.name) for f in d.iterdir() if (m := _NAME.match(f.name))]
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> tuple[int, Path] | None:
    """The newest checkpoint, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def prune(directory: str | Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints; returns what was deleted."""
    old = [p for _, p in list_checkpoints(directory)[:-keep]] if keep > 0 else []
    for p in old:
        p.unlink(missing_ok=True)
    return old


def _to_cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, Mapping):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def save(directory: str | Path, step: int, state: Mapping[str, Any]) -> Path:
    """Write ``state`` (tensors on any device) as the checkpoint of ``step``; atomic (temp file + rename)."""
    import torch

    path = checkpoint_path(directory, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"step": step, **_to_cpu(state)}, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | Path, expect: Mapping[str, Any]) -> dict[str, Any]:
    """Read a checkpoint to CPU; ``expect`` are entries that must match (e.g. the model shape)."""
    import torch

    try:
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises a zoo of types for a damaged file
        raise CheckpointError(
            f"checkpoint {str(path)!r} is unreadable ({type(e).__name__}: {e}); delete it to resume from the "
            "one before, or start afresh with another checkpoint directory"
        ) from None
    if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
        raise CheckpointError(f"checkpoint {str(path)!r} lacks model/optimizer/step entries")
    for key, want in expect.items():
        if state.get(key) != want:
            raise CheckpointError(
                f"checkpoint {str(path)!r} has {key}={state.get(key)!r} but this job has {key}={want!r}; "
                "use another checkpoint directory"
            )
    return state
