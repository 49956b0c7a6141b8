"""What a serving replica asks Ray for, and what it checks of what it got: pure functions over a
:class:`~tpuray.components.catalog.topology.TpuSlice` and the seats its workers report, tested without a cluster.

A replica owns one whole slice through Ray's own slice reservation (``ray.util.tpu.SlicePlacementGroup``, Ray
2.60) and runs one worker per TPU host, which drives all of its host's chips with PyTorch/XLA SPMD: one bundle per
host (``{"CPU": 1, "TPU": chips_per_host}``), each pinned by label to the slice's pod type and topology and to its
host (``ray.io/tpu-worker-id``). On a multi-host slice Ray adds the slice's name to every bundle's selector once it
has reserved the slice's head (``TPU-<pod type>-head``), so the bundles cannot straddle slices. On a single-host
slice Ray reserves no head and adds no name (``_reserve_slice``: ``is_single_host``): there the one bundle takes the
whole host, and the pod-type label keeps it off other shapes' hosts (a v5p host has four chips too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL, RAY_TOPOLOGY_LABEL, RAY_WORKER_ID_LABEL
from tpuray.components.catalog.runtimes import XLA_SPMD
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.workloads.placement.seats import PlacementError, Seat, assign_chips, slice_of

__all__ = [
    "SliceRequest",
    "check_rows",
    "chip_seats",
    "host_bundle",
    "parse_slice",
    "plan_hosts",
    "slice_request",
    "split_rows",
]


def host_bundle(tpu_slice: TpuSlice) -> dict[str, float]:
    """One host's bundle: its worker's own resources, every chip of the host (as ``spmd_scaling_config`` asks
    for a training SPMD worker) and one CPU."""
    return {"CPU": 1.0, "TPU": float(XLA_SPMD.tpu_resource_per_worker(tpu_slice))}


def parse_slice(topology: str | TpuSlice, field: str = "topology") -> TpuSlice:
    """The slice a replica owns, from ``GEN:TOPOLOGY[:MACHINE_TYPE]`` (e.g. ``v5e:2x2``); a bad value is a
    ``ValueError`` naming ``field`` and the valid form."""
    if isinstance(topology, TpuSlice):
        return topology
    if not isinstance(topology, str):
        raise ValueError(f"{field}: a slice shape 'GEN:TOPOLOGY' (e.g. 'v5e:2x2'), got {type(topology).__name__}")
    try:
        return TpuSlice.parse(topology)
    except TopologyError as e:
        raise ValueError(f"{field}: {e} (the valid form: 'GEN:TOPOLOGY', e.g. 'v5e:2x2')") from None


@dataclass(frozen=True)
class SliceRequest:
    """The arguments of one replica's ``ray.util.tpu.slice_placement_group`` call (:func:`slice_request`)."""

    tpu_slice: TpuSlice
    bundle: dict[str, float]
    strategy: str
    label_selectors: tuple[dict[str, str], ...]

    def kwargs(self, name: str = "") -> dict[str, Any]:
        """``slice_placement_group(**kwargs)``: ``chips_per_vm`` from the catalog, so an ambiguous shape (a v5e or
        v6e 2x4: one 8-chip VM or two 4-chip VMs) is the one tpuray plans, not Ray's guess."""
        return {
            "topology": self.tpu_slice.topology,
            "accelerator_version": self.tpu_slice.ray_accelerator_type,
            "resources_per_bundle": dict(self.bundle),
            "chips_per_vm": self.tpu_slice.chips_per_host,
            "strategy": self.strategy,
            "bundle_label_selector": [dict(s) for s in self.label_selectors],
            "name": name,
        }


def slice_request(tpu_slice: TpuSlice) -> SliceRequest:
    """One bundle per host in worker-id order, each bundle's selector naming the slice's pod type, topology and
    the bundle's host; ``STRICT_PACK`` on a single host (one node: Ray pins no slice name there), Ray's default
    ``SPREAD`` across the hosts of a multi-host slice (the slice name and the worker id pin each bundle)."""
    selectors = tuple(
        {
            RAY_POD_TYPE_LABEL: tpu_slice.pod_type,
            RAY_TOPOLOGY_LABEL: tpu_slice.topology,
            RAY_WORKER_ID_LABEL: str(host),
        }
        for host in range(tpu_slice.hosts)
    )
    strategy = "SPREAD" if tpu_slice.multi_host else "STRICT_PACK"
    return SliceRequest(tpu_slice, host_bundle(tpu_slice), strategy, selectors)


def chip_seats(host: Seat, chips: Sequence[int]) -> list[Seat]:
    """A host worker's seat (``probe(..., whole_host=True)``) as one seat per chip it holds, so that the chip
    checks of training (:func:`~tpuray.workloads.placement.seats.assign_chips`) apply to it unchanged."""
    return [replace(host, chip=int(c)) for c in chips]


def plan_hosts(want: TpuSlice, seats: Sequence[Seat]) -> list[int]:
    """The workers' indices (``actor_index``) in host order (worker id 0, 1, ...), from where their processes
    really run (:func:`chip_seats` of each); a :class:`PlacementError` unless they hold every chip of one ``want``
    slice on one Ray slice, one worker per host holding all of that host's chips (a replica whose workers straddle
    two slices, sit on another shape or share a host is refused, naming them)."""
    names = sorted({s.slice_name for s in seats})
    if len(names) != 1:
        raise PlacementError(f"the replica's workers straddle Ray slices {names}: a replica owns one whole slice")
    got = slice_of(seats)
    if (got.pod_type, got.topology) != (want.pod_type, want.topology):
        raise PlacementError(f"the replica asked for a {want} slice ({want.pod_type}) but its workers are on {got}")
    assign_chips(want, 1, [replace(s, slice_index=0) for s in seats])  # every chip of the slice, once
    hosts: dict[int, set[int]] = {}
    for s in seats:
        hosts.setdefault(s.worker_id, set()).add(s.actor_index)
    shared = {h: sorted(a) for h, a in hosts.items() if len(a) != 1}
    if shared:
        raise PlacementError(f"one worker per host drives all of its chips; host(s) held by several: {shared}")
    order = [next(iter(hosts[h])) for h in sorted(hosts)]
    if len(set(order)) != len(order):
        raise PlacementError(f"a worker reports chips on several hosts of slice {names[0]!r}: {order}")
    return order


def check_rows(rows: Any, field: str = "inputs") -> list[list[float]]:
    """A request's batch: a non-empty list of rows, each a non-empty list of numbers, all of one length."""
    form = f"{field}: a non-empty list of rows of numbers, all of one length (e.g. [[0.1, 0.2], [0.3, 0.4]])"
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{form}; got {type(rows).__name__}")
    width = None
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not row or not all(_number(v) for v in row):
            raise ValueError(f"{form}; row {i} is {row!r:.80}")
        if width is not None and len(row) != width:
            raise ValueError(f"{form}; row {i} has {len(row)} numbers, row 0 has {width}")
        width = len(row)
        out.append([float(v) for v in row])
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def split_rows(rows: Sequence[list[float]], parts: int) -> list[list[list[float]]]:
    """``rows`` in ``parts`` contiguous chunks in order, sizes differing by at most one (host ``i`` takes chunk
    ``i``; with fewer rows than hosts the last hosts get none)."""
    if parts < 1:
        raise ValueError(f"parts: a whole number >= 1, got {parts}")
    base, extra = divmod(len(rows), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append(list(rows[start:end]))
        start = end
    return out
