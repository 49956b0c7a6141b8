"""Ray Train's portable API on PyTorch/XLA, one chip per worker: what :class:`~tpuray.workloads.XlaChipConfig`
installs on every worker before the train function runs.

- ``ray.train.torch.get_device()``/``get_devices()`` return the worker's XLA device (:class:`XlaDeviceManager`).
- ``prepare_model`` moves the model there and wraps it in ``DistributedDataParallel`` over the job's default
  process group: ``xla`` on TPUs (the torch_xla DDP guide,
  https://docs.pytorch.org/xla/release/r2.9/perf/ddp.html), and on the emulated slice (``PJRT_DEVICE=CPU``)
  :class:`XlaOverGloo`, which runs every collective through gloo on CPU copies (XLA collectives do not cross CPU
  processes, and gloo on an XLA tensor does nothing). So a plain ``optimizer.step()`` sees averaged gradients.
  The copy runs the step's whole pending graph (forward, backward, the loss), as ``optimizer_step``'s gradient
  copy does: two graphs per step on both paths (measured: ``bench/train_overhead.py``'s ``graphs_per_step``),
  not a third one for the loss the loop reads. On that group the wrapper is :class:`XlaDDP`, which compiles no
  more graphs per run than ``optimizer_step`` does on the same loop (``tests/workloads/test_ray_compat.py``: 3 each;
  plain DDP 8 or 9): it syncs the initial parameters and buffers from rank 0 over
  gloo on CPU copies (DDP's own sync concatenates them on the XLA device: 2 or 3 graphs), and lays out its single
  gradient bucket once at construction, in parameter order (DDP lays it out again after the first backward, in
  the order the gradients became ready: the step's graph then changes twice, 3 more graphs). On the ``xla``
  group (TPUs) it is plain ``DistributedDataParallel``.
- ``prepare_data_loader`` gives each chip its shard (``DistributedSampler`` reads the process group's rank and
  size: the XLA rank and the chip count), moves each batch to the chip, and cuts the XLA graph once per batch:
  Ray's loader wrapper enters the device manager's stream context once per batch it moves, and that context is
  the step boundary here (``torch_xla.sync()``, what ``MpDeviceLoader`` does per batch).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tpuray.workloads import _ray_compat

if TYPE_CHECKING:
    import torch

__all__ = ["EMULATED_BACKEND", "XlaDDP", "XlaDeviceManager", "install", "register_emulated_backend", "uninstall"]

EMULATED_BACKEND = "tpuray_xla_gloo"
"""The process-group backend name of :class:`XlaOverGloo` (the emulated slice's default group)."""


def _device_manager_class() -> type[Any]:
    base = _ray_compat.torch_device_manager_base()

    class XlaDeviceManager(base):  # type: ignore[misc, valid-type]
        """Ray's torch device manager for one XLA device per process."""

        def __init__(self, pjrt_device: str) -> None:
            self._depth = 0
            self._pjrt_device = pjrt_device.upper()

        def is_available(self) -> bool:
            return True

        def get_devices(self) -> list[torch.device]:
            import torch_xla
            import torch_xla.runtime as xr

            kind = str(xr.device_type())
            if kind != self._pjrt_device:  # never the host CPU in place of the chip
                raise RuntimeError(
                    f"this worker's chip is a PJRT_DEVICE={self._pjrt_device} device but PyTorch/XLA runs on {kind}"
                )
            return [torch_xla.device()]

        def set_device(self, device: Any) -> None:
            pass  # PJRT binds the process to its chip at start (TPU_VISIBLE_CHIPS)

        def supports_stream(self) -> bool:
            return False

        def get_stream_context(self, stream: Any) -> Any:
            return self._step_boundary()

        def get_current_stream(self) -> None:
            return None

        @contextmanager
        def _step_boundary(self) -> Iterator[None]:
            # Entered once per batch (and again for each tensor of it: only the outermost entry cuts the graph).
            if self._depth == 0:
                import torch_xla

                torch_xla.sync()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    return XlaDeviceManager


XlaDeviceManager: type[Any] | None = None


def _ddp_class() -> type[Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    class XlaDDP(DistributedDataParallel):
        """``DistributedDataParallel`` as ``prepare_model`` builds it; on the emulated slice's group, without the
        graphs DDP's setup would compile (see the module docstring)."""

        def __init__(self, module: torch.nn.Module, **kwargs: Any) -> None:
            if dist.get_backend(kwargs.get("process_group")) != EMULATED_BACKEND:
                super().__init__(module, **kwargs)
                return
            sync = bool(kwargs.pop("init_sync", True))
            if "bucket_cap_mb" not in kwargs:  # one bucket: each bucket's gloo copy would cut the step's graph
                size = sum(p.numel() * p.element_size() for p in module.parameters())
                kwargs["bucket_cap_mb"] = size / 2**20 + 1
            super().__init__(module, init_sync=False, **kwargs)
            if sync:
                self._sync_from_rank_0()
            reducer: Any = self.reducer
            if not (hasattr(reducer, "_push_all_rebuilt_params") and hasattr(reducer, "_rebuild_buckets")):
                raise RuntimeError(
                    f"torch {torch.__version__}'s DDP reducer has no _push_all_rebuilt_params/_rebuild_buckets "
                    "(torch/nn/parallel/distributed.py's join hook uses them in torch 2.9): tpuray.workloads' "
                    "emulated slice is tested with torch 2.9"
                )
            # What DDP's join hook does (_DDPJoinHook): lay the buckets out now, once, so DDP does not again
            # after the first backward.
            reducer._push_all_rebuilt_params()
            reducer._rebuild_buckets()

        def _sync_from_rank_0(self) -> None:
            """Rank 0's parameters and buffers on every rank, one gloo broadcast per dtype of CPU copies (reading
            an uploaded parameter copies it, compiling nothing; writing one back uploads it)."""
            ignore = self.parameters_to_ignore
            named = [*self.module.named_parameters(), *self.module.named_buffers()]
            state = [t.detach() for n, t in named if n not in ignore]
            for dtype in dict.fromkeys(t.dtype for t in state):
                same = [t for t in state if t.dtype == dtype]
                flat = torch.cat([t.cpu().reshape(-1) for t in same])
                dist.broadcast(flat, 0, group=self.process_group)
                if self.process_group.rank() != 0:
                    with torch.no_grad():
                        for t, h in zip(same, flat.split([t.numel() for t in same]), strict=True):  # type: ignore[no-untyped-call]
                            t.copy_(h.view_as(t))

    return XlaDDP


XlaDDP: type[Any] | None = None


def install(pjrt_device: str) -> None:
    """Make Ray Train's portable API use this worker's XLA device (run on the worker, before the train function);
    ``pjrt_device`` is what the device must be (``TPU``, or ``CPU`` on the emulated slice)."""
    global XlaDeviceManager, XlaDDP
    if XlaDeviceManager is None:
        XlaDeviceManager = _device_manager_class()
    if XlaDDP is None:
        XlaDDP = _ddp_class()
    _ray_compat.install_torch_device_manager(XlaDeviceManager(pjrt_device), "xla", XlaDDP)


def uninstall() -> None:
    _ray_compat.uninstall_torch_device_manager()


# ---- the emulated slice's process group -------------------------------------------------------------------


def _done(result: Any) -> Any:
    import torch

    c10d: Any = importlib.import_module("torch._C._distributed_c10d")

    fut: torch.futures.Future[Any] = torch.futures.Future()
    fut.set_result(result)

    return c10d._create_work_from_future(fut)  # what torch_xla's own process group returns


def _process_group_class() -> type[Any]:
    import torch
    from torch._C._distributed_c10d import AllgatherOptions, BarrierOptions
    from torch.distributed import ProcessGroup, ProcessGroupGloo

    def cpu(t: torch.Tensor) -> torch.Tensor:
        return t if t.device.type == "cpu" else t.cpu()

    def host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """CPU copies of ``tensors``. Where one is an XLA tensor, the step's pending graph runs whole first
        (``torch_xla.sync()``): copying only these would run the graph up to them, and the next read of another
        tensor of the step (the loss a loop prints) would run a second graph for it."""
        if any(t.device.type == "xla" for t in tensors):
            import torch_xla

            torch_xla.sync()
        return [cpu(t) for t in tensors]

    def blank(t: torch.Tensor) -> torch.Tensor:
        """A CPU buffer for a collective to overwrite: reading ``t`` itself would run a graph for nothing."""
        return t if t.device.type == "cpu" else torch.empty(t.shape, dtype=t.dtype)

    def back(dst: torch.Tensor, src: torch.Tensor) -> None:
        if dst is not src:
            with torch.no_grad():
                dst.copy_(src.to(dst.device))

    class XlaOverGloo(ProcessGroup):
        """The collectives DDP and users call, through a gloo group on CPU copies of the (XLA) tensors.

        Modelled on torch_xla's own Python process group (``torch_xla/distributed/xla_backend.py``).
        """

        def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
            super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-subclass constructor
            self._gloo: Any = ProcessGroupGloo(store, rank, size, timeout)

        def getBackendName(self) -> str:
            return EMULATED_BACKEND

        def _set_group_name(self, name: str) -> None:
            self._group_name = name

        @property
        def group_name(self) -> str:
            return self._group_name

        def _in_place(self, op: str, tensors: list[torch.Tensor], opts: Any, *, read: bool = True) -> Any:
            """Run gloo's in-place collective ``op`` on CPU copies of ``tensors`` (blank buffers unless ``read``)
            and write the results back."""
            copies = host(tensors) if read else [blank(t) for t in tensors]
            getattr(self._gloo, op)(copies, opts).wait()
            for t, h in zip(tensors, copies, strict=True):
                back(t, h)
            return _done(tensors)

        def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
            return self._in_place("allreduce", tensors, opts)

        def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
            return self._in_place("broadcast", tensors, opts, read=opts.rootRank == self.rank())

        def allgather(  # type: ignore[override]
            self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
        ) -> Any:
            host_out = [[blank(t) for t in o] for o in outputs]
            self._gloo.allgather(host_out, host(inputs), opts or AllgatherOptions()).wait()
            for o, h in zip(outputs, host_out, strict=True):
                for t, x in zip(o, h, strict=True):
                    back(t, x)
            return _done([t for o in outputs for t in o])

        def barrier(self, opts: Any = None) -> Any:
            self._gloo.barrier(opts or BarrierOptions()).wait()
            return _done([])

    return XlaOverGloo


_registered = False


def register_emulated_backend() -> str:
    """Register :class:`XlaOverGloo` as a c10d backend for CPU and XLA tensors; returns its name."""
    import torch.distributed as dist

    global _registered
    if not _registered:
        cls = _process_group_class()
        dist.Backend.register_backend(
            EMULATED_BACKEND,
            lambda store, rank, size, timeout: cls(store, rank, size, timeout),
            devices=["cpu", "xla"],
        )
        _registered = True
    return EMULATED_BACKEND
