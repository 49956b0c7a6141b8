"""Every metric name and label tpuray emits or reads, each with its public source.

Pure data, no Pulumi: the workload (which exports the training metrics and emulates the device plugin), the
Managed Prometheus objects, the dashboard and the tests all read these, so each name is written once.

Four producers land in one Prometheus:

* **tpuray's training metrics**, exported through ``ray.util.metrics`` by the train function
  (:func:`tpuray.workloads.report_step_metrics`). Ray's metrics agent serves every ``ray.util.metrics`` metric on
  the node's metrics export port with the ``ray_`` namespace prefix (``ray/_private/metrics_agent.py``:
  ``f"{self._namespace}_{metric_name}"``, namespace ``ray``). All are gauges: a restarted worker sets the run's
  cumulative figures again instead of restarting a counter from 0.
* **The GKE TPU device plugin** (``tpu-device-plugin`` DaemonSet in ``kube-system``), serving Prometheus text on
  each TPU node's port 2112 at ``/metrics``
  (https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/inference/autoscaling-tpu#metrics;
  GoogleCloudPlatform/container-engine-accelerators ``pkg/tpu/metrics``, whose test shows the exposition).
* **Ray's reporter agent**, which reads the device plugin at ``TPU_DEVICE_PLUGIN_ADDR`` and re-exports per-chip
  gauges ``ray_tpu_*`` (Ray 2.60 ``ray/dashboard/modules/reporter/reporter_agent.py`` ``_get_tpu_usage`` and
  ``METRICS_GAUGES``; tag keys ``ray/dashboard/consts.py`` ``TPU_TAG_KEYS``).
* **Kueue's controller manager** (``sigs.k8s.io/kueue`` ``pkg/metrics/metrics.go``, subsystem ``kueue``;
  https://kueue.sigs.k8s.io/docs/reference/metrics/).
"""

from __future__ import annotations

from typing import Final

# ---- Ray's Prometheus export -------------------------------------------------------------------------------
RAY_PROMETHEUS_PREFIX: Final = "ray_"
"""Ray's metrics agent prefixes every metric it serves (its own and ``ray.util.metrics``) with ``ray_``."""


def ray_exported(name: str) -> str:
    """The Prometheus name of a metric recorded through Ray (``ray.util.metrics`` or Ray's own)."""
    return RAY_PROMETHEUS_PREFIX + name


# ---- tpuray's training metrics (ray.util.metrics gauges; exported as ray_<name>) --------------------------
TRAIN_STEP_TIME: Final = "tpuray_train_step_time_seconds"
"""Median wall time of an optimizer step over the run so far (seconds)."""
TRAIN_TOKENS_PER_CHIP: Final = "tpuray_train_tokens_per_second_per_chip"
"""Training tokens per second per chip."""
TRAIN_MFU: Final = "tpuray_train_mfu_ratio"
"""Model FLOPs utilisation in [0, 1] against the catalog's peak bf16 FLOP/s per chip. Only on real chips: an
emulated slice (XLA on host CPU) exports no MFU, since a ratio to a TPU's peak means nothing there."""
TRAIN_COMPILES: Final = "tpuray_train_xla_compiles"
"""XLA graph compilations so far on this worker (torch_xla's ``CompileTime`` metric count)."""
TRAIN_CHECKPOINT_SAVE: Final = "tpuray_train_checkpoint_save_seconds"
"""Seconds the run has spent blocked saving checkpoints."""
TRAIN_CHECKPOINT_RESTORE: Final = "tpuray_train_checkpoint_restore_seconds"
"""Seconds the run has spent blocked restoring checkpoints."""
TRAIN_RESTARTS: Final = "tpuray_train_restarts"
"""Times the run resumed from a checkpoint after its workers were restarted."""
TRAIN_GOODPUT: Final = "tpuray_train_goodput_ratio"
"""Productive training time over the run's elapsed time, in [0, 1] (:mod:`tpuray.workloads.signals.goodput`)."""
TRAIN_BADPUT: Final = "tpuray_train_badput_seconds"
"""Unproductive seconds of the run, one series per ``bucket`` (:data:`BADPUT_BUCKETS`)."""
TRAIN_PRODUCTIVE: Final = "tpuray_train_productive_seconds"
"""Productive training seconds of the run (the goodput numerator)."""
TRAIN_ELAPSED: Final = "tpuray_train_elapsed_seconds"
"""Elapsed seconds of the run since its first start (the goodput denominator)."""
TRAIN_TIME_TO_FIRST_STEP: Final = "tpuray_train_time_to_first_step_seconds"
"""Seconds from the latest start of the run (the job's start, for its first attempt; the restarted workers'
start, after a restart) until its first optimizer step ended: TPU initialisation, training prep, checkpoint restore
and the first step's compilation together (:mod:`tpuray.workloads.signals.goodput`)."""

