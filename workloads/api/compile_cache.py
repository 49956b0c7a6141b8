"""The persistent compile cache on each worker: one directory per key, one writer, and what a run found there.

The key (:class:`~tpuray.components.catalog.compile_cache_key.CompileCacheKey`) is the backend, the runtime version read
here from the installed packages, the worker image (``TPURAY_WORKER_IMAGE``, set by the stack) and the slice
shape; the root is ``TPURAY_COMPILE_CACHE_DIR`` (the stack mounts the bucket there) or what the caller passes.

- PyTorch/XLA: ``torch_xla.runtime.initialize_cache(path, readonly=...)`` before the runtime computes anything
  (torch_xla 2.9 ``torch_xla/runtime.py`` asserts it: it only sets ``XLA_PERSISTENT_CACHE_PATH`` and
  ``XLA_PERSISTENT_CACHE_READ_ONLY``, which the runtime reads when it creates its computation cache). Rank 0
  writes; the other ranks read only. That is tpuray's choice, not torch_xla's advice: ``initialize_cache`` only says
  of ``readonly`` "Whether or not this worker should have write access to the cache", and torch_xla's own
  multiprocess test gives each process a directory of its own instead ("to avoid a race condition where one process
  loads the compilation result of another", ``test/test_persistent_cache.py``). One writer, because the key
  directory is one bucket every host mounts through Cloud Storage FUSE, which has no concurrency control across
  mounts: "when different mounts try to write to the same object, the flush from first mount wins", and "it is
  strongly recommended that multiple sources do not modify the same object" (GoogleCloudPlatform/gcsfuse
  ``docs/semantics.md``, "Concurrency").
  :class:`~tpuray.workloads.XlaChipConfig`'s backend calls :func:`enable_xla` on every worker before the
  process group starts, so the GPT trainer and any portable train function use it unchanged.
- TorchTPU: ``TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT``, pointed at ``gs://`` (``TPURAY_COMPILE_CACHE_URL``)
  under the same key. No Python source of the torch_tpu 0.2.0 wheel names it; its C++ glue does
  (``torch_tpu/csrc/common/glue_2_12_0/libpywrap_2_12_0_common.so`` and its siblings, built from
  ``csrc/common/tier3_compilation_cache.cc``): the root is read once per process (``GetEnvOnce`` of
  ``kTorchTpuTier3CompilationCacheRootEnvVar``) on the first compile through the compilation cache
  (``CompilationCache::GetFromTier3OrCompile``), and the directory is created through tsl's file systems, which
  the wheel links with GCS (``tsl::GcsFileSystem`` in ``libxla_base.so``). So it must be set before the process
  compiles anything: :class:`~tpuray.workloads.torch_tpu.TorchTpuEnvCallback` sets it on every worker before
  Ray's backend starts the process group. The wheel's tier 2 (``TORCH_TPU_TIER2_COMPILATION_CACHE``) is a
  separate, local tier that tpuray leaves alone.

:func:`cache_report` counts the key directory's files now against when the run enabled it, and PyTorch/XLA's own
persistent-cache counters: on the emulated slice (PJRT CPU) a second run finds the files but cannot reload them
(``PersistentCacheDeserializeFailure``: the CPU client does not deserialize executables); on TPUs the same
files count as ``PersistentCacheHit``.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuray.components.catalog.compile_cache_key import CACHE_DIR_ENV, CACHE_URL_ENV, WORKER_IMAGE_ENV, CompileCacheKey
from tpuray.components.catalog.topology import TpuSlice

__all__ = ["TORCH_TPU_CACHE_ENV", "CacheUse", "cache_report", "current", "enable_torch_tpu", "enable_xla"]

TORCH_TPU_CACHE_ENV = "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"
_XLA_COUNTERS = {
    "hits": "PersistentCacheHit",
    "misses": "PersistentCacheMiss",
    "reload_failures": "PersistentCacheDeserializeFailure",
}


@dataclass(frozen=True)
class CacheUse:
    """The cache one worker of this run uses."""

    key: str
    """The key's relative directory, e.g. ``xla-torch_xla-2.9.0/v5p-16-2x2x2-x1/local``."""
    directory: str
    writer: bool
    """The one worker that writes (rank 0); the others read only."""
    files_before: int
    """Files under the key directory when this worker enabled it: 0 on the key's first run (cold)."""


