"""The plan directory on disk: where ``tpuray plan`` may write, what it may replace there, and reading a
``plan.json`` back.

``tpuray plan --out DIR`` replaces its own earlier output, and nothing else. The directory's marker file
(:data:`MARKER`) lists every file tpuray plan wrote there with its SHA-256; a later plan replaces or removes a file
only when the marker lists it and its bytes are still the listed ones. A listed file that changed since, or a file
the marker does not list where the new plan writes one, stops the plan before it writes anything (keeping the file
while writing a new plan beside it would leave a directory mixing the user's edits with generated files, which
``kubectl apply -f manifests/`` would apply alike); any other file it did not write is kept, and the command names
it. A marker that is not one tpuray plan writes is an error, never a reason to remove anything.

Every file is written as a new file beside its place and renamed over it (``os.replace``), never by opening an
existing path for writing: a hard-linked copy of an earlier plan (``cp -al``) keeps its bytes, and a link that
appears where a plan file goes is replaced, not followed. The marker is rewritten before the files, listing both
the files an earlier plan left and the new ones as pending, so a plan stopped half way still knows every file it
wrote. A non-empty directory without a marker, the file system root, the project root (or one of its parents), the
home directory, and a plan directory that is a symlink or holds one anywhere are refused.

Reading a ``plan.json`` that is missing, not JSON or not a plan is one :class:`PlanFileError` naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

from tpuray.components.catalog.data_file import DataFileError, read_bytes, read_json_file
from tpuray.components.catalog.safe_text import one_line

__all__ = [
    "MARKER",
    "MARKER_FORMAT",
    "Marker",
    "PlanFileError",
    "PlanOutError",
    "check_out_dir",
    "load_plan_file",
    "read_marker",
    "write_new_file",
    "write_plan_files",
]

MARKER = ".tpuray-plan"
"""Written into every plan directory: the files tpuray plan wrote there, each with its SHA-256."""
MARKER_FORMAT = "tpuray-plan-marker/1"
"""The marker's own format (``plan.json`` has its own, ``render.FORMAT``)."""
_LEGACY_MARKER = "written by tpuray plan"
"""How the marker of earlier versions began: it listed no files, so it cannot tell the plan's files from others."""
_MARKER_MAX_BYTES = 4 * 2**20
_MAX_FILES = 10_000
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TMP_SUFFIX = ".tpuray-tmp"


class PlanOutError(ValueError):
    """``--out`` names a place tpuray plan must not write to, or files there it must not replace."""


class PlanFileError(ValueError):
    """A ``plan.json`` (or plan directory) that cannot be read as a plan."""


@dataclass(frozen=True)
class Marker:
    """What a plan directory's marker lists: ``{relative path: SHA-256}`` of the files tpuray plan wrote, and of
    those it was writing when it stopped (``pending``: empty once a plan finished)."""

    files: Mapping[str, str]
    pending: Mapping[str, str]

    def hashes(self, rel: str) -> set[str]:
        """The contents (SHA-256) the file at ``rel`` may have and still be tpuray plan's own."""
        return {h for h in (self.files.get(rel), self.pending.get(rel)) if h is not None}

    @property
    def listed(self) -> list[str]:
        return sorted(set(self.files) | set(self.pending))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rel_problem(rel: object) -> str | None:
    """Why ``rel`` is not a path a plan writes inside its directory (relative, plain, normalized), or None."""
    if not isinstance(rel, str) or not rel:
        return "is not a non-empty string"
    parts = rel.split("/")
    if PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts):
        return "is not a relative path inside the plan directory (no leading /, no . or .. parts)"
    if "\\" in rel or any(ord(c) < 32 for c in rel):
        return "holds a backslash or a control character"
    if rel == MARKER:
        return "is the marker itself"
    return None


def _marker_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT:
        return f"format is not {MARKER_FORMAT!r}"
    for key in ("files", "pending"):
        listed = doc.get(key, {})
        if not isinstance(listed, dict):
            return f"{key} is not an object of relative path to SHA-256"
        if len(listed) > _MAX_FILES:
            return f"{key} lists more than {_MAX_FILES:,} files"
        for rel, digest in listed.items():
            problem = _rel_problem(rel)
            if problem:
                return f"{key}[{one_line(repr(rel))[:80]}] {problem}"
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                return f"{key}[{one_line(repr(rel))[:80]}] is not a SHA-256 (64 lowercase hex digits)"
    return None