TRAIN_LIVE_SLICES: Final = "tpuray_train_live_slices"
"""An elastic run's live slices (``workload.elastic``): each step of the line is a resize; fixed-size runs export
none."""
TRAIN_RUN_TAG: Final = "run"
"""Tag on every training metric: the run's name (``RunConfig.name``)."""
TRAIN_SLICE_TAG: Final = "tpu_slice"
"""Tag on every training metric: the slice shape the run trains on (``TpuSlice`` as text, e.g. ``v6e:2x4``)."""
TRAIN_BUCKET_TAG: Final = "bucket"
"""Tag of :data:`TRAIN_BADPUT`: one of :data:`BADPUT_BUCKETS`."""
TRAIN_TAG_KEYS: Final = (TRAIN_RUN_TAG, TRAIN_SLICE_TAG)

TRAIN_METRICS: Final = (
    TRAIN_STEP_TIME,
    TRAIN_TOKENS_PER_CHIP,
    TRAIN_MFU,
    TRAIN_COMPILES,
    TRAIN_CHECKPOINT_SAVE,
    TRAIN_CHECKPOINT_RESTORE,
    TRAIN_RESTARTS,
    TRAIN_GOODPUT,
    TRAIN_BADPUT,
    TRAIN_PRODUCTIVE,
    TRAIN_ELAPSED,
    TRAIN_TIME_TO_FIRST_STEP,
    TRAIN_LIVE_SLICES,
)

# ---- goodput buckets: Google's ML goodput definitions --------------------------------------------------------
# AI-Hypercomputer/ml-goodput-measurement (PyPI ml-goodput-measurement 0.2.x), goodput_utils.py ``BadputType``;
# the value is the enum member's name in lower case.
BADPUT_TPU_INITIALIZATION: Final = "tpu_initialization"
BADPUT_TRAINING_PREP: Final = "training_prep"
BADPUT_PROGRAM_STARTUP: Final = "program_startup"
BADPUT_DATA_LOADING_SYNC: Final = "data_loading_sync"
BADPUT_CHECKPOINT_SAVE: Final = "unproductive_checkpoint_save_time"
BADPUT_CHECKPOINT_RESTORE: Final = "unproductive_checkpoint_restore_time"
BADPUT_WASTED_PROGRESS: Final = "wasted_progress_from_disruption"
BADPUT_INFRASTRUCTURE_RECOVERY: Final = "infrastructure_recovery_from_disruption"
BADPUT_OTHER: Final = "other"
BADPUT_BUCKETS: Final = (
    BADPUT_TPU_INITIALIZATION,
    BADPUT_TRAINING_PREP,
    BADPUT_PROGRAM_STARTUP,
    BADPUT_DATA_LOADING_SYNC,
    BADPUT_CHECKPOINT_SAVE,
    BADPUT_CHECKPOINT_RESTORE,
    BADPUT_WASTED_PROGRESS,
    BADPUT_INFRASTRUCTURE_RECOVERY,
    BADPUT_OTHER,
)

