"""Chip assignment: which per-chip worker is which XLA rank, on which slice, host and chip, with which env.

Pure functions over plain data (what each worker reports about where Ray put it, and ``ray.nodes()``-shaped
dicts), so they are tested without a cluster. The Ray Train backend (:mod:`tpuray.workloads.xla.backend`) collects
the seats from its workers and applies the result.

The rules:

- one worker per chip; a job is a whole number of slices and never straddles two (a data-parallel replica
  is one slice, joined to the others through the ``MEGASCALE_*`` coordinator variables);
- within a slice, a worker's rank follows torch_xla's ``CLOUD_TPU_TASK_ID`` (host-major, then chip), so
  ``rank = slice_index * chips_per_slice + task_id``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.names import (
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
    TPU_MEGASCALE_PORT,
)
from tpuray.components.catalog.slice_labels import slice_from_labels
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.workloads.placement.worker_env import DEFAULT_BASE_PORT, chip_env, megascale_env, task_id

__all__ = [
    "ChipAssignment",
    "PlacementError",
    "Seat",
    "SliceInfo",
    "assign_chips",
    "cluster_slices",
    "describe_slices",
    "slice_of",
    "slice_of_cluster",
    "slices_for_job",
]


class PlacementError(RuntimeError):
    """The job does not fit the cluster, or Ray placed workers in a way that breaks the one-per-chip rule."""


@dataclass(frozen=True)
class Seat:
    """Where Ray put one worker, as the worker reports it from inside its process
    (:func:`tpuray.workloads.placement.probe.probe`): the one seat record of every runtime."""

    actor_index: int
    """Index of the worker in Ray Train's worker group (its world rank there)."""
    slice_index: int
    """Which reserved slice the worker was placed in (0 for the first slice)."""
    slice_name: str
    """``ray.io/tpu-slice-name`` of the worker's node (a single-host slice without one: the node id)."""
    worker_id: int
    """``ray.io/tpu-worker-id`` of the worker's node: the host's index within the slice."""
    chip: int
    """The chip Ray assigned to a per-chip worker (its ``TPU`` accelerator id); -1 where the runtime numbers its
    workers' devices itself (TorchTPU: a rank's device is its place among its host's ranks)."""
    address: str
    """The node's IP address."""
    hostnames: tuple[str, ...] = ()
    """``TPU_WORKER_HOSTNAMES`` as the worker sees it (the GKE TPU webhook sets it on multi-host pods)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The Ray node labels of the worker's node (``ray.io/tpu-*``)."""

    @property
    def host(self) -> str:
        """The host's address as the other hosts reach it: its ``TPU_WORKER_HOSTNAMES`` entry (the webhook's DNS
        name, which torch_tpu's own launcher lists), else the node's IP."""
        return self.hostnames[self.worker_id] if self.worker_id < len(self.hostnames) else self.address


@dataclass(frozen=True)
class ChipAssignment:
    """One worker's chip and XLA rank in the job, and the environment it applies before the TPU runtime starts."""

    actor_index: int
    rank: int
    world_size: int
    slice_index: int
    num_slices: int
    slice_name: str
    worker_id: int
    chip: int
    env: Mapping[str, str] = field(default_factory=dict)


def slices_for_job(tpu_slice: TpuSlice, chips: int | None, num_slices: int | None, available: int) -> int:
    """How many whole slices a job takes.

    ``chips`` (total chips wanted) and ``num_slices`` are alternatives; with neither, one slice. A job that is
    not a whole number of slices, or needs more slices than the ``available`` intact ones, is refused with a
    :class:`PlacementError` that says why and what would fit.
    """
    per = tpu_slice.chips
    if chips is not None and num_slices is not None and chips != num_slices * per:
        raise PlacementError(f"--chips {chips} and --num-slices {num_slices} disagree: {num_slices} x {per} chips")
    if chips is not None:
        if chips <= 0 or chips % per:
            raise PlacementError(
                f"a job of {chips} chips would straddle {tpu_slice} slices of {per} chips each; jobs take whole "
                f"slices: ask for a multiple of {per} chips"
            )
        want = chips // per
    else:
        want = 1 if num_slices is None else num_slices
    if want < 1:
        raise PlacementError(f"a job needs at least one slice, got {want}")
    if want > available:
        raise PlacementError(
            f"the job needs {want} {tpu_slice} slice(s) ({want * per} chips) but the cluster has {available} "
            f"intact idle one(s) ({available * per} chips)"
        )
    return want


