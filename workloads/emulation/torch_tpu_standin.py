"""TorchTPU's stand-in on the emulated slice: Ray's own TorchTPU path, one process per emulated device, on CPU.

torch_tpu has no CPU mode (it registers its ``tpu`` device and its ``tpu_dist`` process group only when it finds a
TPU on the PCI bus) and needs torch 2.11 to 2.15, while the emulation runs torch 2.9. So on an emulated TPU host
(:data:`~tpuray.components.catalog.names.EMULATED_SLICE_ENV` set) the TorchTPU env callback installs this
stand-in in each worker, before Ray's ``_TorchBackend`` starts the process group:

- ``tpu_dist`` is registered as a ``torch.distributed`` backend that is gloo on CPU tensors
  (``Backend.register_backend``, https://docs.pytorch.org/docs/stable/distributed.html#torch.distributed.Backend),
  so ``init_process_group("tpu_dist")``, ``init_device_mesh``, FSDP2, DTensor and DCP run as they do on TPUs;
- Ray's TPU device manager (``ray/air/_internal/device_manager/tpu.py``) answers with the CPU device, so a script
  that asks ``ray.train.torch.get_device()`` for its device runs unchanged;
- ``torch.tpu.distributed.topology_aware_mesh`` gives the rank layout torch_tpu 0.2.0 gives on a slice without a
  torus (:mod:`tpuray.workloads.emulation.standin_mesh`);
- a literal ``tpu`` device fails with :data:`NO_TPU_DEVICE`, which says why and what to write instead.

It is never installed where a real torch_tpu is importable, and says once per run what it is not
(:data:`NOTICE`).
"""

from __future__ import annotations

import functools
import importlib.util
import threading
import types
from collections.abc import Callable
from typing import Any

from tpuray.workloads import _ray_compat
from tpuray.workloads.emulation.standin_mesh import topology_aware_mesh

__all__ = ["NOTICE", "NO_TPU_DEVICE", "install", "installed"]

NOTICE = (
    "TorchTPU stand-in on the emulated slice: Ray's TorchTPU path with tpu_dist over gloo on CPU, one process per "
    "emulated device. It is not TorchTPU: no 'tpu' device (get_device() gives the CPU), no XLA compilation, no ICI "
    "or DCN (collectives cross processes on this machine), CPU timings, torch 2.9 rather than 2.11 to 2.15. It "
    "shows the process model, the env, the ranks, the mesh, sharding and checkpoints; only a TPU shows the rest."
)
"""What the stand-in cannot be, said once at the start of a run (by the env callback, in the driver)."""

NO_TPU_DEVICE = (
    "the emulated slice runs TorchTPU's stand-in, which has no 'tpu' device (torch_tpu needs a TPU and torch 2.11+); "
    "ask Ray for the worker's device instead of naming it: device = ray.train.torch.get_device(), which is "
    "torch.device('tpu') under torch_tpu on a TPU slice and the CPU here"
)
"""The error a literal ``tpu`` device gets on the stand-in."""

_lock = threading.Lock()
_installed = False


def installed() -> bool:
    """Whether this process runs the stand-in."""
    return _installed


def install() -> bool:
    """Install the stand-in in this worker process (once); False where a real torch_tpu is importable, which is
    never shadowed."""
    global _installed
    with _lock:
        if _installed:
            return True
        if importlib.util.find_spec("torch_tpu") is not None:
            return False
        _register_tpu_dist()
        _refuse_tpu_device()
        _ray_compat.answer_tpu_device_manager(_cpu_devices, _register_tpu_dist)
        _installed = True
        return True


def _cpu_devices() -> list[Any]:
    import torch

    return [torch.device("cpu")]


def _register_tpu_dist() -> None:
    """``tpu_dist`` as a backend whose process groups are gloo's, on CPU tensors (once per process)."""
    import torch.distributed as dist

    if "tpu_dist" in dist.Backend.backend_list:
        return

    def gloo(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    dist.Backend.register_backend("tpu_dist", gloo, devices=["cpu"])


def _refuse_tpu_device() -> None:
    """Make ``tpu`` a device name whose every use says :data:`NO_TPU_DEVICE`, and ``torch.tpu`` the stand-in's
    module (``torch.tpu.distributed.topology_aware_mesh``, as torch_tpu registers it)."""
    import torch

    # PrivateUse1 is the dispatch key an out-of-tree device such as torch_tpu takes; named "tpu", the name parses
    # (https://docs.pytorch.org/tutorials/advanced/privateuseone.html) and every allocation on it lands here.
    from torch.utils.backend_registration import rename_privateuse1_backend

    rename_privateuse1_backend("tpu")
    lib = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    for op in ("empty.memory_format", "empty_strided"):
        lib.impl(op, _refuse, "PrivateUse1")  # type: ignore[no-untyped-call]
    _LIBRARIES.append(lib)  # a Library deregisters its kernels when collected
    module = types.ModuleType("torch.tpu")
    distributed = types.ModuleType("torch.tpu.distributed")
    distributed.topology_aware_mesh = topology_aware_mesh  # type: ignore[attr-defined]
    module.distributed = distributed  # type: ignore[attr-defined]
    module.is_available = lambda: False  # type: ignore[attr-defined]
    module.device_count = lambda: 0  # type: ignore[attr-defined]
    # what torch.manual_seed asks of a device module (torch/random.py): nothing to seed, no device
    module._is_in_bad_fork = lambda: False  # type: ignore[attr-defined]
    module.manual_seed_all = lambda seed: None  # type: ignore[attr-defined]
    torch._register_device_module("tpu", module)  # type: ignore[no-untyped-call]
    # A copy to a device torch was not built with fails in its device guard before any kernel runs: say why there.
    torch.Tensor.to = _said(torch.Tensor.to)  # type: ignore[method-assign]


_LIBRARIES: list[Any] = []


def _refuse(*args: object, **kwargs: object) -> Any:
    raise RuntimeError(NO_TPU_DEVICE)


def _names_tpu(value: object) -> bool:
    import torch

    if isinstance(value, torch.device):
        return value.type == "tpu"
    return isinstance(value, str) and value.split(":")[0] == "tpu"


def _said(to: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(to)
    def to_device(self: Any, *args: Any, **kwargs: Any) -> Any:
        if any(_names_tpu(a) for a in (*args, kwargs.get("device"))):
            raise RuntimeError(NO_TPU_DEVICE)
        return to(self, *args, **kwargs)

    return to_device
