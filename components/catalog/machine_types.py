"""What a GKE node of each machine type offers its pods: vCPUs, memory and TPU chips, less what GKE reserves.

Pure Python. The config (``ray.headCpu`` against ``cluster.systemMachineType``, a memory file cache against its
node) and the review rule that fits every planned Ray pod on its node pool (``review.pod_fit``) read this, so the
arithmetic is written once. A machine type this module does not know is ``None`` ("unknown"), never a pass.

Sources:

- The machines' vCPUs and memory: the one table of :mod:`~tpuray.components.catalog.machine_shapes`, which
  cites the Compute API's machine-type list; a type it does not hold is unknown here, never derived from its name.
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

from dataclasses import dataclass

from tpuray.components.catalog.machine_shapes import GIB, machine_shape

__all__ = [
    "DAEMONSET_HEADROOM",
    "EVICTION_THRESHOLD_MIB",
    "GCSFUSE_METADATA_PREFETCH_REQUESTS",
    "GCSFUSE_SIDECAR_REQUESTS",
    "KUBERAY_AUTOSCALER_REQUESTS",
    "Allocatable",
    "allocatable",
    "gke_reserved_cpu_millicores",
    "gke_reserved_memory_mib",
    "image_streaming_reserved_memory_mib",
    "schedulable",
]


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


# ---- GKE's reservations (plan-node-sizes) ---------------------------------------------------------------------
EVICTION_THRESHOLD_MIB = 100
"""The kubelet's hard eviction threshold GKE sets: kept free beside the reserved memory."""
_MEMORY_TIERS = ((4, 0.25), (8, 0.20), (16, 0.10), (128, 0.06))
"""(up to GiB, share): 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112; 2% above."""
# Image streaming's reservation, by the same tiers: 10% of the first 4 GiB, 8% of the next 4, 4% of the next 8, 2.4% of
# the next 112 and 0.8% above 128 GiB; none on a node below 1 GiB. These are the image-streaming page's figures as
# hatemosphere/gke-node-allocatable-memory-calculator (gke_memory_calculator.py, container_streaming_reserved_memory)
# transcribes them from that section; tpuray's earlier tiers (1%, 0.8%, 0.4%, 0.24%, 0.08%) were a tenth of them and
# cited nothing else. A pod held to the larger reservation fits under the smaller one as well.
_STREAMING_TIERS = ((4, 0.10), (8, 0.08), (16, 0.04), (128, 0.024))
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
    """The memory image streaming reserves on top, on nodes of a pool that streams images (none below 1 GiB)."""
    if memory_mib < GIB:
        return 0
    return int(_tiered(memory_mib / GIB, _STREAMING_TIERS, 0.008) * GIB + 0.5)


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
