"""Where the schema tests find the pinned KubeRay, Kueue and GMP CRDs, fetching them once when nothing holds them.

A folder (``kuberay-crds``, ``kueue-crds``, ``gmp-crds``) is read from the first place that holds each of its pinned
files with its pinned SHA-256:

1. ``$TPURAY_SHARED_DIR/<folder>``, or ``<repo>/../shared/<folder>`` when that is unset (where CI and
   ``python tools/fetch_crds.py`` put them);
2. the cache, ``$XDG_CACHE_HOME/tpuray/crds/<versions>/<folder>`` (``~/.cache`` without it): outside the checkout,
   one directory per pin set;
3. the cache after :func:`fetch_crds.fetch` filled it with the folder's files: the tool's own fetch-and-verify, once
   per session and folder. Workers take a file lock, so one fetches while the other waits, and a failed fetch leaves
   a note for the other worker of the same run (xdist's run id), which then skips without trying again.

No network skips the test, its reason one line naming the folder's own source, the tool and ``TPURAY_SHARED_DIR``
(a folder is fetched alone, so a Kueue test never skips naming KubeRay's URL); under ``CI=true`` it
fails instead. A checksum mismatch, fetched or in the shared folder, fails the test: it is never read and never
skipped over.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT

HOW = "run `python tools/fetch_crds.py` or set TPURAY_SHARED_DIR"
FETCH_TIMEOUT = 30.0  # seconds per file: no network fails at once; a stalled proxy must not hold the suite long


# tools/ is no package: its script imports by name once its folder is on the path (it loads pins.py by path itself)
sys.path.insert(0, str(ROOT / "tools"))
fetch_crds = importlib.import_module("fetch_crds")


def shared_dir() -> Path:
    base = os.environ.get("TPURAY_SHARED_DIR")
    return Path(base) if base else ROOT.parent / "shared"


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tpuray" / "crds" / str(fetch_crds.VERSIONS)


def pinned(folder: str) -> list[str]:
    """The pinned file names of ``folder``."""
    return sorted(fetch_crds.FILES[folder][1])


def _wrong(root: Path, folder: str) -> tuple[list[str], list[str]]:
    """The pinned files of ``root/folder`` that are absent, and those present with another checksum."""
    absent, changed = [], []
    for name, sha in fetch_crds.FILES[folder][1].items():
        path = root / folder / name
        if not path.is_file():
            absent.append(name)
        elif fetch_crds.sha256_of(path) != sha:
            changed.append(name)
    return absent, changed


@dataclass(frozen=True)
class Found:
    """A folder's CRDs (``path``), or why there are none: ``skip`` (not to be had here) or ``error`` (refused)."""

    path: Path | None = None
    skip: str | None = None
    error: str | None = None


def _fetch_into_cache(folder: str) -> str | None:
    """Fill the cache with ``folder``'s files; None when it holds them all, else the one-line reason it does not (the
    URL of that folder that could not be reached). Raises :class:`fetch_crds.ChecksumMismatch`."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in each xdist worker, the same for one run
    note = cache / f".unreachable-{folder}-{run}" if run else None
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits here, then finds the files or the note
        if note is not None and note.is_file():
            return note.read_text()
        try:
            fetch_crds.fetch(cache, timeout=FETCH_TIMEOUT, folders=[folder])
        except fetch_crds.Unreachable as e:
            reason = " ".join(str(e).split())
            if note is not None:
                note.write_text(reason)
            return reason
    return None


@functools.cache
def find(folder: str) -> Found:
    """Where ``folder``'s pinned CRDs are, decided once per process (see the module's docstring)."""
    shared = shared_dir()
    absent, changed = _wrong(shared, folder)
    if changed:
        return Found(error=f"{shared / folder}: {', '.join(changed)} differ from the pinned sha256; {HOW}")
    if not absent:
        return Found(path=shared / folder)
    if _wrong(cache_dir(), folder) == ([], []):
        return Found(path=cache_dir() / folder)
    try:
        unreachable = _fetch_into_cache(folder)
    except fetch_crds.ChecksumMismatch as e:
        return Found(error=f"pinned CRD refused: {e}")
    if unreachable is None:
        return Found(path=cache_dir() / folder)
    return Found(skip=f"pinned CRDs not in {shared / folder} nor fetchable ({unreachable}): {HOW}")


def crd_folder(folder: str) -> Path:
    """``folder``'s pinned CRDs; else fail (a checksum mismatch, or anything missing under ``CI=true``) or skip."""
    found = find(folder)
    if found.path is not None:
        return found.path
    if found.error is not None:
        pytest.fail(found.error)
    assert found.skip is not None
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(found.skip)
    pytest.skip(found.skip)
