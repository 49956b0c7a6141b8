"""What a GKE node of each machine type offers its pods: vCPUs, memory and TPU chips, less what GKE reserves.

Pure Python. The config (``ray.headCpu`` against ``cluster.systemMachineType``, a memory file cache against its
node) and the review rule that fits every planned Ray pod on its node pool (``review.pod_fit``) read this, so the
arithmetic is written once. A machine type this module does not know is ``None`` ("unknown"), never a pass.

Sources:

- The machines: https://cloud.google.com/compute/docs/general-purpose-machines and compute-optimized-machines
  (E2, N1, N2, N2D, N4, C2, C2D, C3, C3D, C4, C4A, T2D: vCPUs in the name, memory per vCPU by type class; custom
  types ``<series>-custom-<vCPUs>-<MiB>``) and the TPU host VMs of
  https://cloud.google.com/compute/docs/tpus/tpu-machines and
  https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus. Compute Engine's "GB" of machine memory are
  GiB (the API's ``memoryMb`` of e2-standard-8 is 32768).
- What GKE keeps for the kubelet, the runtime and the OS, and the eviction threshold:
  https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes ("Memory and CPU reservations"); and
  what image streaming keeps on top on its nodes:
  https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming ("Memory reservation for Image
  streaming").

Not counted by GKE's formula: GKE's own DaemonSets (logging, metrics, networking, the metadata server, the CSI
node drivers, the TPU device plugin), which request from the allocatable like any pod. Their sum depends on the
GKE version and the add-ons and is published nowhere as one figure (the plan-node-sizes page says the allocatable
is shared with system pods: ``kubectl describe node`` lists them under "Non-terminated Pods"), so tpuray keeps
:data:`DAEMONSET_HEADROOM` free for them, its own margin and not a GKE figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuray.components.catalog.topology import GENERATIONS

__all__ = [
    "DAEMONSET_HEADROOM",
    "EVICTION_THRESHOLD_MIB",
    "GCSFUSE_METADATA_PREFETCH_REQUESTS",
    "GCSFUSE_SIDECAR_REQUESTS",
    "KNOWN_CPU_SERIES",
    "KUBERAY_AUTOSCALER_REQUESTS",
    "Allocatable",
    "MachineShape",
    "allocatable",
    "gke_reserved_cpu_millicores",
    "gke_reserved_memory_mib",
    "image_streaming_reserved_memory_mib",
    "machine_shape",
    "schedulable",
]

GIB = 1024
"""MiB per GiB."""


@dataclass(frozen=True)
class MachineShape:
    """A Compute Engine machine type's vCPUs, memory and TPU chips."""

    vcpus: int
    memory_mib: int
    tpu_chips: int = 0


@dataclass(frozen=True)
class Allocatable:
    """What pods may request on one node: CPU in millicores, memory in MiB, ``google.com/tpu`` chips."""

    cpu_millicores: int
    memory_mib: int
    tpu: int

    def plus(self, other: Allocatable) -> Allocatable:
        return Allocatable(
            self.cpu_millicores + other.cpu_millicores, self.memory_mib + other.memory_mib, self.tpu + other.tpu
        )

    def minus(self, other: Allocatable) -> Allocatable:
        return Allocatable(
            self.cpu_millicores - other.cpu_millicores, self.memory_mib - other.memory_mib, self.tpu - other.tpu
        )


# ---- the TPU hosts ------------------------------------------------------------------------------------------
# vCPUs and GiB of every TPU host machine type topology.py lists, as the Compute API's machineTypes list gives them
# (memoryMb / 1024; the list as kept in Cyclenerd/google-cloud-pricing-cost-calculator tools/machinetypes.csv,
# 2026-08-20), and for ct4p-hightpu-4t, which that list lacks, the plan-tpus page's TPU v4 table.
_TPU_HOSTS: dict[str, tuple[int, int] | None] = {
    "ct4p-hightpu-4t": (240, 407),
    "ct5lp-hightpu-1t": (24, 48),
    "ct5lp-hightpu-4t": (112, 192),
    "ct5lp-hightpu-8t": (224, 384),
    "ct5p-hightpu-4t": (208, 448),
    "ct6e-standard-1t": (44, 176),
    "ct6e-standard-4t": (180, 720),
    "ct6e-standard-8t": (360, 1440),
    "tpu7x-standard-1t": (56, 240),
    "tpu7x-standard-4t": (224, 960),
}
_CHIPS = {m: chips for g in GENERATIONS for m, chips in g.machine_types.items()}

