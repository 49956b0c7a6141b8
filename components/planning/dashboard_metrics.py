"""The metric and label names the dashboard reads, each with its public source.

Ray's TPU gauges: the reporter agent reads each host's GKE TPU device plugin (``TPU_DEVICE_PLUGIN_ADDR``, port
2112) and re-exports ``tpu_duty_cycle``, ``tpu_tensorcore_utilization``, ``tpu_memory_used`` and
``tpu_memory_total`` with the tags ``TpuIndex``, ``TpuDeviceName``, ``TpuType``, ``TpuTopology`` and the node's
``ip`` (ray-project/ray ``dashboard/modules/reporter/reporter_agent.py``, ``dashboard/consts.py``); Ray's
Prometheus export prefixes every name with ``ray_``.

Kueue: ``kueue_admission_wait_time_seconds`` and ``kueue_admission_checks_wait_time_seconds`` are histograms per
``cluster_queue`` (kubernetes-sigs/kueue ``pkg/metrics/metrics.go``).
"""

from __future__ import annotations

# ---- Ray's TPU gauges (one series per chip) ------------------------------------------------------------------
TPU_DUTY_CYCLE = "ray_tpu_duty_cycle"
TPU_TENSORCORE_UTILIZATION = "ray_tpu_tensorcore_utilization"
TPU_MEMORY_USED = "ray_tpu_memory_used"
TPU_MEMORY_TOTAL = "ray_tpu_memory_total"
CHIP_INDEX_LABEL = "TpuIndex"
HOST_LABEL = "ip"

# ---- the training job's Ray metrics ----------------------------------------------------------------------------
STEP_SECONDS = "ray_tpuray_step_seconds"
TOKENS_PER_SECOND_PER_CHIP = "ray_tpuray_tokens_per_second_per_chip"
MODEL_TFLOPS_PER_CHIP = "ray_tpuray_model_tflops_per_chip"
GOODPUT_RATIO = "ray_tpuray_goodput_ratio"
BADPUT_SECONDS = "ray_tpuray_badput_seconds"
BADPUT_CAUSE_LABEL = "bucket"
RUN_LABEL = "run"

# ---- Kueue -------------------------------------------------------------------------------------------------------
KUEUE_ADMISSION_WAIT = "kueue_admission_wait_time_seconds"
KUEUE_ADMISSION_CHECKS_WAIT = "kueue_admission_checks_wait_time_seconds"
KUEUE_CLUSTER_QUEUE_LABEL = "cluster_queue"

# ---- scrape-time labels ------------------------------------------------------------------------------------------
POOL_METRIC_LABEL = "tpuray_pool"
"""The slice pool of a sample: the scrape copies the Ray pod's ``tpuray.io/pool`` label onto it."""
