"""A Ray Train backend for PyTorch/XLA with one worker per TPU chip.

Ray Train (2.60) reserves whole TPU slices and restarts whole worker groups, but its TPU path drives the
torch_tpu runtime: ``TorchTrainer`` switches to the ``tpu_dist`` process group when the config names no backend,
and ``_TorchBackend.on_start`` calls ``get_device()``, which needs torch_tpu on a TPU worker. So
:class:`XlaChipConfig` names its own backend, a direct :class:`ray.train.backend.Backend` subclass that, on every
worker and before the train function runs:

1. collects where Ray put the worker (slice name, host, chip) and gives it its XLA rank, the worker's
   ``CLOUD_TPU_TASK_ID`` plus ``slice_index * chips_per_slice`` (Ray Train's own world rank may differ);
2. sets the complete per-chip PJRT environment (:func:`tpuray.workloads.worker_env.chip_env`, ``MEGASCALE_*``
   across slices) and drops Ray's 1-chip ``TPU_HOST_BOUNDS``/``TPU_CHIPS_PER_HOST_BOUNDS``;
3. joins the process group: ``xla://`` on TPUs; on the emulated slice (``PJRT_DEVICE=CPU``), where XLA
   collectives across processes silently return the local value, a gloo group on CPU copies
   (:mod:`tpuray.workloads.portable`);
4. makes Ray Train's portable API (``get_device``, ``prepare_model``, ``prepare_data_loader``) mean this chip.

If any of that fails, the backend shuts the worker group down itself before raising: Ray 2.60 marks the group
started before it runs backends, and would otherwise leave the slice placement group reserved.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from ray.train.backend import Backend
from ray.train.torch import TorchConfig

# Ray Train V2's classes (what ray.train exports in 2.60); named directly so the type checker sees the same ones
from ray.train.v2.api.config import ScalingConfig

from tpuray.components.catalog.names import RAY_SLICE_NAME_LABEL, RAY_WORKER_ID_LABEL, TPU_MEGASCALE_PORT
from tpuray.components.catalog.runtimes import BACKENDS, RuntimeBackend
from tpuray.components.catalog.slice_labels import slice_from_labels
from tpuray.components.catalog.topology import GENERATIONS, TopologyError, TpuSlice
from tpuray.workloads import _ray_compat, compile_cache, frameworks, portable
from tpuray.workloads.placement import ChipAssignment, PlacementError, Seat, assign_chips
from tpuray.workloads.runtimes import require_runtime
from tpuray.workloads.worker_env import DEFAULT_BASE_PORT, RAY_SUBHOST_VARS, hostnames_from_env

if TYPE_CHECKING:
    import torch

__all__ = [
    "ChipInfo",
    "XlaChipConfig",
    "check_scaling_config",
    "chip",
    "mean_over_chips",
    "optimizer_step",
    "tpu_scaling_config",
]

Collective = Literal["xla", "gloo"]

# Cite: single-host pools cannot join a multislice, "Multislice only supports multi-host TPU slice node pools"
# (https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice).


def tpu_scaling_config(
    topology: str | TpuSlice, *, num_slices: int = 1, backend: RuntimeBackend = "xla", **kwargs: Any
) -> ScalingConfig:
    """Ray Train's ``ScalingConfig`` for ``num_slices`` whole slices of ``topology``, one worker per chip.

    ``topology`` is a slice spec such as ``"v5p:4x4x4"`` or ``"v6e:2x4:ct6e-standard-4t"``, or a
    :class:`TpuSlice`. Every worker requests ``{"TPU": 1}``; ``use_tpu``, ``topology`` and
    ``accelerator_type`` make Ray reserve whole slices (``ray.util.tpu.SlicePlacementGroup``). Ray pins only
    multi-host slices (by a head reservation on the pod type, then the slice name), so a single-host slice gets
    two smallest workarounds: the ``STRICT_PACK`` strategy (its chips share one VM) and a sliver of the
    ``accelerator_type:TPU-<GEN>`` resource Ray puts on TPU VMs (the right generation; ``label_selector`` is
    refused with ``use_tpu``). The backend then checks the pod type and topology the workers landed on.
    Other keyword arguments go to ``ScalingConfig`` (not ``num_workers``, ``use_tpu``, ``topology``,
    ``accelerator_type`` or ``resources_per_worker``).

    ``backend="torch_tpu"``: one worker per runtime device instead (two per chip on tpu7x: 16 workers for a
    ``tpu7x:2x2x2``), for Ray's own TorchTPU path. Ray sizes TPU requests by chip unless this process has
    ``RAY_TPU_RESOURCE_PER_CHIP`` set to the devices per chip (``ray/_private/accelerators/tpu.py``; a tpuray
    stack sets it on every Ray pod of a tpu7x TorchTPU stack); without it a per-device run is refused here.
    """
    s = TpuSlice.parse(topology) if isinstance(topology, str) else topology
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
    per_chip = s.spec.devices_per_chip if backend == "torch_tpu" else 1
    if per_chip > 1 and _ray_compat.tpu_resource_per_chip() != per_chip:
        raise ValueError(
            f"backend torch_tpu on {s}: a {s.generation} chip is {per_chip} devices, one worker each, but Ray counts "
            f"{_ray_compat.tpu_resource_per_chip()} TPU resource(s) per chip in this process: set "
            f"RAY_TPU_RESOURCE_PER_CHIP={per_chip} before Ray starts (the stack sets it on its Ray pods)"
        )
    workers_per_host = s.chips_per_host * per_chip
    if not isinstance(num_slices, int) or num_slices < 1:
        raise ValueError(f"num_slices must be a whole number of slices >= 1, got {num_slices!r}")
    if num_slices > 1 and not s.multi_host:
        raise ValueError(
            f"num_slices={num_slices}: {s} is a single-host slice and GKE Multislice only joins multi-host "
            "slices; use one slice, or a multi-host topology"
        )
    fixed = {"num_workers", "use_tpu", "topology", "accelerator_type", "resources_per_worker"} & kwargs.keys()
    if fixed:
        raise ValueError(f"tpu_scaling_config sets {sorted(fixed)} itself from the topology")
    if kwargs.get("use_gpu"):
        raise ValueError(USE_GPU_WITH_XLA)
    # A chip's share of its VM's CPUs: ray.util.tpu.get_tpu_worker_resources adds CPU: 1 to every bundle that
    # names none (one worker per VM), so per-chip workers would take chips_per_host CPUs per VM and leave none
    # for a Tune trial's own actor there (its slice group then stays PENDING); CPU: 0 is dropped by ScalingConfig.
    resources: dict[str, float] = {"TPU": 1, "CPU": 1 / workers_per_host}
    if not s.multi_host:
        kwargs.setdefault("placement_strategy", "STRICT_PACK")
    if not ray_pins_slice(s):
        resources[f"accelerator_type:{s.ray_accelerator_type}"] = GENERATION_PIN
    return ScalingConfig(
        num_workers=s.chips * per_chip * num_slices,
        use_tpu=True,
        topology=s.topology,
        accelerator_type=s.ray_accelerator_type,
        resources_per_worker=resources,
        **kwargs,
    )


USE_GPU_WITH_XLA = (
    "use_gpu=True with XlaChipConfig: TPU chips are not GPUs; drop use_gpu and build the ScalingConfig with "
    "tpu_scaling_config('<gen>:<topology>') (one worker per chip)"
)


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
    if per_worker != 1:
        raise ValueError(
            f"ScalingConfig.resources_per_worker['TPU'] = {per_worker} with XlaChipConfig: must be 1; {hint}"
        )
    topology, accelerator = scaling.topology, scaling.accelerator_type
    if not (topology and accelerator):
        return  # Ray itself requires both for more than one worker; one worker holds one chip
    gen = next((g.name for g in GENERATIONS if g.ray_accelerator_type == accelerator), None)
    if gen is None:
        known = ", ".join(g.ray_accelerator_type for g in GENERATIONS)
        raise ValueError(f"ScalingConfig.accelerator_type {accelerator!r}: not a TPU generation ({known}); {hint}")
    s = TpuSlice.parse(gen, topology)
    for field in ("num_workers", "min_workers"):
        n = getattr(scaling, field, None)
        if isinstance(n, int) and n % s.chips:
            raise ValueError(
                f"ScalingConfig.{field} = {n}: not a whole number of {s} slices; with XlaChipConfig it must be a "
                f"multiple of {s.chips} (one worker per chip); {hint}"
            )


GENERATION_PIN = 0.001
"""How much of a TPU VM's ``accelerator_type:TPU-<GEN>`` resource (1 per VM) a worker takes where Ray does not
pin the slice itself."""


def ray_pins_slice(s: TpuSlice) -> bool:
    """Whether Ray 2.60's ``SlicePlacementGroup`` pins ``s`` to one slice of its pod type: only slices it takes
    for multi-host. It reads the chips per VM from the topology alone (``get_chips_per_host``: 8 for a v5e/v6e
    ``2x4``), so a ``2x4`` on two 4-chip VMs counts as single-host and is not pinned; the backend then refuses
    workers that straddle two slices, and the generation sliver keeps them on the right TPU generation."""
    return s.multi_host and _ray_compat.chips_per_host(s.topology, s.spec.pod_type_prefix) < s.chips


@dataclass(frozen=True)
class ChipInfo:
    """Where this worker's chip sits in the job; :func:`chip` returns it inside the train function."""

    rank: int
    """The XLA rank: ``slice_index * chips_per_slice + CLOUD_TPU_TASK_ID``; also the process-group rank."""
    world_size: int
    """Chips in the job (all slices)."""
    chip: int
    """The chip's index on its host (``TPU_VISIBLE_CHIPS``)."""
    worker_id: int
    """The host's index within its slice (``TPU_WORKER_ID``)."""
    slice_index: int
    num_slices: int
    slice_name: str
    collective: Collective
    """``xla`` on TPUs; ``gloo`` on the emulated slice."""

    @property
    def device(self) -> torch.device:
        """This worker's XLA device (its chip)."""
        import torch_xla

        dev: torch.device = torch_xla.device()
        return dev