# ---- the CPU series: GiB of memory per vCPU of each predefined type class (general-purpose-machines and
# compute-optimized-machines; each ratio as the Compute API's machineTypes list gives its -8 type) ---------------
_GIB_PER_VCPU: dict[str, dict[str, float]] = {
    "c2": {"standard": 4},
    "c2d": {"standard": 4, "highmem": 8, "highcpu": 2},
    "c4": {"standard": 3.75, "highmem": 7.75, "highcpu": 2},
    "c4a": {"standard": 4, "highmem": 8, "highcpu": 2},
    "e2": {"standard": 4, "highmem": 8, "highcpu": 1},
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "n2": {"standard": 4, "highmem": 8, "highcpu": 1},
    "n2d": {"standard": 4, "highmem": 8, "highcpu": 1},
    "n4": {"standard": 4, "highmem": 8, "highcpu": 2},
    "c3": {"standard": 4, "highmem": 8, "highcpu": 2},
    "c3d": {"standard": 4, "highmem": 8, "highcpu": 2},
    "t2d": {"standard": 4},
}
KNOWN_CPU_SERIES: tuple[str, ...] = tuple(sorted(_GIB_PER_VCPU))
"""The CPU series whose machine types this module knows."""
_PREDEFINED = re.compile(r"^([a-z0-9]+)-(standard|highmem|highcpu)-([1-9][0-9]{0,3})$")
_CUSTOM = re.compile(r"^([a-z0-9]+)-custom-([1-9][0-9]{0,3})-([1-9][0-9]{2,7})$")


def machine_shape(machine_type: str) -> MachineShape | None:
    """The vCPUs, memory and chips of ``machine_type``, or None where tpuray does not know them."""
    if machine_type in _TPU_HOSTS:
        known = _TPU_HOSTS[machine_type]
        if known is None:
            return None
        vcpus, gib = known
        return MachineShape(vcpus, gib * GIB, _CHIPS.get(machine_type, 0))
    if m := _CUSTOM.match(machine_type):
        series, vcpus, mib = m.group(1), int(m.group(2)), int(m.group(3))
        return MachineShape(vcpus, mib) if series in _GIB_PER_VCPU else None
    if m := _PREDEFINED.match(machine_type):
        series, kind, vcpus = m.group(1), m.group(2), int(m.group(3))
        per = _GIB_PER_VCPU.get(series, {}).get(kind)
        return None if per is None else MachineShape(vcpus, int(per * vcpus * GIB))
    return None


# ---- GKE's reservations (plan-node-sizes) ---------------------------------------------------------------------
EVICTION_THRESHOLD_MIB = 100
"""The kubelet's hard eviction threshold GKE sets: kept free beside the reserved memory."""
_MEMORY_TIERS = ((4, 0.25), (8, 0.20), (16, 0.10), (128, 0.06))
"""(up to GiB, share): 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112; 2% above."""
_STREAMING_TIERS = ((4, 0.01), (8, 0.008), (16, 0.004), (128, 0.0024))
"""Image streaming's own reservation, the same tiers: 1%, 0.8%, 0.4%, 0.24%; 0.08% above 128 GiB."""
_CPU_TIERS = ((1, 0.06), (2, 0.01), (4, 0.005))
"""(up to cores, share): 6% of the first core, 1% of the next, 0.5% of the next 2; 0.25% of every core above 4."""


