"""The persistent compile cache's key: which compiled programs one run may reuse from another.

Pure Python. A compiled TPU program is valid only for the runtime that compiled it (PyTorch/XLA or TorchTPU, at
its version, with its libtpu), the image that carries that runtime, and the chips it runs on (slice shape and
slice count: a multislice program has collectives across slices). So the key is exactly those four, as a relative
directory, and nothing of the training job (learning rate, steps, dataset): two runs share a cache directory when
their programs can hit, and never otherwise. The planner renders it with the runtime version still to be read
(the image decides it); the workers fill it in (:mod:`tpuray.workloads.api.compile_cache`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tpuray.components.catalog.images import parse_image
from tpuray.components.catalog.topology import TpuSlice

__all__ = ["CACHE_DIR_ENV", "CACHE_URL_ENV", "RUNTIME_FROM_IMAGE", "WORKER_IMAGE_ENV", "CompileCacheKey", "image_id"]

CACHE_DIR_ENV = "TPURAY_COMPILE_CACHE_DIR"
"""The cache root as a file system path in the worker (PyTorch/XLA's cache directory goes under it)."""
CACHE_URL_ENV = "TPURAY_COMPILE_CACHE_URL"
"""The same root as ``gs://<bucket>/<prefix>`` (TorchTPU's tier-3 cache root goes under it)."""
WORKER_IMAGE_ENV = "TPURAY_WORKER_IMAGE"
"""The worker image reference: the key's image part (a container cannot read its own image's digest)."""

RUNTIME_FROM_IMAGE = "{runtime}"
"""What the plan writes for the runtime version: the worker reads it from the packages its image installed."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def image_id(image: str | None) -> str:
    """The image part of the key: the digest's first 16 hex digits for a pinned image; for a tag, ``tag-`` and a
    hash of the reference (a moved tag keeps its key: pin by digest for a key that follows the content); ``local``
    for a run with no image (the emulated slice)."""
    if image is None:
        return "local"
    ref = parse_image(image)
    if ref.digest is not None:
        return ref.digest.removeprefix("sha256:")[:16]
    return "tag-" + hashlib.sha256(image.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CompileCacheKey:
    """The four things a compiled program depends on; :attr:`path` is the cache directory under the cache root."""

    backend: str
    """``xla`` (PyTorch/XLA) or ``torch_tpu``."""
    runtime: str
    """The runtime's version, e.g. ``torch_xla-2.9.0+libtpu-0.0.21``, or :data:`RUNTIME_FROM_IMAGE` in a plan."""
    image: str | None
    """The worker image reference (None: no image, a local run)."""
    tpu_slice: TpuSlice
    num_slices: int

    @property
    def shape(self) -> str:
        """``v5p-128-4x4x4-x2``: the pod type, topology and slice count."""
        return f"{self.tpu_slice.pod_type}-{self.tpu_slice.topology}-x{self.num_slices}"

    @property
    def path(self) -> str:
        """``<backend>-<runtime>/<shape>/<image id>``: one directory per key, readable in ``gsutil ls``."""
        runtime = self.runtime if self.runtime == RUNTIME_FROM_IMAGE else _UNSAFE.sub("_", self.runtime)
        return f"{self.backend}-{runtime}/{self.shape}/{image_id(self.image)}"
