"""Ray Train's portable API on PyTorch/XLA, one chip per worker: what :class:`~tpuray.workloads.XlaChipConfig`
installs on every worker before the train function runs.

- ``ray.train.torch.get_device()``/``get_devices()`` return the worker's XLA device (:class:`XlaDeviceManager`).
- ``prepare_model`` moves the model there and wraps it in :class:`XlaDDP`, a ``DistributedDataParallel`` over the job's
  default process group. On TPUs that group is ``xla`` and the wrapper is plain DDP (the torch_xla DDP guide,
  https://docs.pytorch.org/xla/release/r2.9/perf/ddp.html). On the emulated slice (``PJRT_DEVICE=CPU``) the group is
  :class:`XlaOverGloo`, which runs collectives through gloo on CPU copies (XLA collectives do not cross CPU processes,
  and gloo on an XLA tensor does nothing), and the wrapper keeps DDP's state and interface as scripts use them
  (``copy.deepcopy``, ``pickle``/``torch.save``, ``state_dict()`` under ``module.``, ``no_sync()``; its options that
  need DDP's reducer are refused by name) but not its reducer: it syncs the initial parameters and buffers from rank 0
  over gloo, and at the end of each backward averages the gradients with :func:`gloo_average`, what ``optimizer_step``
  uses. So a plain ``optimizer.step()`` sees averaged gradients, and the portable path compiles the same graphs at the
  same steps as ``optimizer_step`` (``tests/workloads/test_ray_compat.py``; ``bench/train_overhead.py``: 3 each on the
  dev GPT). DDP's reducer compiled 1 to 6 more: it lays its gradient bucket out on the XLA device (a graph of its own),
  broadcasts the layout, and lays it out again after the first backward.
- Every optimizer step ends the step's XLA graph (a global ``optimizer.step()`` post-hook: what torch_xla's
  ``xm.optimizer_step`` + ``MpDeviceLoader`` loop does), so a loop with no XLA call runs, like
  ``optimizer_step``'s loop, one graph per step on TPUs and two on the emulated slice (its gradient average reads
  the gradients: forward and backward, then the update).
- ``prepare_data_loader`` gives each chip its shard (``DistributedSampler`` reads the process group's rank and
  size: the XLA rank and the chip count), moves each batch to the chip, and cuts the XLA graph once per batch:
  Ray's loader wrapper enters the device manager's stream context once per batch it moves, and that context is
  a step boundary too (``torch_xla.sync()``, what ``MpDeviceLoader`` does per batch; a no-op after the optimizer
  step's). Ray's wrapper moves batch ``i + 1`` when it hands out batch ``i``, and none after the last: without the
  optimizer step's cut, the last step would run the previous update in its own graph, one more compile per run.
- Ray Data's ``iter_torch_batches`` (``get_dataset_shard(name).iter_torch_batches(...)``), whose default device is
  ``get_device()``, builds each batch on the host in its prefetch thread and moves it to the chip on the thread that
  reads it, at the same step boundary: Ray builds device batches in that thread, and torch_xla fails a tensor being
  built there while the main thread cuts the graph (``Check failed: data()->tensor_data``).
- float16 autocast and ``GradScaler`` are refused as they are made, naming the bfloat16 alternative
  (``tpuray port check``'s advice): off CUDA, torch would turn them off with a warning and train in float32.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tpuray.workloads import _ray_compat
from tpuray.workloads.xla.patches import Patches

if TYPE_CHECKING:
    import torch

    XlaDDP: type[Any]  # built on first use: see __getattr__ below
    XlaDeviceManager: type[Any]

__all__ = [
    "EMULATED_BACKEND",
    "XlaDDP",
    "XlaDeviceManager",
    "gloo_average",
    "install",
    "register_emulated_backend",
    "uninstall",
]

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


_UNSUPPORTED_KWARGS = {
    "static_graph": False,
    "delay_all_reduce_named_params": None,
    "param_to_hook_all_reduce": None,
    "mixed_precision": None,
    "device_mesh": None,
    "skip_all_reduce_unused_params": False,
}
"""``DistributedDataParallel`` arguments that configure its reducer, with their defaults: the emulated slice's
wrapper has no reducer, so anything else is refused at ``prepare_model`` time (TPUs, on the xla group, take them)."""

_NO_REDUCER = (
    "the emulated slice's DistributedDataParallel (PJRT_DEVICE=CPU, tpuray's gloo-over-XLA group) averages "
    "gradients as optimizer_step does and has no DDP reducer, so {what} is not supported there; on TPUs (the xla "
    "process group) prepare_model builds plain DDP, which has it"
)


def _ddp_class() -> type[Any]:
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group
    from torch.nn.parallel import DistributedDataParallel

    engine: Any = torch.autograd.Variable._execution_engine

    class XlaDDP(DistributedDataParallel):
        """``DistributedDataParallel`` as ``prepare_model`` builds it. On TPUs (the xla group) it is plain DDP. On
        the emulated slice's group it is a DDP without DDP's reducer: it keeps DDP's state and interface as
        scripts use them (``module``, ``state_dict()`` keys under ``module.``, ``no_sync()``, ``train()``/
        ``eval()``, ``copy.deepcopy``, ``pickle``/``torch.save`` with the default group) but averages the
        gradients as ``optimizer_step`` does (see the module docstring). What needs the reducer (communication
        hooks, ``join()``, ``static_graph``, mixed precision, ...) is refused by name, at construction for DDP's
        arguments."""

        def __init__(self, module: torch.nn.Module, **kwargs: Any) -> None:
            group = kwargs.get("process_group")
            self._emulated = dist.get_backend(group) == EMULATED_BACKEND
            if not self._emulated:
                super().__init__(module, **kwargs)
                return
            for name, default in _UNSUPPORTED_KWARGS.items():
                if name in kwargs and kwargs[name] != default:
                    raise ValueError(
                        "prepare_model(parallel_strategy_kwargs={"
                        + f"{name!r}: {kwargs[name]!r}"
                        + "}): "
                        + _NO_REDUCER.format(what=f"DistributedDataParallel's {name}")
                    )
            if not hasattr(engine, "queue_callback"):
                raise RuntimeError(
                    f"torch {torch.__version__}'s autograd engine has no queue_callback (DDP's own end-of-backward "
                    "hook in torch 2.9): tpuray.workloads' emulated slice is tested with torch 2.9"
                )
            torch.nn.Module.__init__(self)
            self.module = module
            pg = group if group is not None else dist.group.WORLD
            if pg is None:
                raise RuntimeError("XlaDDP needs a process group: the backend creates it before the train function")
            self.process_group = pg
            # DDP's own attributes that scripts and frameworks read (torch/nn/parallel/distributed.py, __init__)
            self.device_ids = kwargs.get("device_ids")
            self.output_device = kwargs.get("output_device")
            self.dim = int(kwargs.get("dim", 0))
            self.find_unused_parameters = bool(kwargs.get("find_unused_parameters", False))
            self.gradient_as_bucket_view = bool(kwargs.get("gradient_as_bucket_view", False))
            self.static_graph = False
            self.require_forward_param_sync = True
            self.require_backward_grad_sync = True  # what DistributedDataParallel.no_sync() switches off
            self.broadcast_buffers = bool(kwargs.get("broadcast_buffers", True))
            self._average_queued = False
            self._hook_gradients()
            if kwargs.get("init_sync", True):
                self._from_rank_0([p.detach() for p in self._params] + self._buffers_to_sync)

        def _hook_gradients(self) -> None:
            ignore = set(getattr(self.module, "_ddp_params_and_buffers_to_ignore", ()))
            self._params = [p for n, p in self.module.named_parameters() if p.requires_grad and n not in ignore]
            self._buffers_to_sync = [b for n, b in self.module.named_buffers() if n not in ignore]
            for p in self._params:
                # Tensor hooks are not copied or pickled with the parameter (torch/nn/parameter.py, "Don't
                # serialize hooks"): a copy of this wrapper hooks its own parameters again (__setstate__).
                p.register_post_accumulate_grad_hook(self._grad_ready)

        def __getstate__(self) -> dict[str, Any]:
            if not self._emulated:
                return super().__getstate__()  # type: ignore[no-untyped-call, no-any-return]
            # As DDP's own: only a wrapper over the default group can be copied, and the copy joins that group.
            if self.process_group is not _get_default_group():
                raise RuntimeError(
                    "DDP Pickling/Unpickling are only supported when using DDP with the default process group"
                )
            attrs = copy.copy(self.__dict__)
            del attrs["process_group"]
            # the hooked lists are rebuilt from the copied module, so they stay its parameters
            for name in ("_params", "_buffers_to_sync"):
                del attrs[name]
            attrs["_average_queued"] = False
            return attrs

        def __setstate__(self, state: dict[str, Any]) -> None:
            if not state.get("_emulated"):
                super().__setstate__(state)  # type: ignore[no-untyped-call]
                return
            torch.nn.Module.__setstate__(self, state)  # type: ignore[no-untyped-call]
            self.process_group = _get_default_group()
            self._hook_gradients()

        def __getattr__(self, name: str) -> Any:
            if name in ("reducer", "logger") and self.__dict__.get("_emulated"):
                raise AttributeError(_NO_REDUCER.format(what=f"DDP's {name} (and what uses it)"))
            return super().__getattr__(name)

        def forward(self, *inputs: Any, **kwargs: Any) -> Any:
            if not self._emulated:
                return super().forward(*inputs, **kwargs)  # type: ignore[no-untyped-call]
            if self.broadcast_buffers and self._buffers_to_sync and torch.is_grad_enabled():
                self._from_rank_0(self._buffers_to_sync)  # as DDP does before each forward
            return self.module(*inputs, **kwargs)

        def register_comm_hook(self, state: object, hook: Any) -> None:
            if self._emulated:
                raise NotImplementedError(_NO_REDUCER.format(what="register_comm_hook"))
            super().register_comm_hook(state, hook)

        def join(self, *args: Any, **kwargs: Any) -> Any:
            if self._emulated:
                raise NotImplementedError(_NO_REDUCER.format(what="join() (uneven inputs)"))
            return super().join(*args, **kwargs)

        def _set_static_graph(self) -> None:
            if self._emulated:
                raise NotImplementedError(_NO_REDUCER.format(what="static_graph"))
            super()._set_static_graph()  # type: ignore[no-untyped-call]

        def _grad_ready(self, _param: torch.Tensor) -> None:
            # Once per backward, after every gradient is accumulated (DDP queues its own reduction the same way).
            if self.require_backward_grad_sync and not self._average_queued:
                self._average_queued = True
                engine.queue_callback(self._average)

        def _average(self) -> None:
            self._average_queued = False
            gloo_average(self._params, self.process_group.size())

        def _from_rank_0(self, tensors: list[torch.Tensor]) -> None:
            """Rank 0's values of ``tensors`` on every rank, one gloo broadcast per dtype of CPU copies (reading
            an uploaded tensor copies it, compiling nothing; writing one back uploads it)."""
            for dtype in dict.fromkeys(t.dtype for t in tensors):
                same = [t for t in tensors if t.dtype == dtype]
                flat = torch.cat([t.cpu().reshape(-1) for t in same])
                dist.broadcast(flat, 0, group=self.process_group)
                if self.process_group.rank() != 0:
                    with torch.no_grad():
                        for t, h in zip(same, flat.split([t.numel() for t in same]), strict=True):  # type: ignore[no-untyped-call]
                            t.copy_(h.view_as(t))

    # pickle finds the class by this name (the module's __getattr__ builds it in a process that never installed)
    XlaDDP.__module__ = __name__
    XlaDDP.__qualname__ = "XlaDDP"
    return XlaDDP


def gloo_average(params: Sequence[torch.Tensor], world: int) -> None:
    """Replace each gradient of ``params`` by its mean over the ``world`` chips of the default process group, in one
    gloo all-reduce of a CPU copy (an XLA all-reduce across CPU processes silently returns the local value, and gloo
    cannot read XLA tensors). A missing gradient counts as zeros. ``optimizer_step`` and the emulated slice's
    :class:`XlaDDP` both average with this."""
    import torch
    import torch.distributed as dist

    if not params:
        return
    device = params[0].device
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads]).cpu()
    dist.all_reduce(flat)
    flat = (flat / world).to(device)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p)
        offset += n


_built: dict[str, type[Any]] = {}
_BUILDERS = {"XlaDeviceManager": _device_manager_class, "XlaDDP": _ddp_class}


def __getattr__(name: str) -> type[Any]:
    """``XlaDeviceManager`` and ``XlaDDP``, built on first use (they subclass Ray's and torch's classes, which
    this module does not import until a worker needs them); one class per process, so a pickled ``XlaDDP`` loads
    by its name."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        _built[name] = builder()
    return _built[name]


