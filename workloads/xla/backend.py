"""A Ray Train backend for PyTorch/XLA with one worker per TPU chip.

Ray Train (2.60) reserves whole TPU slices and restarts whole worker groups, but its TPU path drives the
torch_tpu runtime: ``TorchTrainer`` switches to the ``tpu_dist`` process group when the config names no backend,
and ``_TorchBackend.on_start`` calls ``get_device()``, which needs torch_tpu on a TPU worker. So
:class:`XlaChipConfig` names its own backend, a direct :class:`ray.train.backend.Backend` subclass that, on every
worker and before the train function runs:

1. collects where Ray put the worker (slice name, host, chip) and gives it its XLA rank, the worker's
   ``CLOUD_TPU_TASK_ID`` plus ``slice_index * chips_per_slice`` (Ray Train's own world rank may differ);
2. sets the complete per-chip PJRT environment (:func:`tpuray.workloads.placement.worker_env.chip_env`, ``MEGASCALE_*``
   across slices) and drops Ray's 1-chip ``TPU_HOST_BOUNDS``/``TPU_CHIPS_PER_HOST_BOUNDS``;
3. joins the process group: ``xla://`` on TPUs; on the emulated slice (``PJRT_DEVICE=CPU``), where XLA
   collectives across processes silently return the local value, a gloo group on CPU copies
   (:mod:`tpuray.workloads.xla.portable`);
4. makes Ray Train's portable API (``get_device``, ``prepare_model``, ``prepare_data_loader``) mean this chip.

If any of that fails, the backend shuts the worker group down itself before raising: Ray 2.60 marks the group
started before it runs backends, and would otherwise leave the slice placement group reserved.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ray.train.backend import Backend
from ray.train.torch import TorchConfig

from tpuray.components.catalog.names import TPU_MEGASCALE_PORT
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.catalog.topology import GENERATIONS, TpuSlice
from tpuray.workloads import _ray_compat
from tpuray.workloads.api import compile_cache
from tpuray.workloads.api.scaling import USE_GPU_WITH_XLA
from tpuray.workloads.api.worker import ChipInfo, Collective, bind, chip
from tpuray.workloads.placement.probe import free_port, probe
from tpuray.workloads.placement.seats import ChipAssignment, PlacementError, Seat, assign_chips, slice_of
from tpuray.workloads.placement.worker_env import DEFAULT_BASE_PORT, MEGASCALE_PREFIX, RAY_SUBHOST_VARS
from tpuray.workloads.xla import frameworks, portable
from tpuray.workloads.xla.runtime import XlaRuntime

__all__ = ["XlaChipConfig", "apply_assignment", "check_scaling_config", "join_process_group"]


def check_scaling_config(backend_config: Any, scaling: Any) -> None:
    """Refuse a ``ScalingConfig`` that :class:`XlaChipConfig` cannot run, naming the field and the valid form.

    Runs as ``TorchTrainer(...)`` is constructed (:func:`tpuray.workloads._ray_compat.check_trainer_configs`),
    so a bad config never starts a controller or reserves a placement group: a run that asks for GPUs would
    otherwise wait for them, time out and retry without end (``FailureConfig.controller_failure_limit``
    defaults to -1 in Ray 2.60). Other backends' configs pass through untouched.
    """
    if not isinstance(backend_config, XlaChipConfig):
        return
    hint = "build it with tpu_scaling_config('<gen>:<topology>', num_slices=N) (one worker per chip)"
    if getattr(scaling, "use_gpu", False):
        raise ValueError(USE_GPU_WITH_XLA)
    if not getattr(scaling, "use_tpu", False):
        raise ValueError(f"ScalingConfig.use_tpu is False with XlaChipConfig: its workers run on TPU chips; {hint}")
    per_worker = (scaling.resources_per_worker or {}).get("TPU", 1)
    topology, accelerator = scaling.topology, scaling.accelerator_type
    if not (topology and accelerator):
        # Ray itself requires both for more than one worker: a lone worker is one chip's
        if per_worker != 1:
            raise ValueError(
                f"ScalingConfig.resources_per_worker['TPU'] = {per_worker} with XlaChipConfig: must be 1; {hint}"
            )
        return
    gen = next((g.name for g in GENERATIONS if g.ray_accelerator_type == accelerator), None)
    if gen is None:
        known = ", ".join(g.ray_accelerator_type for g in GENERATIONS)
        raise ValueError(f"ScalingConfig.accelerator_type {accelerator!r}: not a TPU generation ({known}); {hint}")
    s = TpuSlice.parse(gen, topology)
    runtime = RUNTIMES["xla"]
    tpu, per_slice = runtime.tpu_resource_per_worker(s), runtime.workers_per_slice(s)
    if per_worker != tpu:
        raise ValueError(
            f"ScalingConfig.resources_per_worker['TPU'] = {per_worker} with XlaChipConfig: must be {tpu}; {hint}"
        )
    for field in ("num_workers", "min_workers", "max_workers"):
        n = getattr(scaling, field, None)
        if isinstance(n, int) and n % per_slice:
            raise ValueError(
                f"ScalingConfig.{field} = {n}: not a whole number of {s} slices; with XlaChipConfig it must be a "
                f"multiple of {per_slice} (one worker per chip); {hint}"
            )


# ---- run on each worker (module-level so Ray pickles them by reference) -----------------------------------


def apply_assignment(assignment: ChipAssignment) -> dict[str, str]:
    """Set the chip's environment in this worker process (before anything starts the XLA runtime).

    Everything comes from the live worker group, at every start (a resize restarts the group): the ``MEGASCALE_*``
    a pod or an earlier start left are dropped first, so a replacement pod whose env still says three slices, or
    a group shrunk to one slice (which sets none), never reaches libtpu with stale values. Ray fixed the same for
    JAX by recomputing them from the live group (ray-project/ray#62893)."""
    for key in RAY_SUBHOST_VARS:
        os.environ.pop(key, None)  # Ray's 1-chip defaults would describe a standalone chip
    for key in [k for k in os.environ if k.startswith(MEGASCALE_PREFIX)]:
        os.environ.pop(key)
    os.environ.update(assignment.env)
    # A worker holding a TPU chip runs PyTorch/XLA on it: without PJRT_DEVICE torch_xla would pick the host CPU
    # when it finds no TPU, and the run would train there without a word. The emulation sets CPU explicitly.
    os.environ.setdefault("PJRT_DEVICE", "TPU")
    collective: Collective = "gloo" if os.environ["PJRT_DEVICE"].upper() == "CPU" else "xla"
    info = ChipInfo(
        rank=assignment.rank,
        world_size=assignment.world_size,
        chip=assignment.chip,
        worker_id=assignment.worker_id,
        slice_index=assignment.slice_index,
        num_slices=assignment.num_slices,
        slice_name=assignment.slice_name,
        collective=collective,
    )
    bind(XlaRuntime(info), info)
    return dict(os.environ)


def join_process_group(
    master: tuple[str, int], timeout_s: float, tpu_slice: TpuSlice | None = None, cache_dir: str | None = None
) -> None:
    import torch.distributed as dist

    info = chip()
    if tpu_slice is not None:  # before anything computes: the persistent cache must be set first
        compile_cache.enable_xla(info.rank, tpu_slice, info.num_slices, cache_dir)
    portable.install(os.environ["PJRT_DEVICE"])  # Ray Train's get_device()/prepare_model/... now mean this chip
    if info.world_size > 1 and not dist.is_initialized():
        _init_process_group(info, master, timeout_s)


def _start(master: tuple[str, int], timeout_s: float, tpu_slice: TpuSlice, cache_dir: str | None) -> None:
    """A Ray Train worker's start: :func:`join_process_group`, then what Transformers/Accelerate and Lightning read of
    the job (torchrun's variables from the Ray Train context, torch_xla's world)."""
    join_process_group(master, timeout_s, tpu_slice, cache_dir)
    info = chip()
    emulated = info.collective == "gloo"
    frameworks.install(info.rank, info.world_size, info.chip, tpu_slice.chips_per_host, emulated=emulated)


def _init_process_group(info: ChipInfo, master: tuple[str, int], timeout_s: float) -> None:
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if info.collective == "gloo":
        dist.init_process_group(
            portable.register_emulated_backend(),
            init_method=f"tcp://{master[0]}:{master[1]}",
            rank=info.rank,
            world_size=info.world_size,
            timeout=timeout,
        )
    else:
        import torch_xla.distributed.xla_backend  # noqa: F401  # registers the "xla" process group backend

        dist.init_process_group("xla", init_method="xla://", timeout=timeout)


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    frameworks.uninstall()
    portable.uninstall()
    bind(None)


# ---- the driver side -------------------------------------------------------------------------------------


class _XlaChipBackend(Backend):
    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        with _ray_compat.released_on_failure(worker_group):
            self._start(worker_group, backend_config)

    def _start(self, worker_group: Any, cfg: XlaChipConfig) -> None:
        import ray

        n = len(worker_group)
        # every worker at once (one round trip, not n): part of the time to the first step
        seats: list[Seat] = ray.get([worker_group.execute_single_async(i, probe, i, "xla") for i in range(n)])
        tpu_slice = slice_of(seats)
        asked = _ray_compat.asked_scaling_config(worker_group)
        if asked is not None:
            check_scaling_config(cfg, asked)  # again, in case the trainer's construction hook did not run
        topology, accelerator = getattr(asked, "topology", None), getattr(asked, "accelerator_type", None)
        if topology and accelerator and (topology, accelerator) != (tpu_slice.topology, tpu_slice.ray_accelerator_type):
            raise PlacementError(
                f"the run asked for topology {topology} of {accelerator} but Ray placed its workers on "
                f"{tpu_slice} ({tpu_slice.pod_type})"
            )
        names = sorted({s.slice_name for s in seats})  # slice order as Ray Train's own (TPU_NAME) sort
        seats = [dataclasses.replace(s, slice_index=names.index(s.slice_name)) for s in seats]
        assignments = assign_chips(
            tpu_slice, len(names), seats, base_port=cfg.base_port, megascale_port=cfg.megascale_port
        )
        ray.get([worker_group.execute_single_async(a.actor_index, apply_assignment, a) for a in assignments])
        master = worker_group.execute_single(assignments[0].actor_index, free_port)
        ray.get(
            [
                worker_group.execute_single_async(
                    a.actor_index, _start, master, cfg.timeout_s, tpu_slice, cfg.compile_cache_dir
                )
                for a in assignments
            ]
        )

    def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
        worker_group.execute(_leave)


@dataclass
class XlaChipConfig(TorchConfig):
    """Ray Train config for PyTorch/XLA with one worker per TPU chip: pass as ``TorchTrainer(torch_config=...)``
    together with :func:`tpu_scaling_config`.

    ``base_port``: first TPU client port on each host (chip ``c`` uses ``base_port + c``);
    ``megascale_port``: first multislice port on each host (chip ``c``'s process binds ``megascale_port + c``, and
    chip 0 of slice 0's host 0 coordinates: :func:`~tpuray.workloads.placement.worker_env.megascale_env`);
    ``timeout_s``:
    process-group timeout;
    ``compile_cache_dir``: the persistent compile cache's root (else the workers' ``TPURAY_COMPILE_CACHE_DIR``,
    which the stack sets; neither: no cache), one directory per key under it
    (:mod:`tpuray.workloads.api.compile_cache`).
    """

    backend: str = "xla"
    base_port: int = DEFAULT_BASE_PORT
    megascale_port: int = TPU_MEGASCALE_PORT
    compile_cache_dir: str | None = None

    def __post_init__(self) -> None:
        # a TorchTrainer built with this config checks its ScalingConfig as it is constructed
        _ray_compat.check_trainer_configs(check_scaling_config)

    @property
    def backend_cls(self) -> type[Backend]:
        return _XlaChipBackend
