"""The machine types tpuray plans onto or accepts for the system pool, with their vCPUs and memory: one table.

Pure Python. A machine type is known here or refused: its shape is never derived from its name (``e2-standard-64``
fits the pattern of E2 names, but E2 stops at 32 vCPUs). Custom types (``<series>-custom-<vCPUs>-<MiB>``, N1's
``custom-<vCPUs>-<MiB>``) are checked against their series' documented limits.

Sources, checked 2026-12-04:

- Every predefined type below: the Compute API's ``machineTypes`` list, as ``gcloud compute machine-types list``
  gives it (vCPUs, and ``memoryMb`` / 1024 as GB: Compute Engine's "GB" of machine memory are GiB), kept in
  Cyclenerd/google-cloud-pricing-cost-calculator tools/machinetypes.csv (commit dac3128, 2026-08-20; the file last
  changed 2026-07-01). Each series' family page gives the same shapes:
  E2, N1, N2, N2D, N4, C3, C3D, C4, T2D https://cloud.google.com/compute/docs/general-purpose-machines;
  C2, C2D https://cloud.google.com/compute/docs/compute-optimized-machines.
- The TPU hosts: the same list, except ``ct4p-hightpu-4t``, which it lacks: the TPU v4 table of
  https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus.
- Custom types' limits: https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type
  and its helper sample https://cloud.google.com/compute/docs/samples/compute-custom-machine-type-helper-class
  (custom types exist for N1, N2, N2D, E2 and N4 only; memory in multiples of 256 MiB).

Left out on purpose, so refused with the nearest listed types: shared-core types (``e2-micro``/``small``/``medium``:
the list gives them 2 vCPUs that they share, a fraction of which they may use), local-SSD (``-lssd``) and bare-metal
(``-metal``) variants (the system pool needs neither, and GKE's support of bare metal nodes is not checked here),
the deprecated N1 mega/ultramem types, N4 custom types (their limits are not in the sources above), the Arm series
(C4A, T2A: see ``ARM_SERIES``), and every series not below.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass

from tpuray.components.catalog.topology import GENERATIONS

__all__ = [
    "ARM_SERIES",
    "CPU_MACHINE_TYPES",
    "CUSTOM_LIMITS",
    "GIB",
    "TPU_HOST_MACHINE_TYPES",
    "CustomLimits",
    "MachineShape",
    "machine_shape",
    "machine_type_problem",
    "nearest_machine_types",
]

GIB = 1024
"""MiB per GiB."""


@dataclass(frozen=True)
class MachineShape:
    """A Compute Engine machine type's vCPUs, memory and TPU chips."""

    vcpus: int
    memory_mib: int
    tpu_chips: int = 0