def _tiered(amount: float, tiers: tuple[tuple[int, float], ...], above: float) -> float:
    reserved, floor = 0.0, 0
    for top, share in tiers:
        reserved += share * max(0.0, min(amount, top) - floor)
        floor = top
    return reserved + above * max(0.0, amount - floor)


def gke_reserved_memory_mib(memory_mib: int) -> int:
    """The memory GKE reserves on a node of ``memory_mib`` (255 MiB below 1 GiB), without the eviction threshold."""
    if memory_mib < GIB:
        return 255
    return int(_tiered(memory_mib / GIB, _MEMORY_TIERS, 0.02) * GIB + 0.5)


def image_streaming_reserved_memory_mib(memory_mib: int) -> int:
    """The memory image streaming reserves on top, on nodes of a pool that streams images."""
    return int(_tiered(memory_mib / GIB, _STREAMING_TIERS, 0.0008) * GIB + 0.5)


def gke_reserved_cpu_millicores(vcpus: int) -> int:
    return int(_tiered(vcpus, _CPU_TIERS, 0.0025) * 1000 + 0.5)


def allocatable(machine_type: str, *, image_streaming: bool = False) -> Allocatable | None:
    """The node allocatable GKE gives a node of ``machine_type`` (before its DaemonSets), or None: unknown."""
    shape = machine_shape(machine_type)
    if shape is None:
        return None
    memory = shape.memory_mib - gke_reserved_memory_mib(shape.memory_mib) - EVICTION_THRESHOLD_MIB
    if image_streaming:
        memory -= image_streaming_reserved_memory_mib(shape.memory_mib)
    cpu = shape.vcpus * 1000 - gke_reserved_cpu_millicores(shape.vcpus)
    return Allocatable(cpu, memory, shape.tpu_chips)


DAEMONSET_HEADROOM = Allocatable(cpu_millicores=500, memory_mib=1024, tpu=0)
"""What tpuray leaves free on every node for GKE's DaemonSets (see the module's docstring): half a CPU and 1 GiB, its
own margin; a stack whose pods need more of a node than this leaves will fit an empty node and still not schedule."""


def schedulable(machine_type: str, *, image_streaming: bool = False) -> Allocatable | None:
    """What tpuray lets the pods it plans request on one node: the allocatable less :data:`DAEMONSET_HEADROOM`."""
    a = allocatable(machine_type, image_streaming=image_streaming)
    return None if a is None else a.minus(DAEMONSET_HEADROOM)


# ---- what KubeRay and GKE add to a Ray pod's requests ---------------------------------------------------------
KUBERAY_AUTOSCALER_REQUESTS = Allocatable(cpu_millicores=500, memory_mib=512, tpu=0)
"""The autoscaler container KubeRay adds to the head pod of a RayCluster with ``enableInTreeAutoscaling`` and no
``autoscalerOptions.resources`` (ray-project/kuberay v1.7.0 ray-operator/controllers/ray/common/pod.go,
BuildAutoscalerContainer: requests and limits 500m, 512Mi)."""
GCSFUSE_SIDECAR_REQUESTS = Allocatable(cpu_millicores=250, memory_mib=256, tpu=0)
"""The GCS FUSE sidecar GKE's webhook injects into a pod annotated ``gke-gcsfuse/volumes: "true"``, with no
``gke-gcsfuse/*`` resource annotations (GoogleCloudPlatform/gcs-fuse-csi-driver cmd/webhook/main.go, the
``sidecar-cpu-request`` and ``sidecar-memory-request`` defaults: 250m, 256Mi)."""
GCSFUSE_METADATA_PREFETCH_REQUESTS = Allocatable(cpu_millicores=10, memory_mib=10, tpu=0)
"""The metadata prefetch sidecar it adds beside, for a volume with ``gcsfuseMetadataPrefetchOnMount: "true"`` (the
same file: ``metadata-sidecar-cpu-request`` 10m, ``metadata-sidecar-memory-request`` 10Mi)."""