# ---- the GKE TPU device plugin's /metrics (port 2112 on every TPU node) -----------------------------------------
TPU_DEVICE_PLUGIN_METRICS_PORT: Final = 2112
"""Port of the device plugin's Prometheus endpoint on the node's IP (the GKE page above; Ray's reporter agent
comment ``"{HOST_IP}:2112"``). The NetworkPolicy and the emulation read it from here."""
TPU_DEVICE_PLUGIN_METRICS_PATH: Final = "/metrics"
TPU_DEVICE_PLUGIN_ADDR_ENV: Final = "TPU_DEVICE_PLUGIN_ADDR"
"""Env var Ray's reporter agent reads the plugin's ``host:port`` from (the GKE TPU webhook injects it)."""

# What the plugin serves: its source, ai-on-gke/tpu-device-plugin ``pkg/metrics/prom_metrics.go`` (the gauges and
# ``UpdateRuntimeMetrics`` / ``UpdateHostMetrics``, which set them), as captured from tpu-device-plugin
# v1.35.7-gke.0 (facebookincubator/dynolog ``dynolog/src/tpumon`` tests) and as Ray parses it (ray
# ``dashboard/modules/reporter/tests/test_reporter.py`` ``test_get_tpu_usage``). Two sources feed it: the runtime
# metrics of each container's libtpu (duty cycle, HBM; chips indexed across the slice) and the host's own
# (TensorCore and HBM bandwidth utilisation; chips indexed 0..N-1 on the node). Per chip bound to a container
# (namespace/pod/container labels):
DP_DUTY_CYCLE: Final = "duty_cycle"
"""Percent of time the chip was actively processing (0-100)."""
DP_MEMORY_USED: Final = "memory_used"
"""HBM bytes allocated."""
DP_MEMORY_TOTAL: Final = "memory_total"
"""HBM bytes available on the chip."""
DP_TENSORCORE_UTILIZATION: Final = "tensorcore_utilization"
"""Percent TensorCore utilisation (0-100): a host metric indexed 0..N-1 on the node (Ray re-indexes the others)."""
DP_MEMORY_BANDWIDTH_UTILIZATION: Final = "memory_bandwidth_utilization"
"""Percent HBM bandwidth utilisation (0-100), a host metric like :data:`DP_TENSORCORE_UTILIZATION`."""
# The same per chip without the pod labels. The runtime ones come from a container's libtpu, so like the series
# above they exist only for chips bound to a container (``UpdateRuntimeMetrics`` returns early without one):
DP_DUTY_CYCLE_NODE: Final = "duty_cycle_node"
DP_MEMORY_USED_NODE: Final = "memory_used_node"
DP_MEMORY_TOTAL_NODE: Final = "memory_total_node"
# The host ones are set for every chip of the node, bound or not (``UpdateHostMetrics``):
DP_TENSORCORE_UTILIZATION_NODE: Final = "tensorcore_utilization_node"
DP_MEMORY_BANDWIDTH_UTILIZATION_NODE: Final = "memory_bandwidth_utilization_node"
DP_CHIP_METRICS: Final = (
    DP_DUTY_CYCLE,
    DP_MEMORY_USED,
    DP_MEMORY_TOTAL,
    DP_TENSORCORE_UTILIZATION,
    DP_MEMORY_BANDWIDTH_UTILIZATION,
)
DP_RUNTIME_NODE_METRICS: Final = (DP_DUTY_CYCLE_NODE, DP_MEMORY_USED_NODE, DP_MEMORY_TOTAL_NODE)
"""Node series of bound chips only."""
DP_HOST_NODE_METRICS: Final = (DP_TENSORCORE_UTILIZATION_NODE, DP_MEMORY_BANDWIDTH_UTILIZATION_NODE)
"""Node series of every chip of the node."""
DP_NODE_METRICS: Final = (*DP_RUNTIME_NODE_METRICS, *DP_HOST_NODE_METRICS)