def _cut_after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    import torch_xla

    torch_xla.sync()


_step_hook: Any = None


def install(pjrt_device: str) -> None:
    """Make Ray Train's portable API use this worker's XLA device (run on the worker, before the train function);
    ``pjrt_device`` is what the device must be (``TPU``, or ``CPU`` on the emulated slice)."""
    global _step_hook
    manager = __getattr__("XlaDeviceManager")(pjrt_device)
    _ray_compat.install_torch_device_manager(manager, "xla", __getattr__("XlaDDP"))
    if not _prepare_guard:  # Ray's FSDP branch cannot run here: refuse it by name at prepare_model time
        from tpuray.workloads.sharding.prepare import check_parallel_strategy

        _ray_compat.guard_prepare_model(check_parallel_strategy, _prepare_guard)

    def data_device(device: Any) -> torch.device | None:
        import torch

        target = manager.get_devices()[0] if isinstance(device, str) and device == "auto" else torch.device(device)
        return target if target.type == "xla" else None

    # Ray Data's batches for this chip are made on the host and moved on the thread that reads them, at a step
    # boundary as prepare_data_loader's are (see _ray_compat.install_iter_torch_batches_device for why).
    _ray_compat.install_iter_torch_batches_device(data_device, lambda: manager.get_stream_context(None))
    _guard_fp16(pjrt_device)

    if _step_hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        # Every optimizer step ends the step's graph, as torch_xla's xm.optimizer_step + MpDeviceLoader loop does:
        # Ray's loader cuts when it moves the next batch, so never before the last one, whose step would then
        # run the previous update in its own graph (one more compile per run).
        _step_hook = register_optimizer_step_post_hook(_cut_after_step)