_CHIP: ChipInfo | None = None


def chip() -> ChipInfo:
    """This worker's chip, rank and slice; only inside a train function run with :class:`XlaChipConfig`."""
    if _CHIP is None:
        raise RuntimeError(
            "chip() is only available inside a TorchTrainer train function run with torch_config=XlaChipConfig()"
        )
    return _CHIP


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """Average gradients over all chips, then ``optimizer.step()`` (like ``torch_xla``'s ``xm.optimizer_step``).

    On TPUs the average is an XLA all-reduce; on the emulated slice it goes through gloo with CPU copies (an XLA
    all-reduce across CPU processes silently returns the local value, and gloo cannot read XLA tensors).
    """
    info = chip()
    if info.world_size > 1:
        if info.collective == "xla":
            import torch_xla.core.xla_model as xm

            xm.reduce_gradients(optimizer)
        else:
            _gloo_average(optimizer, info.world_size)
    optimizer.step()


def _gloo_average(optimizer: torch.optim.Optimizer, world: int) -> None:
    portable.gloo_average([p for g in optimizer.param_groups for p in g["params"] if p.requires_grad], world)


# ---- run on each worker (module-level so Ray pickles them by reference) -----------------------------------


def _seat(index: int) -> tuple[Seat, dict[str, str]]:
    import ray

    require_runtime("xla")  # a torch_tpu worker image fails here, naming the image target to use
    ctx = ray.get_runtime_context()
    labels = {str(k): str(v) for k, v in ctx.get_node_labels().items()}
    chips = ctx.get_accelerator_ids().get("TPU", [])
    if len(chips) != 1:
        raise PlacementError(f"a per-chip worker must hold exactly one TPU chip, got {chips}")
    seat = Seat(
        actor_index=index,
        slice_index=0,  # set by the driver once it knows every worker's slice
        slice_name=str(labels.get(RAY_SLICE_NAME_LABEL) or os.environ.get("TPU_NAME") or ctx.get_node_id()),
        worker_id=int(labels.get(RAY_WORKER_ID_LABEL, os.environ.get("TPU_WORKER_ID", "0"))),
        chip=int(chips[0]),
        address=str(ray.util.get_node_ip_address()),  # type: ignore[no-untyped-call]
        hostnames=tuple(hostnames_from_env(os.environ)),
    )
    return seat, labels