@dataclass(frozen=True)
class SliceInfo:
    """One TPU slice as Ray's node labels and resources describe it."""

    name: str
    pod_type: str
    topology: str
    chips: int
    """Sum of the ``TPU`` resource of the slice's alive nodes."""
    worker_ids: tuple[int, ...]


def cluster_slices(nodes: Iterable[Mapping[str, Any]]) -> list[SliceInfo]:
    """Every TPU slice of a cluster, from ``ray.nodes()``-shaped dicts (alive nodes with a ``TPU`` resource)."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for node in nodes:
        resources = node.get("Resources") or {}
        if not node.get("Alive") or resources.get("TPU", 0) <= 0:
            continue
        labels = node.get("Labels") or {}
        groups[labels.get(RAY_SLICE_NAME_LABEL) or str(node.get("NodeID"))].append(node)
    out = []
    for name, members in sorted(groups.items()):
        labels = [m.get("Labels") or {} for m in members]
        out.append(
            SliceInfo(
                name=name,
                pod_type=str(labels[0].get(RAY_POD_TYPE_LABEL, "?")),
                topology=str(labels[0].get(RAY_TOPOLOGY_LABEL, "?")),
                chips=int(sum((m.get("Resources") or {}).get("TPU", 0) for m in members)),
                worker_ids=tuple(sorted(int(lb.get(RAY_WORKER_ID_LABEL, 0)) for lb in labels)),
            )
        )
    return out


def describe_slices(slices: Sequence[SliceInfo]) -> str:
    """A short human summary, e.g. ``2 x v5litepod-16 (4x4), 1 x v6e-4 (2x2)``; ``no TPU slices`` if empty."""
    if not slices:
        return "no TPU slices"
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for s in slices:
        counts[(s.pod_type, s.topology)] += 1
    return ", ".join(f"{n} x {pod} ({topo})" for (pod, topo), n in sorted(counts.items()))


def _slice_hostnames(tpu_slice: TpuSlice, seats: Sequence[Seat]) -> list[str]:
    """The slice's hosts in worker-id order: the webhook's ``TPU_WORKER_HOSTNAMES``, else the nodes' addresses."""
    reported = {s.hostnames for s in seats if s.hostnames}
    if len(reported) > 1:
        raise PlacementError(f"workers of slice {seats[0].slice_name!r} disagree on TPU_WORKER_HOSTNAMES: {reported}")
    if reported:
        names = list(next(iter(reported)))
        if len(names) != tpu_slice.hosts:
            raise PlacementError(
                f"TPU_WORKER_HOSTNAMES lists {len(names)} hosts but {tpu_slice} has {tpu_slice.hosts}: {names}"
            )
        return names
    by_worker: dict[int, set[str]] = defaultdict(set)
    for s in seats:
        by_worker[s.worker_id].add(s.address)
    for wid, addrs in by_worker.items():
        if len(addrs) > 1:
            raise PlacementError(f"host {wid} of slice {seats[0].slice_name!r} has several addresses: {sorted(addrs)}")
    return [next(iter(by_worker[w])) for w in sorted(by_worker)] if tpu_slice.multi_host else []