def uninstall() -> None:
    global _step_hook
    _ray_compat.uninstall_torch_device_manager()
    _ray_compat.uninstall_iter_torch_batches_device()
    _prepare_guard.restore()
    _fp16.restore()
    if _step_hook is not None:
        _step_hook.remove()
        _step_hook = None


# ---- float16: refused on the chip, with the TPU alternative ------------------------------------------------

_fp16 = Patches()
_prepare_guard = Patches()


def _refusal(kind: str, pjrt_device: str) -> str:
    from tpuray.components.catalog.gpu_to_tpu import REPLACEMENTS

    what, instead = REPLACEMENTS[kind]
    return f"{what} is not supported on this worker's XLA chip (PJRT_DEVICE={pjrt_device.upper()}): {instead}"


def _guard_fp16(pjrt_device: str) -> None:
    """Refuse float16 autocast and ``GradScaler`` as they are made, naming the bfloat16 alternative (the advice of
    ``tpuray port check``). Where the device is not CUDA, torch itself turns a CUDA autocast or ``GradScaler`` off
    with a warning and trains in float32 (``torch/amp/autocast_mode.py``, ``torch/amp/grad_scaler.py``): a GPU
    script would run on, silently without its mixed precision."""
    import inspect

    import torch
    from torch.amp.autocast_mode import autocast
    from torch.amp.grad_scaler import GradScaler

    if _fp16:
        return
    autocast_init, scaler_init = autocast.__init__, GradScaler.__init__
    autocast_sig, scaler_sig = inspect.signature(autocast_init), inspect.signature(scaler_init)

    def guarded_autocast(self: Any, *args: Any, **kwargs: Any) -> None:
        call = autocast_sig.bind(self, *args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        # CUDA's autocast computes in float16 unless told otherwise (torch.get_autocast_dtype("cuda"))
        fp16 = a["dtype"] in (torch.float16,) or (a["dtype"] is None and a["device_type"] == "cuda")
        if a["enabled"] and fp16:
            raise RuntimeError(_refusal("fp16-autocast", pjrt_device))
        autocast_init(self, *args, **kwargs)

    def guarded_scaler(self: Any, *args: Any, **kwargs: Any) -> None:
        call = scaler_sig.bind(self, *args, **kwargs)
        call.apply_defaults()
        if call.arguments["enabled"]:
            raise RuntimeError(_refusal("grad-scaler", pjrt_device))
        scaler_init(self, *args, **kwargs)

    _fp16.replace(autocast, "__init__", guarded_autocast)
    _fp16.replace(GradScaler, "__init__", guarded_scaler)


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