def _free_port() -> tuple[str, int]:
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        return str(ray.util.get_node_ip_address()), int(s.getsockname()[1])  # type: ignore[no-untyped-call]


def _apply(assignment: ChipAssignment) -> dict[str, str]:
    """Set the chip's environment in this worker process (before anything starts the XLA runtime)."""
    global _CHIP
    for key in RAY_SUBHOST_VARS:
        os.environ.pop(key, None)  # Ray's 1-chip defaults would describe a standalone chip
    os.environ.update(assignment.env)
    # A worker holding a TPU chip runs PyTorch/XLA on it: without PJRT_DEVICE torch_xla would pick the host CPU
    # when it finds no TPU, and the run would train there without a word. The emulation sets CPU explicitly.
    os.environ.setdefault("PJRT_DEVICE", "TPU")
    collective: Collective = "gloo" if os.environ["PJRT_DEVICE"].upper() == "CPU" else "xla"
    _CHIP = ChipInfo(
        rank=assignment.rank,
        world_size=assignment.world_size,
        chip=assignment.chip,
        worker_id=assignment.worker_id,
        slice_index=assignment.slice_index,
        num_slices=assignment.num_slices,
        slice_name=assignment.slice_name,
        collective=collective,
    )
    return dict(os.environ)


def _join(
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
    """A Ray Train worker's start: :func:`_join`, then what Transformers/Accelerate and Lightning read of the job
    (torchrun's variables from the Ray Train context, torch_xla's world)."""
    _join(master, timeout_s, tpu_slice, cache_dir)
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
    global _CHIP
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    frameworks.uninstall()
    portable.uninstall()
    _CHIP = None


# ---- the driver side -------------------------------------------------------------------------------------


def slice_of(labels: list[dict[str, str]], world: int) -> TpuSlice:
    """The slice shape the workers were placed on, from the Ray node labels each worker reports."""
    from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL, RAY_TOPOLOGY_LABEL

    shapes = {(lb.get(RAY_POD_TYPE_LABEL), lb.get(RAY_TOPOLOGY_LABEL)) for lb in labels}
    if len(shapes) != 1 or None in next(iter(shapes)):
        raise PlacementError(f"the workers are not on one TPU slice shape (pod type, topology): {sorted(shapes)}")
    slices = {lb.get(RAY_SLICE_NAME_LABEL) for lb in labels}
    hosts = {(lb.get(RAY_SLICE_NAME_LABEL), lb.get(RAY_WORKER_ID_LABEL)) for lb in labels}
    per_host = world // max(1, len(hosts))
    # a 2x4 slice is one 8-chip VM or two 4-chip VMs: the hosts Ray placed workers on decide
    try:
        s = slice_from_labels(labels[0], chips_per_host=per_host)
    except TopologyError as e:
        raise PlacementError(f"{world} workers on {len(hosts)} host(s): {e}; not one per chip") from None
    if world != s.chips * len(slices):
        raise PlacementError(f"{world} workers on {len(slices)} {s} slice(s) of {s.chips} chips: not one per chip")
    return s


class _XlaChipBackend(Backend):
    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        try:
            self._start(worker_group, backend_config)
        except BaseException:
            shutdown = getattr(worker_group, "shutdown", None)
            if shutdown is not None:
                shutdown()  # releases the slice placement group; Ray 2.60 would keep it reserved
            raise

    def _start(self, worker_group: Any, cfg: XlaChipConfig) -> None:
        import ray

        n = len(worker_group)
        # every worker at once (one round trip, not n): part of the time to the first step
        reported = ray.get([worker_group.execute_single_async(i, _seat, i) for i in range(n)])
        seats = [s for s, _ in reported]
        tpu_slice = slice_of([lb for _, lb in reported], n)
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
        seats = [
            Seat(s.actor_index, names.index(s.slice_name), s.slice_name, s.worker_id, s.chip, s.address, s.hostnames)
            for s in seats
        ]
        assignments = assign_chips(
            tpu_slice, len(names), seats, base_port=cfg.base_port, megascale_port=cfg.megascale_port
        )
        ray.get([worker_group.execute_single_async(a.actor_index, _apply, a) for a in assignments])
        master = worker_group.execute_single(assignments[0].actor_index, _free_port)
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
    chip 0 of slice 0's host 0 coordinates: :func:`~tpuray.workloads.worker_env.megascale_env`); ``timeout_s``:
    process-group timeout;
    ``compile_cache_dir``: the persistent compile cache's root (else the workers' ``TPURAY_COMPILE_CACHE_DIR``,
    which the stack sets; neither: no cache), one directory per key under it (:mod:`tpuray.workloads.compile_cache`).
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


def mean_over_chips(values: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of ``values`` over all chips, on the CPU (for metrics such as the loss)."""
    import torch

    info = chip()
    local = values.detach().to(torch.float64).cpu()
    if info.world_size == 1:
        return local
    if info.collective == "xla":
        import torch_xla.core.xla_model as xm

        summed = xm.all_reduce(xm.REDUCE_SUM, values.detach().to(info.device))
        assert isinstance(summed, torch.Tensor)
        return summed.cpu().to(torch.float64) / info.world_size
    import torch.distributed as dist

    dist.all_reduce(local)
    return local / info.world_size