def read_marker(out: Path) -> Marker | None:
    """The marker of the plan directory ``out`` (None when it has none); :class:`PlanOutError` for a marker that
    is not one tpuray plan writes, naming what is wrong: such a marker never lets a plan remove anything."""
    path = out / MARKER
    if not os.path.lexists(path):
        return None
    fix = f"move the files you want to keep out of {out}, delete it, and plan again"
    try:
        head = read_bytes(path, what="plan marker", max_bytes=_MARKER_MAX_BYTES)[: len(_LEGACY_MARKER)]
        if head == _LEGACY_MARKER.encode():
            raise PlanOutError(
                f"{path} is the marker of an earlier tpuray version, which lists no files: tpuray plan cannot tell "
                f"the files it wrote there from yours, so it replaces none; {fix}"
            )
        doc = read_json_file(path, what="plan marker", max_bytes=_MARKER_MAX_BYTES, max_depth=3)
    except DataFileError as e:
        raise PlanOutError(f"{e}; a plan directory's {MARKER} is the JSON tpuray plan writes; {fix}") from None
    problem = _marker_problem(doc)
    if problem:
        raise PlanOutError(f"plan marker {path}: {problem} ({MARKER} is the JSON tpuray plan writes); {fix}")
    return Marker(dict(doc.get("files", {})), dict(doc.get("pending", {})))


def _marker_text(files: Mapping[str, str], pending: Mapping[str, str] | None = None) -> str:
    doc: dict[str, Any] = {
        "format": MARKER_FORMAT,
        "note": "written by tpuray plan: the files it wrote here, with their SHA-256; a later plan replaces or "
        "removes only these, and only while unchanged",
        "files": dict(sorted(files.items())),
    }
    if pending:
        doc["pending"] = dict(sorted(pending.items()))
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _current_hash(path: Path) -> str | None:
    """The SHA-256 of the regular file at ``path`` (links not followed); None when nothing is there; ``""`` for a
    directory, a link or anything else, which no listed hash matches."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return ""  # a link (ELOOP) or something unreadable: not the file tpuray plan wrote
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return ""
        return _sha256(f.read())


def _own_files(out: Path, marker: Marker | None) -> dict[str, str]:
    """``{path: SHA-256}`` of the files present that the marker lists unchanged; :class:`PlanOutError` naming a
    listed file whose bytes are not the listed ones."""
    own: dict[str, str] = {}
    if marker is None:
        return own
    for rel in marker.listed:
        digest = _current_hash(out / rel)
        if digest is None:
            continue  # gone since: nothing to replace or remove
        if digest not in marker.hashes(rel):
            raise PlanOutError(
                f"--out {out}: {rel} changed since tpuray plan wrote it (its SHA-256 is not the one {MARKER} "
                "lists); tpuray plan replaces or removes only its own files as it wrote them: move it out of the "
                "plan directory (or delete it), then plan again"
            )
        own[rel] = digest
    return own


def check_out_dir(out: Path, root: Path) -> Path:
    """``out`` made absolute if tpuray plan may write there; else :class:`PlanOutError` saying why.

    Also reads the marker of an earlier plan there and checks the files it lists are unchanged, so a plan that
    must stop does so before the (slow) render."""
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
    if resolved.is_dir() and any(resolved.iterdir()) and not os.path.lexists(resolved / MARKER):
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
        _own_files(resolved, read_marker(resolved))
    return resolved


def _first_symlink(folder: Path) -> Path | None:
    """A symlink anywhere inside ``folder`` (links are not followed), or None."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted([*dirnames, *filenames]):
            if os.path.islink(os.path.join(dirpath, name)):
                return Path(dirpath, name)
    return None