# ---- the table: name -> (vCPUs, GB as the list gives it) --------------------------------------------------------
_CPU: dict[str, tuple[int, float]] = {
    # c2
    "c2-standard-4": (4, 16), "c2-standard-8": (8, 32), "c2-standard-16": (16, 64), "c2-standard-30": (30, 120),
    "c2-standard-60": (60, 240),
    # c2d
    "c2d-highcpu-2": (2, 4), "c2d-highcpu-4": (4, 8), "c2d-highcpu-8": (8, 16), "c2d-highcpu-16": (16, 32),
    "c2d-highcpu-32": (32, 64), "c2d-highcpu-56": (56, 112), "c2d-highcpu-112": (112, 224), "c2d-highmem-2": (2, 16),
    "c2d-highmem-4": (4, 32), "c2d-highmem-8": (8, 64), "c2d-highmem-16": (16, 128), "c2d-highmem-32": (32, 256),
    "c2d-highmem-56": (56, 448), "c2d-highmem-112": (112, 896), "c2d-standard-2": (2, 8), "c2d-standard-4": (4, 16),
    "c2d-standard-8": (8, 32), "c2d-standard-16": (16, 64), "c2d-standard-32": (32, 128),
    "c2d-standard-56": (56, 224), "c2d-standard-112": (112, 448),
    # c3
    "c3-highcpu-4": (4, 8), "c3-highcpu-8": (8, 16), "c3-highcpu-22": (22, 44), "c3-highcpu-44": (44, 88),
    "c3-highcpu-88": (88, 176), "c3-highcpu-176": (176, 352), "c3-highmem-4": (4, 32), "c3-highmem-8": (8, 64),
    "c3-highmem-22": (22, 176), "c3-highmem-44": (44, 352), "c3-highmem-88": (88, 704), "c3-highmem-176": (176, 1408),
    "c3-standard-4": (4, 16), "c3-standard-8": (8, 32), "c3-standard-22": (22, 88), "c3-standard-44": (44, 176),
    "c3-standard-88": (88, 352), "c3-standard-176": (176, 704),
    # c3d
    "c3d-highcpu-4": (4, 8), "c3d-highcpu-8": (8, 16), "c3d-highcpu-16": (16, 32), "c3d-highcpu-30": (30, 59),
    "c3d-highcpu-60": (60, 118), "c3d-highcpu-90": (90, 177), "c3d-highcpu-180": (180, 354),
    "c3d-highcpu-360": (360, 708), "c3d-highmem-4": (4, 32), "c3d-highmem-8": (8, 64), "c3d-highmem-16": (16, 128),
    "c3d-highmem-30": (30, 240), "c3d-highmem-60": (60, 480), "c3d-highmem-90": (90, 720),
    "c3d-highmem-180": (180, 1440), "c3d-highmem-360": (360, 2880), "c3d-standard-4": (4, 16),
    "c3d-standard-8": (8, 32), "c3d-standard-16": (16, 64), "c3d-standard-30": (30, 120),
    "c3d-standard-60": (60, 240), "c3d-standard-90": (90, 360), "c3d-standard-180": (180, 720),
    "c3d-standard-360": (360, 1440),
    # c4
    "c4-highcpu-2": (2, 4), "c4-highcpu-4": (4, 8), "c4-highcpu-8": (8, 16), "c4-highcpu-16": (16, 32),
    "c4-highcpu-24": (24, 48), "c4-highcpu-32": (32, 64), "c4-highcpu-48": (48, 96), "c4-highcpu-96": (96, 192),
    "c4-highcpu-144": (144, 288), "c4-highcpu-192": (192, 384), "c4-highcpu-288": (288, 576), "c4-highmem-2": (2, 15),
    "c4-highmem-4": (4, 31), "c4-highmem-8": (8, 62), "c4-highmem-16": (16, 124), "c4-highmem-24": (24, 186),
    "c4-highmem-32": (32, 248), "c4-highmem-48": (48, 372), "c4-highmem-96": (96, 744), "c4-highmem-144": (144, 1116),
    "c4-highmem-192": (192, 1488), "c4-highmem-288": (288, 2232), "c4-standard-2": (2, 7), "c4-standard-4": (4, 15),
    "c4-standard-8": (8, 30), "c4-standard-16": (16, 60), "c4-standard-24": (24, 90), "c4-standard-32": (32, 120),
    "c4-standard-48": (48, 180), "c4-standard-96": (96, 360), "c4-standard-144": (144, 540),
    "c4-standard-192": (192, 720), "c4-standard-288": (288, 1080),
    # e2
    "e2-highcpu-2": (2, 2), "e2-highcpu-4": (4, 4), "e2-highcpu-8": (8, 8), "e2-highcpu-16": (16, 16),
    "e2-highcpu-32": (32, 32), "e2-highmem-2": (2, 16), "e2-highmem-4": (4, 32), "e2-highmem-8": (8, 64),
    "e2-highmem-16": (16, 128), "e2-standard-2": (2, 8), "e2-standard-4": (4, 16), "e2-standard-8": (8, 32),
    "e2-standard-16": (16, 64), "e2-standard-32": (32, 128),
    # n1
    "n1-highcpu-2": (2, 1.8), "n1-highcpu-4": (4, 3.6), "n1-highcpu-8": (8, 7.2), "n1-highcpu-16": (16, 14.4),
    "n1-highcpu-32": (32, 28.8), "n1-highcpu-64": (64, 57.6), "n1-highcpu-96": (96, 86.4), "n1-highmem-2": (2, 13),
    "n1-highmem-4": (4, 26), "n1-highmem-8": (8, 52), "n1-highmem-16": (16, 104), "n1-highmem-32": (32, 208),
    "n1-highmem-64": (64, 416), "n1-highmem-96": (96, 624), "n1-standard-1": (1, 3.75), "n1-standard-2": (2, 7.5),
    "n1-standard-4": (4, 15), "n1-standard-8": (8, 30), "n1-standard-16": (16, 60), "n1-standard-32": (32, 120),
    "n1-standard-64": (64, 240), "n1-standard-96": (96, 360),
    # n2
    "n2-highcpu-2": (2, 2), "n2-highcpu-4": (4, 4), "n2-highcpu-8": (8, 8), "n2-highcpu-16": (16, 16),
    "n2-highcpu-32": (32, 32), "n2-highcpu-48": (48, 48), "n2-highcpu-64": (64, 64), "n2-highcpu-80": (80, 80),
    "n2-highcpu-96": (96, 96), "n2-highmem-2": (2, 16), "n2-highmem-4": (4, 32), "n2-highmem-8": (8, 64),
    "n2-highmem-16": (16, 128), "n2-highmem-32": (32, 256), "n2-highmem-48": (48, 384), "n2-highmem-64": (64, 512),
    "n2-highmem-80": (80, 640), "n2-highmem-96": (96, 768), "n2-highmem-128": (128, 864), "n2-standard-2": (2, 8),
    "n2-standard-4": (4, 16), "n2-standard-8": (8, 32), "n2-standard-16": (16, 64), "n2-standard-32": (32, 128),
    "n2-standard-48": (48, 192), "n2-standard-64": (64, 256), "n2-standard-80": (80, 320),
    "n2-standard-96": (96, 384), "n2-standard-128": (128, 512),
    # n2d
    "n2d-highcpu-2": (2, 2), "n2d-highcpu-4": (4, 4), "n2d-highcpu-8": (8, 8), "n2d-highcpu-16": (16, 16),
    "n2d-highcpu-32": (32, 32), "n2d-highcpu-48": (48, 48), "n2d-highcpu-64": (64, 64), "n2d-highcpu-80": (80, 80),
    "n2d-highcpu-96": (96, 96), "n2d-highcpu-128": (128, 128), "n2d-highcpu-224": (224, 224),
    "n2d-highmem-2": (2, 16), "n2d-highmem-4": (4, 32), "n2d-highmem-8": (8, 64), "n2d-highmem-16": (16, 128),
    "n2d-highmem-32": (32, 256), "n2d-highmem-48": (48, 384), "n2d-highmem-64": (64, 512),
    "n2d-highmem-80": (80, 640), "n2d-highmem-96": (96, 768), "n2d-standard-2": (2, 8), "n2d-standard-4": (4, 16),
    "n2d-standard-8": (8, 32), "n2d-standard-16": (16, 64), "n2d-standard-32": (32, 128),
    "n2d-standard-48": (48, 192), "n2d-standard-64": (64, 256), "n2d-standard-80": (80, 320),
    "n2d-standard-96": (96, 384), "n2d-standard-128": (128, 512), "n2d-standard-224": (224, 896),
    # n4
    "n4-highcpu-2": (2, 4), "n4-highcpu-4": (4, 8), "n4-highcpu-8": (8, 16), "n4-highcpu-16": (16, 32),
    "n4-highcpu-32": (32, 64), "n4-highcpu-48": (48, 96), "n4-highcpu-64": (64, 128), "n4-highcpu-80": (80, 160),
    "n4-highmem-2": (2, 16), "n4-highmem-4": (4, 32), "n4-highmem-8": (8, 64), "n4-highmem-16": (16, 128),
    "n4-highmem-32": (32, 256), "n4-highmem-48": (48, 384), "n4-highmem-64": (64, 512), "n4-highmem-80": (80, 640),
    "n4-standard-2": (2, 8), "n4-standard-4": (4, 16), "n4-standard-8": (8, 32), "n4-standard-16": (16, 64),
    "n4-standard-32": (32, 128), "n4-standard-48": (48, 192), "n4-standard-64": (64, 256),
    "n4-standard-80": (80, 320),
    # t2d
    "t2d-standard-1": (1, 4), "t2d-standard-2": (2, 8), "t2d-standard-4": (4, 16), "t2d-standard-8": (8, 32),
    "t2d-standard-16": (16, 64), "t2d-standard-32": (32, 128), "t2d-standard-48": (48, 192),
    "t2d-standard-60": (60, 240),
}  # fmt: skip
_TPU: dict[str, tuple[int, float]] = {
    "ct4p-hightpu-4t": (240, 407),  # plan-tpus' TPU v4 table; not in the machineTypes list
    "ct5lp-hightpu-1t": (24, 48), "ct5lp-hightpu-4t": (112, 192), "ct5lp-hightpu-8t": (224, 384),
    "ct5p-hightpu-4t": (208, 448),
    "ct6e-standard-1t": (44, 176), "ct6e-standard-4t": (180, 720), "ct6e-standard-8t": (360, 1440),
    "tpu7x-standard-1t": (56, 240), "tpu7x-standard-4t": (224, 960),
}  # fmt: skip
_CHIPS = {m: chips for g in GENERATIONS for m, chips in g.machine_types.items()}


