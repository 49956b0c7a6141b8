"""TorchTPU (``torch_tpu``) through Ray Train's own TPU path, with nothing of tpuray in the user's script.

Ray 2.60 runs ``TorchTrainer`` with ``ScalingConfig(use_tpu=True, topology=..., accelerator_type=...,
resources_per_worker={"TPU": 1})`` on the ``tpu_dist`` process group, one worker per runtime device
(``ray/train/torch/config.py``), and sets ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``, ``MASTER_*`` and, across slices,
``MEGASCALE_*``. It leaves unset what torch_tpu needs to build the slice: ``TORCH_TPU_TOPOLOGY`` and
``TORCH_TPU_SLICEBUILDER_ADDRESSES`` (torch_tpu's own ``set_tpu_launch_env`` derives them only in a launcher's
parent process, which Ray has not). No pod template can hold the address list either: its entry ``r`` must be
rank ``r``'s own host, and Ray decides the ranks only once the workers exist.

:class:`TorchTpuEnvCallback` fills the gap. The stack names it in ``RAY_TRAIN_CALLBACKS`` on every Ray pod, head
and TPU workers (Ray Train V2 instantiates the callbacks that variable names for every trainer, ahead of its own, in
the process that builds the trainer: the job's driver, which Ray runs on the head when the job asks for no
resources), so a script written against Ray's documented TorchTPU API gets the env with no tpuray import, however
it is submitted; ``tpuray.workloads.train``'s
``--backend torch_tpu`` passes the same callback itself. Once Ray has given the workers their ranks, and before its
backend creates the process group, the callback asks each worker where it runs and sets, on every worker of each
slice, the env of :func:`tpuray.workloads.placement.worker_env.torch_tpu_env`, and TorchTPU's tier-3 compile cache root
under the stack's cache key (:func:`tpuray.workloads.api.compile_cache.enable_torch_tpu`). What follows from the slice's
shape alone is kept where already set, as ``set_tpu_launch_env`` keeps it; what depends on which workers are live
(the slice-builder address list, ``MEGASCALE_*``) comes from the live group at every start, so a resized elastic
group never starts on what a pod carried.

torch_tpu has no CPU mode (it registers its device only when it finds a TPU): on an emulated host the callback
installs the stand-in (:mod:`tpuray.workloads.emulation.torch_tpu_standin`) in each worker, and says once what it is
not. The env is checked here against torch_tpu 0.2.0's own launcher code (``tests/test_torch_tpu_launch_env.py``,
``tests/workloads/torch_tpu/test_tpuray_env_matches_torch_tpu.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import EMULATED_SLICE_ENV, TORCH_TPU_ENV_CALLBACK
from tpuray.components.catalog.runtime_ports import torch_tpu_coordinator_port
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.catalog.slice_labels import slice_from_labels
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.workloads import _ray_compat
from tpuray.workloads.api.worker import bind
from tpuray.workloads.placement.probe import probe
from tpuray.workloads.placement.seats import PlacementError, Seat, slice_of
from tpuray.workloads.placement.worker_env import MEGASCALE_PREFIX, DeviceSeat, torch_tpu_env
from tpuray.workloads.torch_tpu.runtime import TorchTpuRuntime

__all__ = ["CALLBACK_PATH", "TorchTpuEnvCallback", "slice_envs"]

log = logging.getLogger(__name__)

CALLBACK_PATH = TORCH_TPU_ENV_CALLBACK
"""What the stack puts in ``RAY_TRAIN_CALLBACKS`` on every Ray pod of a ``backend: torch_tpu`` stack."""

LIVE_GROUP_KEYS = frozenset({"TORCH_TPU_SLICEBUILDER_ADDRESSES"})
"""What :func:`~tpuray.workloads.placement.worker_env.torch_tpu_env` derives from the live workers' hosts: always
set; the rest follows from the slice's shape alone, and a value the pod or user set is kept."""


