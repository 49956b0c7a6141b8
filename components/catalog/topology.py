"""The TPU topology catalog: one table of TPU systems, every other TPU fact derived from it.

Pure Python; imports no Pulumi (the worker image imports it without Pulumi installed).

Sources: GKE and Cloud TPU documentation, AI-Hypercomputer/xpk ``system_characteristics.py``,
GoogleCloudPlatform/cluster-toolkit's TPU validation, ray-project/ray ``_private/accelerators/tpu.py``.

A *slice* is a set of TPU chips connected by ICI. On GKE a slice is served by one or more VMs ("hosts",
GKE nodes) of one machine type. Everything the rest of tpuray needs (node pool shape, KubeRay worker group,
Ray resources and labels, the PJRT per-chip environment) is derived from a :class:`TpuSlice`.

Example::

    >>> s = TpuSlice.parse("v5p", "4x4x8")
    >>> (s.chips, s.hosts, s.chips_per_host, s.pod_type, s.machine_type)
    (128, 32, 4, 'v5p-256', 'ct5p-hightpu-4t')
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FLEX_START_MIN_GKE_VERSION",
    "GENERATIONS",
    "MIN_GKE_VERSION",
    "Generation",
    "Placement",
    "TopologyError",
    "TpuSlice",
    "generation",
    "generation_of_accelerator",
    "generation_of_machine_type",
    "valid_topologies",
]

Placement = Literal["compact", "workload-policy", "none"]
Dims3 = tuple[int, int, int]


class TopologyError(ValueError):
    """An invalid TPU generation, topology, machine type or pod type.

    ``field`` names the offending input (``generation``, ``topology``, ``machine_type`` or ``pod_type``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Generation:
    """One row of the catalog: a TPU generation as GKE, Ray and PyTorch/XLA see it."""

    name: str
    """Canonical short name: ``v4``, ``v5e``, ``v5p``, ``v6e`` or ``tpu7x``."""
    aliases: tuple[str, ...]
    gke_accelerator: str
    """Value of the node label ``cloud.google.com/gke-tpu-accelerator``."""
    machine_types: Mapping[str, int]
    """GKE machine type -> chips per VM."""
    cores_per_chip: int
    """TensorCores per chip."""
    ndims: Literal[2, 3]
    ray_accelerator_type: str
    """Ray's ``accelerator_type`` resource suffix, e.g. ``TPU-V6E``."""
    pod_type_prefix: str
    """Prefix of the Ray/Cloud pod type name, e.g. ``v5litepod`` in ``v5litepod-16``."""
    pod_type_counts_cores: bool
    """True if the pod type counts TensorCores (v4, v5p, tpu7x), False if it counts chips (v5e, v6e)."""
    peak_bf16_tflops_per_chip: float
    """Peak dense bf16 TFLOP/s per chip (Cloud TPU system architecture pages); used for MFU."""
    hbm_gib_per_chip: int
    """HBM per chip in GiB (the Cloud TPU system architecture page of each generation, cited on its row); the
    dashboard draws each chip's HBM use against it."""
    max_cubes: int | None = None
    """3D only: the most 4x4x4 cubes a slice may have."""
    ordered_dims: bool = False
    """3D only: dimensions must be non-decreasing (A <= B <= C)."""
    multi_host_placement: Placement = "compact"
    """How GKE co-locates a multi-host slice: a COMPACT placement policy, or a workload policy (tpu7x)."""
    min_gke_version: str | None = None
    """Lowest GKE version that serves this generation, if higher than tpuray's own floor (``MIN_GKE_VERSION``)."""
    devices_per_chip: int = 1
    """Runtime devices per chip, each driven by its own process under TorchTPU: 2 on tpu7x (torch_tpu 0.2.0
    ``_internal/utils/hardware.py`` ``_DEVICES_PER_CHIP``; "exactly one torch process per TPU device",
    ``_internal/distributed/device_mesh.py``); torch_xla 2.9 appends it to ``TPU_PROCESS_BOUNDS``."""
    single_host_topologies: Mapping[str, str] = field(default_factory=dict)
    """Single-host topology -> its machine type."""
    multi_host_base_topologies: tuple[str, ...] = ()
    """Multi-host shapes outside the 3D cube rule (2D: all multi-host shapes)."""
    flex_start: bool = True
    """GKE flex-start (and flex-start with queued provisioning) serves this generation."""
    zones: tuple[str, ...] = ()
    """The zones that offer it, as the Cloud TPU "regions and zones" page lists them
    (https://cloud.google.com/tpu/docs/regions-zones, read 2026-12-01; :mod:`tpuray.components.catalog.tpu_locations`
    says what is kept and left out, and checks stacks against these)."""

    @property
    def multi_host_machine_type(self) -> str:
        """The machine type of multi-host slices: always the 4-chip VM on GKE."""
        return next(m for m, c in self.machine_types.items() if c == 4)


_2D_MULTI_HOST = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_3D_BASE = ("2x2x2", "2x2x4", "2x4x4")

GENERATIONS: tuple[Generation, ...] = (
    # https://cloud.google.com/tpu/docs/v4 : 4 chips per VM, 3D torus, up to 4096 chips (64 cubes).
    Generation(
        name="v4",
        aliases=("tpu-v4", "tpuv4", "v4p"),
        gke_accelerator="tpu-v4-podslice",
        machine_types={"ct4p-hightpu-4t": 4},
        cores_per_chip=2,
        ndims=3,
        ray_accelerator_type="TPU-V4",
        pod_type_prefix="v4",
        pod_type_counts_cores=True,
        peak_bf16_tflops_per_chip=275.0,
        # https://cloud.google.com/tpu/docs/v4 : "HBM2 capacity and bandwidth: 32 GiB, 1200 GBps".
        hbm_gib_per_chip=32,
        max_cubes=64,
        # xpk does not require ordered dims for v4; cluster-toolkit does. We follow xpk (AI-Hypercomputer/xpk,
        # src/xpk/core/system_characteristics.py).
        ordered_dims=False,
        single_host_topologies={"2x2x1": "ct4p-hightpu-4t"},
        multi_host_base_topologies=_3D_BASE,
        # https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start : "TPU v3 and v4 are not supported."
        flex_start=False,
        zones=("us-central2-b",),
    ),
    # https://cloud.google.com/tpu/docs/v5e : 2D, 1/4/8-chip VMs, largest slice 16x16 (256 chips).
    Generation(
        name="v5e",
        aliases=("v5litepod", "v5lite", "tpu-v5-lite-podslice", "tpu-v5e", "v5litepod-slice"),
        gke_accelerator="tpu-v5-lite-podslice",
        machine_types={"ct5lp-hightpu-1t": 1, "ct5lp-hightpu-4t": 4, "ct5lp-hightpu-8t": 8},
        cores_per_chip=1,
        ndims=2,
        ray_accelerator_type="TPU-V5LITEPOD",
        pod_type_prefix="v5litepod",
        pod_type_counts_cores=False,
        peak_bf16_tflops_per_chip=197.0,
        # https://cloud.google.com/tpu/docs/v5e : "HBM capacity per chip: 16 GB" (the page writes GB; the v5p,
        # v6e and tpu7x figures below are GiB on the tpu7x page's comparison table, so 16 is kept as GiB too).
        hbm_gib_per_chip=16,
        single_host_topologies={"1x1": "ct5lp-hightpu-1t", "2x2": "ct5lp-hightpu-4t", "2x4": "ct5lp-hightpu-8t"},
        multi_host_base_topologies=_2D_MULTI_HOST,
        zones=(
            "asia-southeast1-b",
            "europe-west4-b",
            "us-central1-a",
            "us-east5-a",
            "us-east5-b",
            "us-east5-c",
            "us-south1-a",
            "us-west1-c",
            "us-west4-a",
        ),
    ),
    # https://cloud.google.com/tpu/docs/v5p : 3D, 4-chip VMs, ordered dimensions. A pod has 8960 chips, but "the
    # largest job that can be scheduled is a 96 cube (6144 chip) job" (16x16x24).
    Generation(
        name="v5p",
        aliases=("tpu-v5p", "tpu-v5p-slice"),
        gke_accelerator="tpu-v5p-slice",
        machine_types={"ct5p-hightpu-4t": 4},
        cores_per_chip=2,
        ndims=3,
        ray_accelerator_type="TPU-V5P",
        pod_type_prefix="v5p",
        pod_type_counts_cores=True,
        peak_bf16_tflops_per_chip=459.0,
        # https://cloud.google.com/tpu/docs/tpu7x (comparison table): "HBM capacity per chip (GiB): 95" for v5p
        # (https://cloud.google.com/tpu/docs/v5p writes "95GB").
        hbm_gib_per_chip=95,
        max_cubes=96,
        ordered_dims=True,
        single_host_topologies={"2x2x1": "ct5p-hightpu-4t"},
        multi_host_base_topologies=_3D_BASE,
        zones=("europe-west4-b", "us-central1-a", "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a"),
    ),
    # https://cloud.google.com/tpu/docs/v6e : 2D, 1/4/8-chip VMs, largest slice 16x16 (256 chips).
    Generation(
        name="v6e",
        aliases=("trillium", "tpu-v6e", "tpu-v6e-slice", "v6"),
        gke_accelerator="tpu-v6e-slice",
        machine_types={"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8},
        cores_per_chip=1,
        ndims=2,
        ray_accelerator_type="TPU-V6E",
        pod_type_prefix="v6e",
        pod_type_counts_cores=False,
        peak_bf16_tflops_per_chip=918.0,
        # https://cloud.google.com/tpu/docs/tpu7x (comparison table): "HBM capacity per chip (GiB): 32" for v6e
        # (https://cloud.google.com/tpu/docs/v6e writes "32 GB").
        hbm_gib_per_chip=32,
        min_gke_version="1.31.2-gke.1115000",
        single_host_topologies={"1x1": "ct6e-standard-1t", "2x2": "ct6e-standard-4t", "2x4": "ct6e-standard-8t"},
        multi_host_base_topologies=_2D_MULTI_HOST,
        zones=(
            "asia-northeast1-b",
            "europe-west4-a",
            "us-central1-b",
            "us-east1-d",
            "us-east4-a",
            "us-east4-b",
            "us-east5-a",
            "us-east5-b",
            "us-east5-c",
            "us-west1-c",
        ),
    ),
    # https://cloud.google.com/tpu/docs/tpu7x and
    # https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood : 3D, 4-chip VMs, up to 9216 chips
    # (144 cubes), workload-policy placement, GKE >= 1.34.0-gke.2201000.
    Generation(
        name="tpu7x",
        aliases=("v7x", "ironwood", "tpu-v7x", "v7"),
        gke_accelerator="tpu7x",
        # tpu7x-standard-1t is the 1-chip single-host type (1x1x1), as xpk's system characteristics list it.
        machine_types={"tpu7x-standard-1t": 1, "tpu7x-standard-4t": 4},
        cores_per_chip=2,
        ndims=3,
        ray_accelerator_type="TPU-V7X",
        # Ray names tpu7x pod types v7x-<cores>; xpk writes tpu7x-<cores>. We print Ray's and read both.
        pod_type_prefix="v7x",
        pod_type_counts_cores=True,
        peak_bf16_tflops_per_chip=2307.0,
        # https://cloud.google.com/tpu/docs/tpu7x : "HBM capacity per chip (GiB): 192".
        hbm_gib_per_chip=192,
        max_cubes=144,
        ordered_dims=True,
        multi_host_placement="workload-policy",
        min_gke_version="1.34.0-gke.2201000",
        devices_per_chip=2,
        single_host_topologies={"1x1x1": "tpu7x-standard-1t", "2x2x1": "tpu7x-standard-4t"},
        multi_host_base_topologies=_3D_BASE,
        # Refused. GKE's flex-start page (https://cloud.google.com/kubernetes-engine/docs/concepts/
        # flex-start) lists the TPU versions flex-start serves as v5e, v5p and v6e, and Cloud TPU's own flex-start
        # page (https://cloud.google.com/tpu/docs/request-using-flex-start, "Limitations") names only v6e and v5e;
        # neither lists TPU7x, so flex-start and queued provisioning of tpu7x are refused until a page does.
        flex_start=False,
        zones=("us-central1-c",),
    ),
)

MIN_GKE_VERSION = "1.30.0-gke.1747000"
"""Lowest GKE version tpuray declares a cluster at, for any slice (a generation's own minimum raises it). It is the
Ray Operator add-on's minimum (https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/how-to/
enable-ray-on-gke), tpuray's floor while it ran KubeRay from the add-on; kept with the Helm operator so no stack's
control-plane floor moves backwards (v4, v5e and v5p alone would allow older GKE versions:
https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus)."""

FLEX_START_MIN_GKE_VERSION = "1.33.0-gke.1712000"
"""Flex-start for TPUs: "To run TPUs, use GKE version 1.33.0-gke.1712000 or later"
(https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start)."""


def _norm(s: str) -> str:
    return s.strip().lower().replace("_", "-")


@functools.cache
def _by_name() -> dict[str, Generation]:
    table: dict[str, Generation] = {}
    for g in GENERATIONS:
        for key in (g.name, *g.aliases):
            table[_norm(key)] = g
    return table


def generation(name: str) -> Generation:
    """The catalog row for a generation name or alias (``"v5e"``, ``"v5litepod"``, ``"ironwood"``, ...)."""
    if not isinstance(name, str) or not name.strip():
        raise TopologyError("generation", f"expected a generation name, got {name!r}; {_valid_generations()}")
    g = _by_name().get(_norm(name))
    if g is None:
        raise TopologyError("generation", f"unknown TPU generation {name!r}; {_valid_generations()}")
    return g


@functools.cache
def _by_machine_type() -> dict[str, Generation]:
    return {m: g for g in GENERATIONS for m in g.machine_types}


@functools.cache
def _by_accelerator() -> dict[str, Generation]:
    return {g.gke_accelerator: g for g in GENERATIONS}


def generation_of_machine_type(machine_type: object) -> Generation | None:
    """The generation of a GKE machine type (``"ct6e-standard-4t"`` -> v6e), or None for a non-TPU machine."""
    return _by_machine_type().get(machine_type) if isinstance(machine_type, str) else None


def generation_of_accelerator(label: object) -> Generation | None:
    """The generation of a ``cloud.google.com/gke-tpu-accelerator`` value (``"tpu-v5p-slice"`` -> v5p), or None."""
    return _by_accelerator().get(label) if isinstance(label, str) else None


def _valid_generations() -> str:
    parts = [f"{g.name} (aliases: {', '.join(g.aliases)})" for g in GENERATIONS]
    return "valid choices: " + "; ".join(parts)


_TOPOLOGY_RE = re.compile(r"^\s*(\d+)(?:\s*[xX]\s*(\d+))?(?:\s*[xX]\s*(\d+))?\s*$")


def _parse_dims(topology: str) -> tuple[int, ...]:
    if not isinstance(topology, str):
        raise TopologyError("topology", f"expected a string like '4x4' or '2x2x4', got {topology!r}")
    m = _TOPOLOGY_RE.match(topology)
    if not m or m.group(2) is None:
        raise TopologyError("topology", f"{topology!r} is not of the form AxB (2D) or AxBxC (3D)")
    return tuple(int(x) for x in m.groups() if x is not None)


def _fmt(dims: Iterable[int]) -> str:
    return "x".join(str(d) for d in dims)


def _is_cube_shape(gen: Generation, dims: tuple[int, ...]) -> bool:
    """The 3D rule for shapes beyond the base shapes: multiples of 4 in [4, 256], a cube budget, ordering."""
    if len(dims) != 3 or any(d % 4 or not 4 <= d <= 256 for d in dims):
        return False
    if gen.max_cubes is not None and math.prod(d // 4 for d in dims) > gen.max_cubes:
        return False
    return not (gen.ordered_dims and list(dims) != sorted(dims))


def _cube_rule_violation(gen: Generation, dims: tuple[int, ...]) -> str:
    if any(d % 4 for d in dims):
        return "every dimension of a shape beyond 2x2x1, 2x2x2, 2x2x4 and 2x4x4 must be a multiple of 4"
    if any(not 4 <= d <= 256 for d in dims):
        return "every dimension must be between 4 and 256"
    cubes = math.prod(d // 4 for d in dims)
    if gen.max_cubes is not None and cubes > gen.max_cubes:
        return f"{cubes} 4x4x4 cubes exceed the {gen.name} limit of {gen.max_cubes}"
    return f"{gen.name} requires non-decreasing dimensions (A <= B <= C)"


@functools.cache
def valid_topologies(gen_name: str) -> tuple[str, ...]:
    """Every valid topology of a generation, smallest first (3D: the whole cube-rule space)."""
    gen = generation(gen_name)
    shapes: set[tuple[int, ...]] = {_parse_dims(t) for t in gen.single_host_topologies}
    shapes |= {_parse_dims(t) for t in gen.multi_host_base_topologies}
    if gen.ndims == 3:
        limit = gen.max_cubes or 64
        for a, b in itertools.product(range(1, 65), repeat=2):
            for c in range(1, min(64, limit // (a * b)) + 1):
                if _is_cube_shape(gen, (4 * a, 4 * b, 4 * c)):
                    shapes.add((4 * a, 4 * b, 4 * c))
    return tuple(_fmt(d) for d in sorted(shapes, key=lambda d: (math.prod(d), d)))


@functools.cache
def _valid_topologies_by_chips(gen_name: str) -> dict[int, tuple[str, ...]]:
    """:func:`valid_topologies` by chip count, which is what a pod type names (read once per generation, not once
    per pod type: the 3D space has hundreds of shapes)."""
    by_chips: dict[int, list[str]] = {}
    for t in valid_topologies(gen_name):
        by_chips.setdefault(math.prod(_parse_dims(t)), []).append(t)
    return {chips: tuple(shapes) for chips, shapes in by_chips.items()}


def _nearest(gen: Generation, dims: tuple[int, ...], n: int = 3) -> list[str]:
    """The ``n`` valid shapes closest to ``dims`` in log space (so 4x4x8 is as near 4x4x4 as 4x4x16 is)."""
    want = [math.log2(max(d, 1)) for d in (*dims, 1, 1)[:3]]

    def distance(t: str) -> tuple[float, str]:
        have = [math.log2(d) for d in (*_parse_dims(t), 1)[:3]]
        return (sum(abs(a - b) for a, b in zip(want, have, strict=True)), t)

    return sorted(valid_topologies(gen.name), key=distance)[:n]


@dataclass(frozen=True)
class TpuSlice:
    """One TPU slice shape on GKE: a generation, a topology and the machine type that serves it.

    Build it with :meth:`parse` or :meth:`parse_pod_type`; never construct it field by field.
    ``str(s)`` is a spec that :meth:`parse` reads back (``"v6e:4x4"``, ``"v6e:2x4:ct6e-standard-4t"``).
    """

    generation: str
    """Canonical generation name (``v4``, ``v5e``, ``v5p``, ``v6e``, ``tpu7x``)."""
    topology: str
    """Normalised topology, e.g. ``"4x4"`` or ``"4x4x8"``."""
    machine_type: str
    """GKE machine type of every VM of the slice."""

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def parse(cls, generation_or_spec: str, topology: str | None = None, machine_type: str | None = None) -> TpuSlice:
        """Validate and normalise a slice.

        ``generation_or_spec`` is a generation name or alias, or (with no ``topology``) a spec as written by
        ``str(TpuSlice)``: ``"GEN:TOPOLOGY[:MACHINE_TYPE]"``.

        ``machine_type`` chooses between the shapes that two machine types serve: on v5e and v6e, ``2x4`` is
        either one 8-chip VM (``-8t``, single-host) or two 4-chip VMs (``-4t``, multi-host, GKE only).
        Without a machine type, ``2x4`` means the single-host ``-8t`` VM, as Ray reads it.

        Raises :class:`TopologyError` naming the field, the bad value and the valid choices.
        """
        if all(a is None or isinstance(a, str) for a in (generation_or_spec, topology, machine_type)):
            # A slice is immutable and every pool's planners ask for it again: parse each spelling once.
            return _parse_slice(generation_or_spec, topology, machine_type)
        return cls._parse(generation_or_spec, topology, machine_type)

    @classmethod
    def _parse(cls, generation_or_spec: str, topology: str | None, machine_type: str | None) -> TpuSlice:
        if topology is None:
            parts = generation_or_spec.split(":") if isinstance(generation_or_spec, str) else []
            if len(parts) not in (2, 3):
                raise TopologyError(
                    "topology",
                    f"missing; pass a topology or a spec 'GEN:TOPOLOGY[:MACHINE_TYPE]', got {generation_or_spec!r}",
                )
            generation_or_spec, topology = parts[0], parts[1]
            if len(parts) == 3:
                machine_type = parts[2]
        gen = generation(generation_or_spec)
        dims = _parse_dims(topology)
        topo = _fmt(dims)
        if len(dims) != gen.ndims:
            example = "4x4" if gen.ndims == 2 else "2x2x4"
            raise TopologyError(
                "topology",
                f"{topology!r} has {len(dims)} dimensions but {gen.name} topologies have {gen.ndims} (e.g. "
                f"{example}); nearest valid shapes: {', '.join(_nearest(gen, dims))}",
            )
        if machine_type is not None and machine_type not in gen.machine_types:
            raise TopologyError(
                "machine_type",
                f"{machine_type!r} is not a {gen.name} machine type; valid choices: {', '.join(gen.machine_types)}",
            )
        single = gen.single_host_topologies.get(topo)
        multi = topo in gen.multi_host_base_topologies or (gen.ndims == 3 and _is_cube_shape(gen, dims))
        if single is None and not multi:
            if gen.ndims == 2:
                rule = "not a v5e/v6e slice shape"
            elif all(d <= 4 for d in dims) and math.prod(dims) <= 32:
                rule = "small 3D slices must be one of 2x2x1, 2x2x2, 2x2x4, 2x4x4"
            else:
                rule = _cube_rule_violation(gen, dims)
            near = _nearest(gen, dims)
            if _is_cube_shape(gen, tuple(sorted(dims))):  # an ordering slip: offer the sorted shape first
                near = [_fmt(sorted(dims)), *(t for t in near if t != _fmt(sorted(dims)))][:3]
            raise TopologyError(
                "topology",
                f"{topology!r} is not a valid {gen.name} topology ({rule}); nearest valid shapes: {', '.join(near)}",
            )
        candidates = ([single] if single else []) + ([gen.multi_host_machine_type] if multi else [])
        if machine_type is None:
            chosen = candidates[0]  # single-host wins the 2x4 ambiguity, as in Ray
        elif machine_type in candidates:
            chosen = machine_type
        else:
            raise TopologyError(
                "machine_type",
                f"{machine_type!r} cannot serve a {gen.name} {topo} slice; valid choices: {', '.join(candidates)}",
            )
        return cls(generation=gen.name, topology=topo, machine_type=chosen)

    @classmethod
    def parse_pod_type(cls, pod_type: str, topology: str | None = None) -> TpuSlice:
        """Read a Ray/Cloud pod type name (``"v5p-256"``, ``"v5litepod-16"``, ``"v6e-8"``, ``"v7x-16"``).

        v4, v5p and tpu7x pod types count TensorCores, v5e and v6e count chips. With no ``topology``, the
        default shape for that chip count is chosen: the most cube-like valid shape (ties: the
        lexicographically smallest), and single-host where one exists.
        """
        m = re.match(r"^\s*([a-z0-9]+?)-(\d+)\s*$", pod_type.lower()) if isinstance(pod_type, str) else None
        if not m:
            raise TopologyError("pod_type", f"{pod_type!r} is not of the form <generation>-<count>, e.g. v5p-256")
        prefix, count = m.group(1), int(m.group(2))
        gen = next((g for g in GENERATIONS if g.pod_type_prefix == prefix), None)
        if gen is None:
            try:
                gen = generation(prefix)
            except TopologyError:
                valid = ", ".join(f"{g.pod_type_prefix}-N" for g in GENERATIONS)
                raise TopologyError("pod_type", f"unknown pod type prefix {prefix!r}; valid choices: {valid}") from None
        per = gen.cores_per_chip if gen.pod_type_counts_cores else 1
        if count % per:
            raise TopologyError("pod_type", f"{pod_type!r}: {gen.name} pod types count TensorCores ({per} per chip)")
        chips = count // per
        if topology is not None:
            s = cls.parse(gen.name, topology)
            if s.chips != chips:
                raise TopologyError(
                    "topology", f"{topology!r} has {s.chips} chips but pod type {pod_type!r} has {chips}"
                )
            return s
        shapes = _valid_topologies_by_chips(gen.name).get(chips, ())
        if not shapes:
            sizes = sorted({math.prod(_parse_dims(t)) * per for t in valid_topologies(gen.name)})
            raise TopologyError(
                "pod_type",
                f"no {gen.name} slice has {chips} chips; valid {gen.pod_type_prefix}-N sizes start "
                f"{', '.join(map(str, sizes[:12]))}, ...",
            )
        best = min(shapes, key=lambda t: (max(_parse_dims(t)), _parse_dims(t)))
        return cls.parse(gen.name, best)

    def __str__(self) -> str:
        base = f"{self.generation}:{self.topology}"
        return (
            base
            if TpuSlice.parse(self.generation, self.topology).machine_type == self.machine_type
            else (f"{base}:{self.machine_type}")
        )

    # ---- derived facts ------------------------------------------------------------------------------
    @property
    def spec(self) -> Generation:
        """The catalog row of this slice's generation."""
        return generation(self.generation)

    @property
    def dims(self) -> Dims3:
        """The topology padded to three dimensions with 1, e.g. ``(4, 4, 1)`` for ``4x4``."""
        d = (*_parse_dims(self.topology), 1, 1)
        return (d[0], d[1], d[2])

    @property
    def chips(self) -> int:
        """TPU chips in the slice (product of the topology's dimensions)."""
        return math.prod(self.dims)

    @property
    def chips_per_host(self) -> int:
        """Chips per VM (GKE node); the node's ``google.com/tpu`` capacity."""
        return self.spec.machine_types[self.machine_type]

    @property
    def hosts(self) -> int:
        """VMs (GKE nodes, Ray worker pods) per slice."""
        return self.chips // self.chips_per_host

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def devices_per_host(self) -> int:
        """Runtime devices per VM: chips per host times the generation's devices per chip (8 on a 4-chip tpu7x VM).

        What TorchTPU runs one process for, and what Ray counts as ``TPU`` resources on the node when
        ``RAY_TPU_RESOURCE_PER_CHIP`` is the devices per chip (Ray 2.60 ``_private/accelerators/tpu.py``).
        """
        return self.chips_per_host * self.spec.devices_per_chip

    @property
    def devices(self) -> int:
        """Runtime devices in the slice (:attr:`devices_per_host` times :attr:`hosts`)."""
        return self.devices_per_host * self.hosts

    @property
    def cores(self) -> int:
        """TensorCores in the slice."""
        return self.chips * self.spec.cores_per_chip

    @property
    def gke_accelerator(self) -> str:
        """Value of the node label ``cloud.google.com/gke-tpu-accelerator``."""
        return self.spec.gke_accelerator

    @property
    def pod_type(self) -> str:
        """Ray/Cloud pod type name, e.g. ``v5p-256`` (v4/v5p/tpu7x count cores, v5e/v6e count chips)."""
        count = self.cores if self.spec.pod_type_counts_cores else self.chips
        return f"{self.spec.pod_type_prefix}-{count}"

    @property
    def ray_accelerator_type(self) -> str:
        """Ray's accelerator type, e.g. ``TPU-V6E`` (the ``accelerator_type:TPU-V6E`` resource)."""
        return self.spec.ray_accelerator_type

    @property
    def chips_per_host_bounds(self) -> Dims3:
        """The chip block one VM holds: 1-chip VM ``(1,1,1)``, 4-chip ``(2,2,1)``, 8-chip ``(2,4,1)``."""
        return {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 4, 1)}[self.chips_per_host]

    @property
    def host_bounds(self) -> Dims3:
        """The grid of VMs: ``dims`` divided element-wise by ``chips_per_host_bounds``."""
        d, c = self.dims, self.chips_per_host_bounds
        return (d[0] // c[0], d[1] // c[1], d[2] // c[2])

    @property
    def placement(self) -> Placement:
        """``compact`` (multi-host, COMPACT placement policy with tpu_topology), ``workload-policy``
        (multi-host tpu7x) or ``none`` (single-host: GKE rejects a tpu_topology there)."""
        return self.spec.multi_host_placement if self.multi_host else "none"

    @property
    def peak_bf16_tflops(self) -> float:
        """Peak dense bf16 TFLOP/s of the whole slice."""
        return self.chips * self.spec.peak_bf16_tflops_per_chip

    @property
    def hbm_bytes_per_chip(self) -> int:
        """HBM of one chip in bytes (the catalog's GiB figure)."""
        return self.spec.hbm_gib_per_chip * 2**30

    @property
    def min_gke_version(self) -> str:
        """Lowest GKE version tpuray runs this slice on."""
        return self.spec.min_gke_version or MIN_GKE_VERSION

    def summary(self) -> dict[str, object]:
        """The slice's facts as a JSON-ready dict (used by the CLI and stack outputs)."""
        return {
            "generation": self.generation,
            "topology": self.topology,
            "machine_type": self.machine_type,
            "chips": self.chips,
            "hosts": self.hosts,
            "chips_per_host": self.chips_per_host,
            "cores": self.cores,
            "multi_host": self.multi_host,
            "pod_type": self.pod_type,
            "gke_accelerator": self.gke_accelerator,
            "ray_accelerator_type": self.ray_accelerator_type,
            "chips_per_host_bounds": ",".join(map(str, self.chips_per_host_bounds)),
            "host_bounds": ",".join(map(str, self.host_bounds)),
            "placement": self.placement,
            "min_gke_version": self.min_gke_version,
            "peak_bf16_tflops": self.peak_bf16_tflops,
            "hbm_gib_per_chip": self.spec.hbm_gib_per_chip,
        }


@functools.lru_cache(maxsize=1024)
def _parse_slice(generation_or_spec: str, topology: str | None, machine_type: str | None) -> TpuSlice:
    """:meth:`TpuSlice.parse` of string arguments, remembered (errors are raised again each time, not cached)."""
    return TpuSlice._parse(generation_or_spec, topology, machine_type)