def _shape(vcpus: int, gb: float, chips: int = 0) -> MachineShape:
    return MachineShape(vcpus, round(gb * GIB), chips)


CPU_MACHINE_TYPES: dict[str, MachineShape] = {name: _shape(*row) for name, row in _CPU.items()}
"""The predefined CPU machine types tpuray knows, for the system pool."""
TPU_HOST_MACHINE_TYPES: dict[str, MachineShape] = {
    name: _shape(vcpus, gb, _CHIPS[name]) for name, (vcpus, gb) in _TPU.items()
}
"""Every TPU host machine type ``topology.GENERATIONS`` plans onto (a test keeps the two equal)."""


# ---- custom types --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CustomLimits:
    """What a series' custom machine types may be (the helper sample's ``typeLimit``)."""

    prefix: str
    """The name before ``-<vCPUs>-<MiB>``: ``e2-custom``, or N1's bare ``custom``."""
    vcpus: tuple[int, ...]
    min_mib_per_vcpu: int
    max_mib_per_vcpu: int
    extended_max_mib: int | None = None
    """Extended memory (a ``-ext`` suffix): more than ``max_mib_per_vcpu`` per vCPU, up to this in all; None: none."""

    def problem(self, vcpus: int, mib: int, extended: bool) -> str | None:
        name = f"{self.prefix}-{vcpus}-{mib}{'-ext' if extended else ''}"
        if vcpus not in self.vcpus:
            return f"{name}: {self.prefix}-<vCPUs>-<MiB> takes {_spans(self.vcpus)} vCPUs, not {vcpus}"
        if mib % 256:
            return f"{name}: custom memory is a multiple of 256 MiB, not {mib} MiB"
        low, high = vcpus * self.min_mib_per_vcpu, vcpus * self.max_mib_per_vcpu
        if extended and self.extended_max_mib is None:
            return f"{name}: {self.prefix} types have no extended memory (-ext)"
        if mib < low:
            return f"{name}: {vcpus} vCPUs take at least {low} MiB ({self.min_mib_per_vcpu} MiB per vCPU)"
        if mib > high and self.extended_max_mib is None:
            return f"{name}: {vcpus} vCPUs take at most {high} MiB ({self.max_mib_per_vcpu} MiB per vCPU)"
        if mib > high and not extended:
            return (
                f"{name}: more than {self.max_mib_per_vcpu} MiB per vCPU ({high} MiB) is extended memory, named "
                f"{name}-ext"
            )
        if extended and mib <= high:
            return f"{name}: {mib} MiB is within {vcpus} vCPUs' {high} MiB, no extended memory: {name[:-4]}"
        if self.extended_max_mib is not None and mib > self.extended_max_mib:
            return f"{name}: {self.prefix}-<vCPUs>-<MiB>-ext has at most {self.extended_max_mib} MiB"
        return None


