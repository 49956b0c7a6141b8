"""Which TPU runtime a process runs, and the refusal of the other: PyTorch/XLA (``torch_xla`` 2.9, torch 2.9) and
TorchTPU (``torch_tpu`` 0.2, torch 2.11 to 2.15) cannot share one environment (each wheel pins its torch), so each
has its own extra (``tpuray[workload]``, ``tpuray[torch-tpu]``) and worker image target (``workloads/Dockerfile``).
"""

from __future__ import annotations

import importlib.util
import sys

from tpuray.components.catalog.runtimes import BACKENDS, RUNTIMES, RuntimeBackend

__all__ = ["RUNTIME_PACKAGES", "RuntimeMismatch", "require_runtime"]

RUNTIME_PACKAGES: dict[RuntimeBackend, str] = {b: r.package for b, r in RUNTIMES.items()}
_EXTRAS: dict[RuntimeBackend, str] = {b: r.extra for b, r in RUNTIMES.items()}
_TARGETS: dict[RuntimeBackend, str] = {b: r.image_target for b, r in RUNTIMES.items()}


class RuntimeMismatch(RuntimeError):
    """This environment cannot run the requested backend."""


def require_runtime(backend: RuntimeBackend, *, emulated: bool = False) -> None:
    """Raise :class:`RuntimeMismatch` unless ``backend``'s package is installed here and the other one's is not
    imported, naming the extra and the image target that give the right one. ``emulated``: this process drives or
    runs the emulated slice, where TorchTPU is its stand-in (``tpuray.workloads.emulation.torch_tpu_standin``, in
    this environment's torch) rather than torch_tpu."""
    if backend not in BACKENDS:
        raise RuntimeMismatch(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
    if emulated and backend == "torch_tpu":
        return
    package = RUNTIME_PACKAGES[backend]
    other = next(b for b in BACKENDS if b != backend)
    how = (
        f"install tpuray[{_EXTRAS[backend]}] (pip refuses to combine it with tpuray[{_EXTRAS[other]}]), or run the "
        f"workloads/Dockerfile target {_TARGETS[backend]!r}"
    )
    if RUNTIME_PACKAGES[other] in sys.modules:
        raise RuntimeMismatch(
            f"backend {backend}: {RUNTIME_PACKAGES[other]} is already imported in this process, and the two runtimes "
            f"cannot share one environment; {how}"
        )
    if importlib.util.find_spec(package) is None:
        raise RuntimeMismatch(f"backend {backend} needs {package}, which this environment lacks; {how}")