def assign_chips(
    tpu_slice: TpuSlice,
    num_slices: int,
    seats: Sequence[Seat],
    *,
    base_port: int = DEFAULT_BASE_PORT,
    megascale_port: int = TPU_MEGASCALE_PORT,
) -> list[ChipAssignment]:
    """Ranks and PJRT environments for workers that Ray placed at ``seats``, ordered by rank.

    Checks that every reserved slice got exactly one worker per chip on hosts ``0..hosts-1`` of one Ray slice,
    and that no Ray slice serves two reservations; raises :class:`PlacementError` otherwise. With more than
    one slice each worker also gets the ``MEGASCALE_*`` variables
    (:func:`~tpuray.workloads.placement.worker_env.megascale_env`):
    slice 0's host 0 coordinates, and each chip's process has a ``MEGASCALE_PORT`` of its own.
    """
    per_slice: dict[int, list[Seat]] = defaultdict(list)
    for s in seats:
        per_slice[s.slice_index].append(s)
    if sorted(per_slice) != list(range(num_slices)):
        raise PlacementError(f"expected workers in slices 0..{num_slices - 1}, got slices {sorted(per_slice)}")
    names = {i: {s.slice_name for s in group} for i, group in per_slice.items()}
    for i, ns in names.items():
        if len(ns) != 1:
            raise PlacementError(f"reservation {i} straddles Ray slices {sorted(ns)}")
    owners: dict[str, int] = {}
    for i, ns in sorted(names.items()):
        (name,) = ns
        if name in owners:
            raise PlacementError(f"Ray slice {name!r} serves reservations {owners[name]} and {i}")
        owners[name] = i

    want = {(w, c) for w in range(tpu_slice.hosts) for c in range(tpu_slice.chips_per_host)}
    hostnames: dict[int, list[str]] = {}
    for i, group in per_slice.items():
        got = [(s.worker_id, s.chip) for s in group]
        if len(got) != len(set(got)) or set(got) != want:
            dupes = sorted({g for g in got if got.count(g) > 1})
            missing, extra = sorted(want - set(got)), sorted(set(got) - want)
            raise PlacementError(
                f"slice {i} ({group[0].slice_name!r}) must have one worker on each of the {len(want)} chips of "
                f"{tpu_slice}; duplicates {dupes}, missing {missing}, unexpected {extra}"
            )
        hostnames[i] = _slice_hostnames(tpu_slice, group)

    head = next(s for s in per_slice[0] if s.worker_id == 0)
    host0 = hostnames[0][0] if hostnames[0] else head.address

    world = num_slices * tpu_slice.chips
    out = []
    for i, group in per_slice.items():
        for s in group:
            env = chip_env(tpu_slice, s.worker_id, s.chip, hostnames[i], base_port)
            env.update(megascale_env(host0, num_slices, i, s.chip, megascale_port))
            out.append(
                ChipAssignment(
                    actor_index=s.actor_index,
                    rank=i * tpu_slice.chips + task_id(tpu_slice, s.worker_id, s.chip),
                    world_size=world,
                    slice_index=i,
                    num_slices=num_slices,
                    slice_name=s.slice_name,
                    worker_id=s.worker_id,
                    chip=s.chip,
                    env=env,
                )
            )
    return sorted(out, key=lambda a: a.rank)


def slice_of(seats: Sequence[Seat], workers_per_chip: int = 1) -> TpuSlice:
    """The slice shape Ray placed ``seats`` on, from the Ray node labels each worker reports (pod type, topology)
    and the hosts they sit on: a v5e/v6e ``2x4`` is one 8-chip VM or two 4-chip VMs, and the hosts decide. The
    one answer to "which slice" for every runtime and for the cluster's own nodes (:func:`slice_of_cluster`).

    Raises :class:`PlacementError` unless the workers are on one shape, ``workers_per_chip`` per chip, of whole
    slices."""
    if not seats:
        raise PlacementError("no workers to place")
    shapes = {(s.labels.get(RAY_POD_TYPE_LABEL), s.labels.get(RAY_TOPOLOGY_LABEL)) for s in seats}
    if len(shapes) != 1 or None in next(iter(shapes)):
        raise PlacementError(f"the workers are not on one TPU slice shape (pod type, topology): {sorted(shapes)}")
    slices = {s.slice_name for s in seats}
    hosts = {(s.slice_name, s.worker_id) for s in seats}
    per_host = len(seats) // max(1, len(hosts)) // workers_per_chip
    each = "one per chip" if workers_per_chip == 1 else f"{workers_per_chip} per chip (one per device)"
    try:
        shape = slice_from_labels(dict(seats[0].labels), chips_per_host=max(1, per_host))
    except TopologyError as e:
        raise PlacementError(f"{len(seats)} workers on {len(hosts)} host(s): {e}; not {each}") from None
    if len(seats) != shape.chips * workers_per_chip * len(slices):
        raise PlacementError(
            f"{len(seats)} workers on {len(slices)} {shape} slice(s) of {shape.chips} chips: not {each}"
        )
    return shape


def slice_of_cluster(slices: Sequence[SliceInfo]) -> TpuSlice:
    """The slice shape of a cluster that has exactly one shape (from Ray's pod type and topology labels)."""
    shapes = {(s.pod_type, s.topology, s.chips // max(1, len(s.worker_ids))) for s in slices}
    if len(shapes) != 1:
        raise PlacementError(
            f"cannot choose a slice shape: the cluster has {describe_slices(slices)}; pass --topology GEN:TOPOLOGY"
        )
    pod_type, topology, per_host = next(iter(shapes))
    return slice_from_labels({RAY_POD_TYPE_LABEL: pod_type, RAY_TOPOLOGY_LABEL: topology}, chips_per_host=per_host)