def write_new_file(path: Path, text: str) -> None:
    """Write ``text`` as a new file beside ``path`` and rename it over ``path``: whatever was at ``path`` (a file
    hard-linked elsewhere, a link) is replaced, never opened for writing, so no other name of it changes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)  # O_EXCL: a new file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes it 0600; plan files are read by review tools and people
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_plan_files(out: Path, files: Mapping[str, str]) -> list[str]:
    """Write ``files`` (``{path relative to out: text}``) as the plan in ``out``, an empty or new directory or one
    an earlier plan wrote (:func:`check_out_dir` first); remove the files the earlier plan listed that this one
    does not write, when unchanged. Returns the files in ``out`` tpuray plan did not write, all kept.

    :class:`PlanOutError`, before anything is written, for a file this plan would replace or remove that tpuray
    plan did not write (or that changed since)."""
    bad = next(((rel, p) for rel in files if (p := _rel_problem(rel))), None)
    if bad is not None:
        raise PlanOutError(f"plan file {one_line(repr(bad[0]))} {bad[1]}")  # a bug of ours, not the user's input
    out.mkdir(parents=True, exist_ok=True)
    marker = read_marker(out)
    if marker is None and any(out.iterdir()):
        raise PlanOutError(f"--out {out} is a non-empty directory that tpuray plan did not write (no {MARKER})")
    own = _own_files(out, marker)
    for rel in files:
        folder = next((f for f in PurePosixPath(rel).parents if f.parts and not (out / f).is_dir()), None)
        if folder is not None and os.path.lexists(out / folder):
            raise PlanOutError(
                f"--out {out}: {folder} is a file, and this plan writes {rel} in a folder of that name: move it out "
                "of the plan directory, then plan again"
            )
        if os.path.lexists(out / rel) and rel not in own:
            raise PlanOutError(
                f"--out {out}: {rel} is not a file tpuray plan wrote ({MARKER} does not list it), and this plan "
                "writes one there: move it out of the plan directory, then plan again"
            )
    new = {rel: _sha256(text.encode("utf-8")) for rel, text in files.items()}
    # the marker first, listing what is there and what is about to be: a plan stopped half way still knows its files
    write_new_file(out / MARKER, _marker_text(own, new))
    for rel, text in sorted(files.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        write_new_file(out / rel, text)
    for rel in sorted(set(own) - set(files)):
        if _current_hash(out / rel) == own[rel]:  # checked again right before: still the file tpuray plan wrote
            (out / rel).unlink()
    write_new_file(out / MARKER, _marker_text(new))
    return _others(out, new)


def _others(out: Path, written: Mapping[str, str]) -> list[str]:
    """The files in ``out`` that are neither the marker nor listed in it (links are not followed)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(out, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(out).as_posix()
            if rel != MARKER and rel not in written:
                found.append(rel)
    return sorted(found)


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


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list holding a non-string"
    kinds = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    return kinds.get(type(value), "an object")


def plan_shape_problem(doc: Any) -> str | None:
    """What makes ``doc`` not the shape ``tpuray plan`` writes (the fields ``tpuray diff`` reads), or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        return "no resources list"
    if not isinstance(doc.get("stack", ""), str):
        return "stack is not a string"
    if not isinstance(doc.get("config", {}), dict):
        return f"config is not an object (it is {_json_kind(doc['config'])})"
    for i, r in enumerate(doc["resources"]):
        if not isinstance(r, dict):
            return f"resources[{i}] is not an object"
        for key in ("urn", "type", "name"):
            if not isinstance(r.get(key), str):
                return f"resources[{i}].{key} is not a string"
        for key in ("inputs", "options"):
            if not isinstance(r.get(key, {}), dict):
                return f"resources[{i}].{key} is not an object"
        for key in ("replaceOnChanges", "aliasURNs"):
            values = r.get("options", {}).get(key, [])  # tpuray plan leaves a key out where there is none: no null
            if not isinstance(values, list) or not all(isinstance(k, str) for k in values):
                return f"resources[{i}].options.{key} is not a list of strings (it is {_json_kind(values)})"
    violations = doc.get("violations", [])
    if not isinstance(violations, list):
        return "violations is not a list"
    for i, v in enumerate(violations):
        if not isinstance(v, dict) or not all(isinstance(v.get(k), str) for k in ("rule", "urn", "message")):
            return f"violations[{i}] lacks a rule, urn or message string"
    return None