DP_ACCELERATOR_ID_LABEL: Final = "accelerator_id"
"""``<TPU VM instance id>-<chip index>``; Ray parses the index after the ``-``."""
DP_MAKE_LABEL: Final = "make"
DP_MAKE: Final = "cloud-tpu"
DP_MODEL_LABEL: Final = "model"
"""The TPU type, e.g. ``tpu-v6e-slice`` (GKE's accelerator label value)."""
DP_TOPOLOGY_LABEL: Final = "tpu_topology"
DP_NAMESPACE_LABEL: Final = "namespace"
DP_POD_LABEL: Final = "pod"
DP_CONTAINER_LABEL: Final = "container"
DP_CHIP_LABELS: Final = (
    DP_ACCELERATOR_ID_LABEL,
    DP_CONTAINER_LABEL,
    DP_MAKE_LABEL,
    DP_MODEL_LABEL,
    DP_NAMESPACE_LABEL,
    DP_POD_LABEL,
    DP_TOPOLOGY_LABEL,
)
DP_NODE_LABELS: Final = (DP_ACCELERATOR_ID_LABEL, DP_MAKE_LABEL, DP_MODEL_LABEL, DP_TOPOLOGY_LABEL)

# ---- Ray's own TPU gauges (reporter agent; exported as ray_<name>) --------------------------------------------
RAY_TPU_TENSORCORE_UTILIZATION: Final = "tpu_tensorcore_utilization"
RAY_TPU_MEMORY_BANDWIDTH_UTILIZATION: Final = "tpu_memory_bandwidth_utilization"
RAY_TPU_DUTY_CYCLE: Final = "tpu_duty_cycle"
RAY_TPU_MEMORY_USED: Final = "tpu_memory_used"
RAY_TPU_MEMORY_TOTAL: Final = "tpu_memory_total"
RAY_TPU_METRICS: Final = (
    RAY_TPU_TENSORCORE_UTILIZATION,
    RAY_TPU_MEMORY_BANDWIDTH_UTILIZATION,
    RAY_TPU_DUTY_CYCLE,
    RAY_TPU_MEMORY_USED,
    RAY_TPU_MEMORY_TOTAL,
)
RAY_NODE_IP_LABEL: Final = "ip"
RAY_SESSION_LABEL: Final = "SessionName"
RAY_TPU_INDEX_LABEL: Final = "TpuIndex"
"""The chip's index on its host (0..chips per host - 1): one series per chip with :data:`RAY_NODE_IP_LABEL`."""
RAY_TPU_DEVICE_NAME_LABEL: Final = "TpuDeviceName"
"""The device plugin's ``accelerator_id``."""
RAY_TPU_TYPE_LABEL: Final = "TpuType"
"""The device plugin's ``model`` label (e.g. ``tpu-v6e-slice``)."""
RAY_TPU_TOPOLOGY_LABEL: Final = "TpuTopology"

# ---- Kueue (controller manager /metrics; subsystem "kueue") --------------------------------------------------
KUEUE_ADMISSION_WAIT: Final = "kueue_admission_wait_time_seconds"
"""Histogram: time from a workload's creation or requeue until admission, per ``cluster_queue``."""
KUEUE_ADMISSION_CHECKS_WAIT: Final = "kueue_admission_checks_wait_time_seconds"
"""Histogram: time from quota reservation until admission, per ``cluster_queue``: with the ProvisioningRequest
admission check (DWS), the time GKE took to provision the slice."""
KUEUE_CLUSTER_QUEUE_LABEL: Final = "cluster_queue"
KUEUE_METRICS_PORT: Final = 8443
"""Kueue's controller manager serves /metrics over HTTPS on 8443 (config/default ``metrics_service.yaml``)."""