_current: CacheUse | None = None


def current() -> CacheUse | None:
    """The cache this process enabled, if any."""
    return _current


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def runtime_version(backend: str) -> str:
    """``torch_xla-2.9.0+libtpu-0.0.21``: the runtime package and the libtpu it runs on, as installed here."""
    parts = ["torch_xla" if backend == "xla" else "torch_tpu", "libtpu"]
    found = [f"{p}-{v}" for p in parts if (v := _version(p)) is not None]
    if not found or _version(parts[0]) is None:
        raise RuntimeError(f"the compile cache is keyed by the {parts[0]} version, and {parts[0]} is not installed")
    return "+".join(found)


def _files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else 0


def _key(backend: str, tpu_slice: TpuSlice, num_slices: int) -> CompileCacheKey:
    return CompileCacheKey(backend, runtime_version(backend), os.environ.get(WORKER_IMAGE_ENV), tpu_slice, num_slices)


def enable_xla(rank: int, tpu_slice: TpuSlice, num_slices: int, root: str | None = None) -> CacheUse | None:
    """Point PyTorch/XLA's persistent cache at ``<root>/<key>`` (``root``: else ``TPURAY_COMPILE_CACHE_DIR``;
    neither: no cache). Before the runtime computes anything; rank 0 is the writer."""
    global _current
    base = root or os.environ.get(CACHE_DIR_ENV)
    if not base:
        return None
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_computation_cache_is_initialized():  # type: ignore[attr-defined]  # what it asserts
        raise RuntimeError(
            "the persistent compile cache must be set before PyTorch/XLA computes anything, and this process "
            "already has: enable it first (XlaChipConfig does, before the train function runs)"
        )
    key = _key("xla", tpu_slice, num_slices)
    directory = Path(base) / key.path
    writer = rank == 0
    if writer:
        directory.mkdir(parents=True, exist_ok=True)
    before = _files(directory)
    xr.initialize_cache(str(directory), readonly=not writer)
    _current = CacheUse(key.path, str(directory), writer, before)
    return _current


def enable_torch_tpu(rank: int, tpu_slice: TpuSlice, num_slices: int) -> CacheUse | None:
    """Point TorchTPU's tier-3 cache at ``$TPURAY_COMPILE_CACHE_URL/<key>``, unless the user set it already."""
    global _current
    url = os.environ.get(CACHE_URL_ENV)
    if not url:
        return None
    key = _key("torch_tpu", tpu_slice, num_slices)
    directory = os.environ.setdefault(TORCH_TPU_CACHE_ENV, f"{url.rstrip('/')}/{key.path}")
    _current = CacheUse(key.path, directory, rank == 0, -1)  # a gs:// root: not counted from here
    return _current


def cache_report() -> dict[str, Any] | None:
    """What this worker's cache held and gained: the key, the directory, files before and after, and PyTorch/XLA's
    persistent-cache counters (hits, misses, reload failures) where it runs."""
    use = _current
    if use is None:
        return None
    counted = use.files_before >= 0
    after = _files(Path(use.directory)) if counted else None
    out: dict[str, Any] = {
        "key": use.key,
        "directory": use.directory,
        "writer": use.writer,
        "files_before": use.files_before if counted else None,
        "files_after": after,
        "files_written": after - use.files_before if after is not None else None,
        "warm": use.files_before > 0 if counted else None,
    }
    if use.key.startswith("xla-"):
        import torch_xla.debug.metrics as met

        names = set(met.counter_names())  # type: ignore[no-untyped-call]
        out |= {
            k: int(met.counter_value(c) or 0) if c in names else 0  # type: ignore[no-untyped-call]
            for k, c in _XLA_COUNTERS.items()
        }
    return out
