"""The plan directory on disk: where ``tpuray plan`` may write, and reading a ``plan.json`` back.

``tpuray plan --out DIR`` replaces its own earlier output, and nothing else: a directory it wrote carries a marker
file; a non-empty directory without it, the file system root, the project root (or one of its parents), the home
directory, a plan directory that is a symlink or holds one anywhere are refused, files are opened without following
links, and old manifests are removed file by file, never by tree. Reading a ``plan.json``
that is missing, not JSON or not a plan is one :class:`PlanFileError` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

from tpuray.components.catalog.data_file import DataFileError, read_json_file

__all__ = [
    "MARKER",
    "PlanFileError",
    "PlanOutError",
    "check_out_dir",
    "clear_manifests",
    "load_plan_file",
    "mark",
    "write_file",
]

MARKER = ".tpuray-plan"
"""Written into every plan directory; its presence is what lets a later plan replace the directory's files."""


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
        link = _first_symlink(resolved)
        if link is not None:
            raise PlanOutError(
                f"--out {out}: {link.relative_to(resolved)} is a symlink; plans never write through links "
                "(remove it, or give a new directory)"
            )
    return resolved


def _first_symlink(folder: Path) -> Path | None:
    """A symlink anywhere inside ``folder`` (links are not followed), or None."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted([*dirnames, *filenames]):
            if os.path.islink(os.path.join(dirpath, name)):
                return Path(dirpath, name)
    return None


def write_file(path: Path, text: str) -> None:
    """Write a plan file, never through a symlink: should one appear after check_out_dir, the open fails (ELOOP)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def mark(out: Path) -> None:
    write_file(out / MARKER, "written by tpuray plan; a later plan replaces this directory's plan files\n")


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
        doc = read_json_file(p, what="plan")  # bounded: size, depth, a regular file, no duplicate keys
    except DataFileError as e:
        raise PlanFileError(f"{e} (a plan directory holds the plan.json tpuray plan writes)") from None
    problem = plan_shape_problem(doc)
    if problem:
        raise PlanFileError(f"{p}: not a tpuray plan ({problem})")
    return cast(dict[str, Any], doc)


def plan_shape_problem(doc: Any) -> str | None:
    """What makes ``doc`` not the shape ``tpuray plan`` writes (the fields ``tpuray diff`` reads), or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        return "no resources list"
    if not isinstance(doc.get("stack", ""), str):
        return "stack is not a string"
    for i, r in enumerate(doc["resources"]):
        if not isinstance(r, dict):
            return f"resources[{i}] is not an object"
        for key in ("urn", "type", "name"):
            if not isinstance(r.get(key), str):
                return f"resources[{i}].{key} is not a string"
        for key in ("inputs", "options"):
            if not isinstance(r.get(key, {}), dict):
                return f"resources[{i}].{key} is not an object"
        replace_on = r.get("options", {}).get("replaceOnChanges") or []
        if not isinstance(replace_on, list) or not all(isinstance(k, str) for k in replace_on):
            return f"resources[{i}].options.replaceOnChanges is not a list of strings"
    violations = doc.get("violations", [])
    if not isinstance(violations, list):
        return "violations is not a list"
    for i, v in enumerate(violations):
        if not isinstance(v, dict) or not all(isinstance(v.get(k), str) for k in ("rule", "urn", "message")):
            return f"violations[{i}] lacks a rule, urn or message string"
    return None