def _apply(env: dict[str, str], first_on_host: bool = True, seat: tuple[TpuSlice, int, int] | None = None) -> bool:
    """Run on each worker: set what is unset, and bind TorchTPU's runtime for the train function's per-worker API.
    On an emulated host (``seat``: the worker's slice, host and device there) it installs the stand-in first
    (:mod:`tpuray.workloads.emulation.torch_tpu_standin`); returns whether this worker runs it."""
    # What depends on which workers are live comes from the live group at every start (an elastic resize restarts
    # the group), never from a pod: a replacement pod can still carry the ``MEGASCALE_*`` of a larger job, and Ray
    # 2.60 writes them only across slices, after this (Ray recomputes them for JAX, ray-project/ray#62893).
    for key in [k for k in os.environ if k.startswith(MEGASCALE_PREFIX)]:
        os.environ.pop(key)
    for key, value in env.items():
        if key in LIVE_GROUP_KEYS:
            os.environ[key] = value
        else:
            os.environ.setdefault(key, value)
    standin = False
    if os.environ.get(EMULATED_SLICE_ENV) and seat is not None:
        from tpuray.workloads.emulation import standin_mesh, torch_tpu_standin

        standin = torch_tpu_standin.install()
        if standin:
            standin_mesh.set_seat(*seat)
    bind(TorchTpuRuntime(first_on_host=first_on_host))
    return standin


def _enable_cache(rank: int, tpu_slice: TpuSlice, num_slices: int) -> str | None:
    """Run on each worker: TorchTPU's tier-3 compile cache root under the stack's key (unless set already).

    torch_tpu 0.2.0 reads ``TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT`` once per process, on the first compile that
    goes through its compilation cache, and keeps the value (in ``libpywrap_*_common.so``: ``GetEnvOnce`` of
    ``kTorchTpuTier3CompilationCacheRootEnvVar``, called from ``GetTier3CacheRootDir`` and
    ``CompilationCache::GetFromTier3OrCompile``; ``EnsureTier3CacheDirExistsOnceOrDie`` then creates the directory
    through tsl's file systems, GCS among them). So it is set here, before Ray's backend starts the process group
    and before any train function (a user's too) compiles anything."""
    from tpuray.workloads.api import compile_cache

    use = compile_cache.enable_torch_tpu(rank, tpu_slice, num_slices)
    return use.directory if use is not None else None


@dataclass(frozen=True)
class _RankPlan:
    """What one worker gets: its slice's TorchTPU env, the slice's shape, and its device on its host."""

    env: dict[str, str]
    tpu_slice: TpuSlice
    device: int
    """Its place among its host's ranks, in rank order: Ray's ``LOCAL_RANK`` where each host has its own IP (a GKE
    pod), which Ray groups ranks by; device 0 is the host's first rank."""


def _plan(seats: Sequence[Seat]) -> list[_RankPlan]:
    """Each worker's plan, indexed like ``seats`` (world-rank order); each slice's shape read once."""
    by_slice: dict[str, list[int]] = {}
    for i, s in enumerate(seats):
        by_slice.setdefault(s.slice_name, []).append(i)
    out: list[_RankPlan | None] = [None] * len(seats)
    for name, members in by_slice.items():
        group = [seats[i] for i in members]
        tpu_slice = _slice_shape(group)
        on_host: Counter[int] = Counter()
        devices: list[int] = []
        for s in group:
            devices.append(on_host[s.worker_id])
            on_host[s.worker_id] += 1
        try:
            env = torch_tpu_env(
                tpu_slice, [DeviceSeat(s.host, s.worker_id, d) for s, d in zip(group, devices, strict=True)]
            )
        except ValueError as e:
            raise PlacementError(f"slice {name}: {e}; {_one_per_device(group)}") from None
        for i, d in zip(members, devices, strict=True):
            out[i] = _RankPlan(env, tpu_slice, d)
    return [r for r in out if r is not None]


def slice_envs(seats: Sequence[Seat]) -> list[dict[str, str]]:
    """The TorchTPU env of every worker, indexed like ``seats`` (which come in world-rank order): each slice's
    workers share one env, the address list in the order of their ranks.

    Raises :class:`PlacementError` when a slice's workers are not one per device of a whole slice.
    """
    return [r.env for r in _plan(seats)]


