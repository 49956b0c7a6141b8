"""The plan directory on disk: where ``tpuray plan`` may write, and reading a ``plan.json`` back.

``tpuray plan --out DIR`` replaces its own earlier output, and nothing else: a directory it wrote carries a marker
file; a non-empty directory without it, the file system root, the project root (or one of its parents), the home
directory, a plan directory that is a symlink and plan files that are symlinks are refused, and old manifests are
removed file by file, never by tree. Reading a ``plan.json``
that is missing, not JSON or not a plan is one :class:`PlanFileError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "MARKER",
    "PlanFileError",
    "PlanOutError",
    "check_out_dir",
    "clear_manifests",
    "load_plan_file",
    "mark",
]

MARKER = ".tpuray-plan"
"""Written into every plan directory; its presence is what lets a later plan replace the directory's files."""
_OWN_FILES = ("plan.json", "topology.md", "topology.svg", "cost.json", "cost.md", "manifests", MARKER)


class PlanOutError(ValueError):
    """``--out`` names a place tpuray plan must not write to."""


class PlanFileError(ValueError):
    """A ``plan.json`` (or plan directory) that cannot be read as a plan."""


def check_out_dir(out: Path, root: Path) -> Path:
    """``out`` made absolute if tpuray plan may write there; else :class:`PlanOutError` saying why."""
    absolute = Path.cwd() / out if not out.is_absolute() else out
    # The folders above are the user's path (they may be links, e.g. /tmp on macOS); the plan directory itself and
    # the files a plan writes there must not be, or a plan would write (and delete) wherever the link points.
    if absolute.is_symlink():
        raise PlanOutError(f"--out {out} is a symlink; give a real directory (plans never follow links)")
    resolved = absolute.resolve()
    if resolved == Path(resolved.anchor):
        raise PlanOutError(f"--out {out}: refusing to write a plan into the file system root")
    project = root.resolve()
    if resolved == project or resolved in project.parents:
        raise PlanOutError(f"--out {out}: refusing to write into the project root or a folder above it; use out/...")
    if resolved == Path.home().resolve():
        raise PlanOutError(f"--out {out}: refusing to write into the home directory; use a folder of its own")
    if resolved.exists() and not resolved.is_dir():
        raise PlanOutError(f"--out {out} is a file, not a directory")
    if resolved.is_dir() and any(resolved.iterdir()) and not (resolved / MARKER).is_file():
        raise PlanOutError(
            f"--out {out} is a non-empty directory that tpuray plan did not write (no {MARKER}); "
            "give an empty or new directory"
        )
    if resolved.is_dir():
        for name in _OWN_FILES:
            if (resolved / name).is_symlink():
                raise PlanOutError(f"--out {out}: {name} is a symlink; plans never write through links")
    return resolved


def mark(out: Path) -> None:
    (out / MARKER).write_text("written by tpuray plan; a later plan replaces this directory's plan files\n")


def clear_manifests(manifests: Path) -> None:
    """Remove the ``*.yaml`` files an earlier plan wrote; anything else there stays, and so does the folder."""
    if manifests.is_dir():
        for f in manifests.glob("*.yaml"):
            if f.is_file() and not f.is_symlink():
                f.unlink()


def load_plan_file(path: Path) -> dict[str, Any]:
    """A written ``plan.json`` (a file, or a plan directory holding one)."""
    p = path / "plan.json" if path.is_dir() else path
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanFileError(f"{p}: no such file (a plan directory holds plan.json)") from None
    except OSError as e:
        raise PlanFileError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PlanFileError(f"{p}: not UTF-8 text, so not a plan.json") from None
    except json.JSONDecodeError as e:
        raise PlanFileError(f"{p}: not JSON ({e.msg} at line {e.lineno}), so not a plan.json") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        raise PlanFileError(f"{p}: not a tpuray plan (no resources list)")
    if not all(isinstance(r, dict) and isinstance(r.get("urn"), str) for r in doc["resources"]):
        raise PlanFileError(f"{p}: not a tpuray plan (a resource without a urn)")
    return doc
