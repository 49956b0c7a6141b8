"""Names of the node labels, Ray labels and extended resources that TPU slices are matched by.

Pure data, no Pulumi: node pools, KubeRay worker groups, policy rules, the plan and the workload's placement
all read these, so each name is written once.
"""

from __future__ import annotations

# GKE (tpu-facts.md §1)
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
"""Node label: the TPU generation as GKE names it (``TpuSlice.gke_accelerator``)."""
GKE_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
"""Node label: the slice topology (``TpuSlice.topology``)."""
TPU_RESOURCE = "google.com/tpu"
"""Extended resource on TPU nodes and in pod requests: chips; also the key of the TPU taint."""

# Ray on TPU VMs (ray/_private/accelerators/tpu.py); KubeRay worker groups set them too (groupSpec.labels)
RAY_SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
RAY_WORKER_ID_LABEL = "ray.io/tpu-worker-id"
RAY_TOPOLOGY_LABEL = "ray.io/tpu-topology"
RAY_POD_TYPE_LABEL = "ray.io/tpu-pod-type"
RAY_ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"

# tpuray's own node labels
POOL_LABEL = "tpuray.io/pool"
"""The slice pool a node belongs to; Ray worker groups select their nodes by it."""
SLICE_LABEL = "tpuray.io/slice"
POD_TYPE_LABEL = "tpuray.io/pod-type"
