"""Ray Train's ``ScalingConfig`` for whole TPU slices: one worker per chip (PyTorch/XLA) or per runtime device
(TorchTPU), whole slices only, pinned to the slice's generation where Ray does not pin the slice itself.

Cite: single-host pools cannot join a multislice, "Multislice only supports multi-host TPU slice node pools"
(https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice).
"""

from __future__ import annotations

from typing import Any

# Ray Train V2's classes (what ray.train exports in 2.60); named directly so the type checker sees the same ones
from ray.train.v2.api.config import ScalingConfig

from tpuray.components.catalog.runtimes import BACKENDS, RUNTIMES, RuntimeBackend
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads import _ray_compat

__all__ = ["GENERATION_PIN", "USE_GPU_WITH_XLA", "ray_pins_slice", "tpu_scaling_config"]


def tpu_scaling_config(
    topology: str | TpuSlice,
    *,
    num_slices: int = 1,
    min_slices: int | None = None,
    backend: RuntimeBackend = "xla",
    **kwargs: Any,
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

    ``min_slices``: train elastically between ``min_slices`` and ``num_slices`` whole slices (a stack's
    ``workload.elastic``): Ray Train's ``ScalingConfig(num_workers=(min_workers, max_workers))``, both bounds
    multiples of a slice's workers as Ray 2.60's TPU check requires (``ray/train/v2/api/config.py``), and its
    ``ElasticScalingPolicy`` then restarts the worker group on the intact slices it finds, checking every
    ``elastic_resize_monitor_interval_s`` (a keyword argument here) whether lost slices came back.
    """
    s = TpuSlice.parse(topology) if isinstance(topology, str) else topology
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: valid choices are {', '.join(BACKENDS)}")
    runtime = RUNTIMES[backend]
    per_chip = runtime.ray_tpu_per_chip(s)
    if per_chip > 1 and _ray_compat.tpu_resource_per_chip() != per_chip:
        raise ValueError(
            f"backend torch_tpu on {s}: a {s.generation} chip is {per_chip} devices, one worker each, but Ray counts "
            f"{_ray_compat.tpu_resource_per_chip()} TPU resource(s) per chip in this process: set "
            f"RAY_TPU_RESOURCE_PER_CHIP={per_chip} before Ray starts (the stack sets it on its Ray pods)"
        )
    workers_per_host = runtime.workers_per_host(s)
    if not isinstance(num_slices, int) or num_slices < 1:
        raise ValueError(f"num_slices must be a whole number of slices >= 1, got {num_slices!r}")
    if min_slices is not None and (
        isinstance(min_slices, bool) or not isinstance(min_slices, int) or not 1 <= min_slices < num_slices
    ):
        raise ValueError(
            f"min_slices={min_slices!r}: elastic bounds are whole slices; valid: an integer from 1 to num_slices - 1 "
            f"({num_slices - 1}), or None for a fixed size"
        )
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
    resources: dict[str, float] = {"TPU": runtime.tpu_resource_per_worker(s), "CPU": 1 / workers_per_host}
    if not s.multi_host:
        kwargs.setdefault("placement_strategy", "STRICT_PACK")
    if not ray_pins_slice(s):
        resources[f"accelerator_type:{s.ray_accelerator_type}"] = GENERATION_PIN
    per_slice = runtime.workers_per_slice(s)
    workers: int | tuple[int, int] = per_slice * num_slices
    if min_slices is not None:
        workers = (per_slice * min_slices, per_slice * num_slices)
    return ScalingConfig(
        num_workers=workers,
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


GENERATION_PIN = 0.001
"""How much of a TPU VM's ``accelerator_type:TPU-<GEN>`` resource (1 per VM) a worker takes where Ray does not
pin the slice itself."""


def ray_pins_slice(s: TpuSlice) -> bool:
    """Whether Ray 2.60's ``SlicePlacementGroup`` pins ``s`` to one slice of its pod type: only slices it takes
    for multi-host. It reads the chips per VM from the topology alone (``get_chips_per_host``: 8 for a v5e/v6e
    ``2x4``), so a ``2x4`` on two 4-chip VMs counts as single-host and is not pinned; the backend then refuses
    workers that straddle two slices, and the generation sliver keeps them on the right TPU generation."""
    return s.multi_host and _ray_compat.chips_per_host(s.topology, s.spec.pod_type_prefix) < s.chips
