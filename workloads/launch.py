"""Launch: a slice shape becomes a Ray cluster this driver is connected to (the emulated one on this machine, or the
stack's on GKE) and a ``TorchTrainer`` for the stack's runtime. It is the one place a runtime is chosen; the
example GPT trainer's CLI (``python -m tpuray.workloads.train``) calls it, and so can any driver.

- ``xla``: :class:`~tpuray.workloads.XlaChipConfig` workers, one per chip.
- ``torch_tpu``: Ray's own TorchTPU path (its default ``TorchConfig``: ``tpu_dist``), one worker per device, with
  :class:`~tpuray.workloads.torch_tpu.TorchTpuEnvCallback` first among the trainer's callbacks, unless
  ``RAY_TRAIN_CALLBACKS`` names it already (a tpuray stack sets it on every Ray pod).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tpuray.components.catalog.runtimes import BACKENDS, RuntimeBackend
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import _ray_compat
from tpuray.workloads.api.runtime import require_runtime
from tpuray.workloads.api.scaling import tpu_scaling_config
from tpuray.workloads.emulation.cluster import EmulatedCluster

__all__ = ["connect", "trainer"]


@contextmanager
def connect(
    backend: RuntimeBackend, tpu_slice: TpuSlice | None = None, *, emulate: int = 0, address: str | None = None
) -> Iterator[EmulatedCluster | None]:
    """Connect this driver to a Ray cluster for ``backend``, and disconnect (and tear an emulated one down) on exit.

    ``emulate > 0``: start an emulated cluster of that many ``tpu_slice`` slices on this machine first; else
    connect to ``address`` (``auto``: the cluster this process runs in), unless Ray is connected already. The
    runtime's package is checked here, before any cluster work (``require_runtime``); on the emulated slice
    TorchTPU is its stand-in (:mod:`tpuray.workloads.emulation.torch_tpu_standin`), which needs no torch_tpu."""
    import ray

    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
    require_runtime(backend, emulated=emulate > 0)
    cluster: EmulatedCluster | None = None
    try:
        if emulate:
            if tpu_slice is None:
                raise ValueError("an emulated cluster needs a slice shape")
            cluster = EmulatedCluster(tpu_slice, slices=emulate).__enter__()
            ray.init(address=cluster.address, log_to_driver=True)
            _ray_compat.ready_train_autoscaling_coordinator()  # before the controller asks it (see there why)
        elif not ray.is_initialized():
            ray.init(address=address or "auto", log_to_driver=True)
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def trainer(
    train_fn: Callable[[dict[str, Any]], None],
    config: Mapping[str, Any],
    tpu_slice: TpuSlice,
    num_slices: int,
    run_config: Any,
    *,
    backend: RuntimeBackend = "xla",
    compile_cache_dir: str | None = None,
    spmd: bool = False,
    pjrt_device: str | None = None,
    min_slices: int | None = None,
    elastic_resize_monitor_interval_s: float | None = None,
) -> Any:
    """A ``TorchTrainer`` running ``train_fn(config)`` on ``num_slices`` whole ``tpu_slice`` slices under
    ``backend``, with ``run_config``. ``compile_cache_dir``: PyTorch/XLA's persistent cache root (TorchTPU's is the
    stack's, set by the env callback). ``spmd``: PyTorch/XLA's other process model, one worker per host driving
    all its chips (:class:`~tpuray.workloads.sharding.backend.SpmdConfig`; ``pjrt_device="CPU"`` on the emulated slice),
    refused where only TPUs can run it. ``min_slices``: train elastically between it and ``num_slices`` whole slices
    (:func:`~tpuray.workloads.api.scaling.tpu_scaling_config`), Ray Train checking every
    ``elastic_resize_monitor_interval_s`` (Ray's default where None) whether lost slices came back."""
    from ray.train.torch import TorchTrainer

    if spmd:
        from tpuray.workloads.sharding import spmd_scaling_config
        from tpuray.workloads.sharding.backend import SpmdConfig

        if backend != "xla":
            raise ValueError(f"backend {backend}: SPMD is PyTorch/XLA's (backend xla); TorchTPU shards with FSDP2")
        return TorchTrainer(
            train_fn,
            train_loop_config=dict(config),
            scaling_config=spmd_scaling_config(tpu_slice, num_slices=num_slices, pjrt_device=pjrt_device),
            torch_config=SpmdConfig(),
            run_config=run_config,
        )
    interval = (
        {}
        if elastic_resize_monitor_interval_s is None
        else {"elastic_resize_monitor_interval_s": elastic_resize_monitor_interval_s}
    )
    scaling = tpu_scaling_config(tpu_slice, num_slices=num_slices, min_slices=min_slices, backend=backend, **interval)
    if backend == "xla":
        from tpuray.workloads.xla import XlaChipConfig

        return TorchTrainer(
            train_fn,
            train_loop_config=dict(config),
            scaling_config=scaling,
            torch_config=XlaChipConfig(compile_cache_dir=compile_cache_dir),
            run_config=run_config,
        )
    if backend == "torch_tpu":
        from tpuray.workloads.torch_tpu import TorchTpuEnvCallback

        # First among the trainer's callbacks, where RAY_TRAIN_CALLBACKS (which a stack's pods set) puts it: Ray Train
        # 2.60 runs RunConfig.callbacks after its own, too late to set the env before its backend starts tpu_dist.
        job = TorchTrainer(train_fn, train_loop_config=dict(config), scaling_config=scaling, run_config=run_config)
        return _ray_compat.lead_callbacks_with(job, TorchTpuEnvCallback())
    raise ValueError(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