def _spans(values: tuple[int, ...]) -> str:
    """``2-32 in steps of 2, 36-128 in steps of 4`` for the sample's ranges, or the list itself."""
    parts, i = [], 0
    while i < len(values):
        j = i
        step = values[i + 1] - values[i] if i + 1 < len(values) else 0
        while j + 1 < len(values) and values[j + 1] - values[j] == step:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}-{values[j]} in steps of {step}")
            i = j + 1
        else:
            parts.append(str(values[i]))
            i += 1
    return ", ".join(parts)


CUSTOM_LIMITS: dict[str, CustomLimits] = {
    "e2-custom": CustomLimits("e2-custom", tuple(range(2, 33, 2)), 512, 8192),
    "n2-custom": CustomLimits(
        "n2-custom", (*range(2, 33, 2), *range(36, 129, 4)), 512, 8192, extended_max_mib=624 * GIB
    ),
    "n2d-custom": CustomLimits("n2d-custom", (2, 4, 8, 16, 32, 48, 64, 80, 96), 512, 8192, extended_max_mib=768 * GIB),
    "custom": CustomLimits("custom", (1, *range(2, 97, 2)), 922, 6656, extended_max_mib=624 * GIB),
}
"""The custom types of E2, N2, N2D and N1, by the prefix of their names."""
_CUSTOM_SOURCE = "https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type"
_CUSTOM = re.compile(r"^((?:[a-z0-9]+-)?custom)-([0-9]{1,4})-([0-9]{1,8})(-ext)?$")


def _custom(machine_type: str) -> tuple[CustomLimits | None, int, int, bool] | None:
    m = _CUSTOM.match(machine_type)
    if m is None:
        return None
    return CUSTOM_LIMITS.get(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) is not None