def _slice_shape(group: Sequence[Seat]) -> TpuSlice:
    """One slice's shape from its workers (:func:`~tpuray.workloads.placement.seats.slice_of`), one per device."""
    per_chip = 1
    with contextlib.suppress(TopologyError):  # labels without a valid shape are slice_of's to refuse
        per_chip = RUNTIMES["torch_tpu"].devices_per_chip(slice_from_labels(dict(group[0].labels)))
    try:
        return slice_of(group, per_chip)
    except PlacementError as e:
        raise PlacementError(f"slice {group[0].slice_name}: {e}; {_one_per_device(group)}") from None


def _one_per_device(group: Sequence[Seat]) -> str:
    """The fix for a slice whose workers are not one per device, in the labels' own shape."""
    try:
        s = slice_from_labels(dict(group[0].labels))
    except TopologyError:
        return "TorchTPU runs one worker per device of a whole slice"
    return (
        f"TorchTPU runs one worker per device, {s.devices} on a {s} slice "
        f"(ScalingConfig(use_tpu=True, topology={s.topology!r}, resources_per_worker={{'TPU': 1}}))"
    )


class TorchTpuEnvCallback(_ray_compat.worker_group_callback_base()):  # type: ignore[misc]
    """Sets the TorchTPU env on every TPU worker before Ray's ``tpu_dist`` process group starts (see the module).

    Across slices it also points Ray's ``MEGASCALE_COORDINATOR_ADDRESS`` at the port torch_tpu's coordinator listens
    on, rank 0's ``MEGASCALE_PORT`` after torch_tpu's own overwrite
    (:func:`~tpuray.components.catalog.runtime_ports.torch_tpu_coordinator_port`, 8080), where Ray 2.60 would name
    8081, rank 0's debug port by then. Ray writes the address into every worker after this callback, overwriting what
    a worker's env holds, so the port is given to Ray itself, in the controller, for the start
    (:func:`tpuray.workloads._ray_compat.megascale_coordinator_port`).

    If the start then fails (torch_tpu cannot start its runtime, the env is refused), the callback shuts the worker
    group down: Ray 2.60 marks the group started before its backend runs, and would keep the slice's placement
    group reserved, paid slices included, until the job ends.
    """

    _group: Any = None
    _start: contextlib.ExitStack | None = None

    @contextmanager
    def on_worker_group_start(self) -> Iterator[None]:
        self._group = None
        self._start = contextlib.ExitStack()
        try:
            with self._start:
                yield
        except BaseException:
            shutdown = getattr(self._group, "shutdown", None)
            if shutdown is not None:
                shutdown()  # releases the slice placement group
            raise
        finally:
            self._group = None
            self._start = None

    def after_worker_group_start(self, worker_group: Any) -> None:
        import ray

        if not worker_group.get_resources_per_worker().get("TPU", 0):
            return  # not a TPU run
        if _ray_compat.asked_process_group(worker_group) not in (None, RUNTIMES["torch_tpu"].process_group):
            return  # a TPU run of another runtime (PyTorch/XLA's XlaChipConfig), where a stack's pods name this too
        self._group = worker_group
        n = len(worker_group)
        seats: list[Seat] = ray.get([worker_group.execute_single_async(i, probe, i, "torch_tpu") for i in range(n)])
        plans = _plan(seats)
        standins = ray.get(
            [
                worker_group.execute_single_async(i, _apply, r.env, r.device == 0, (r.tpu_slice, s.worker_id, r.device))
                for i, (s, r) in enumerate(zip(seats, plans, strict=True))
            ]
        )
        if any(standins):
            from tpuray.workloads.emulation.torch_tpu_standin import NOTICE

            log.warning(NOTICE)  # once per run, in the driver
        slices = len({s.slice_name for s in seats})
        if slices > 1 and self._start is not None:
            self._start.enter_context(_ray_compat.megascale_coordinator_port(torch_tpu_coordinator_port()))
        ray.get(
            [
                worker_group.execute_single_async(i, _enable_cache, s.actor_index, r.tpu_slice, slices)
                for i, (s, r) in enumerate(zip(seats, plans, strict=True))
            ]
        )