def machine_shape(machine_type: str) -> MachineShape | None:
    """The vCPUs, memory and chips of ``machine_type``; None where it is not a type tpuray knows (never derived)."""
    if (known := CPU_MACHINE_TYPES.get(machine_type) or TPU_HOST_MACHINE_TYPES.get(machine_type)) is not None:
        return known
    custom = _custom(machine_type)
    if custom is None or custom[0] is None or custom[0].problem(*custom[1:]) is not None:
        return None
    _, vcpus, mib, _ = custom
    return MachineShape(vcpus, mib)


# GKE taints every node of an Arm node pool kubernetes.io/arch=arm64:NoSchedule unless the pool's taintConfig says
# otherwise (the GKE API's NodeConfig.taintConfig.architectureTaintBehavior: "unspecified ... defaults to ARM: taints
# all the nodes in the node pool with the default ARM taint",
# https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/NodeConfig). tpuray's system pool sets no
# taintConfig and the Ray head and the controllers on it tolerate no such taint, so they would never schedule.
ARM_SERIES: dict[str, str] = {"c4a": "c4", "t2a": "t2d"}
"""The Arm CPU series, each with the x86 series whose types are offered instead."""

# ---- refusals -----------------------------------------------------------------------------------------------------
_PREDEFINED = re.compile(r"^([a-z0-9]+)-([a-z]+)-([0-9]{1,4})")


@functools.cache
def _by_series() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in CPU_MACHINE_TYPES:
        out.setdefault(name.split("-", 1)[0], []).append(name)
    return out


def nearest_machine_types(machine_type: str, n: int = 3) -> list[str]:
    """The ``n`` CPU machine types of the table nearest ``machine_type``: of its series and type class where the
    name has them, then closest in vCPUs in log space (so 64 is as near 32 as 16 is); by spelling otherwise."""
    custom = _custom(machine_type)
    m = _PREDEFINED.match(machine_type)
    if custom is not None:
        _, vcpus, mib, _ = custom
        series = "n1" if machine_type.startswith("custom-") else machine_type.split("-", 1)[0]
        want_vcpus, want_mib, kind = vcpus, mib, None
    elif m is not None:
        series, kind, want_vcpus, want_mib = m.group(1), m.group(2), int(m.group(3)), None
        series = ARM_SERIES.get(series, series)
    else:
        among = _by_series().get(machine_type.split("-", 1)[0]) or list(CPU_MACHINE_TYPES)
        return difflib.get_close_matches(machine_type, among, n=n) or ["e2-standard-8"]  # the default
    candidates = _by_series().get(series) or list(CPU_MACHINE_TYPES)

    def distance(name: str) -> tuple[float, str]:
        shape, kind_of = CPU_MACHINE_TYPES[name], name.split("-")[1]
        d = abs(math.log2(max(want_vcpus, 1)) - math.log2(shape.vcpus))
        if want_mib is not None:
            d += abs(math.log2(max(want_mib, 1)) - math.log2(shape.memory_mib))
        if kind is not None and kind_of != kind:
            d += 1
        return (d, name)

    return sorted(candidates, key=distance)[:n]


def machine_type_problem(machine_type: str) -> str | None:
    """Why ``machine_type`` is not a machine type tpuray knows (with the nearest that are), or None."""
    if machine_shape(machine_type) is not None:
        return None
    near = ", ".join(nearest_machine_types(machine_type))
    custom = _custom(machine_type)
    customs = ", ".join(f"{p}-<vCPUs>-<MiB>" for p in CUSTOM_LIMITS)
    if custom is not None and (limits := custom[0]) is not None:
        why = limits.problem(*custom[1:])
        return f"{why} ({_CUSTOM_SOURCE}); nearest predefined types: {near}"
    if custom is not None:
        return (
            f"{machine_type}: tpuray knows the limits of custom types {customs} only ({_CUSTOM_SOURCE}); nearest "
            f"predefined types: {near}"
        )
    series = machine_type.split("-", 1)[0]
    if series in ARM_SERIES:
        return (
            f"{machine_type} is an Arm machine type: GKE taints Arm nodes kubernetes.io/arch=arm64:NoSchedule and "
            f"the pods tpuray runs on the system pool tolerate no such taint; nearest x86 types: {near}"
        )
    if series in _by_series():
        return (
            f"{machine_type}: the Compute API's machine-type list has no such {series} type, or tpuray leaves it out "
            f"(catalog.machine_shapes; a shape is never derived from a name); nearest valid types: {near}"
        )
    return (
        f"{machine_type} is not a machine type tpuray knows the vCPUs and memory of (catalog.machine_shapes holds "
        f"series {', '.join(sorted(_by_series()))}, and custom types {customs}); "
        f"nearest valid types: {near}"
    )
