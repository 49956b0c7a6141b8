"""What a ``backend: torch_tpu`` stack needs on a live cluster, beyond what every stack needs: the env Ray's own
TorchTPU path gets from the stack's worker pods (the callback that sets each worker's TorchTPU env, and Ray counting
TPU devices on tpu7x). Pure functions of the objects read, like :mod:`.checks`.
"""

from __future__ import annotations

from tpuray.components.catalog.names import (
    POOL_LABEL,
    RAY_TPU_RESOURCE_PER_CHIP_ENV,
    RAY_TRAIN_CALLBACKS_ENV,
    TORCH_TPU_ENV_CALLBACK,
)
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.config import StackConfig
from tpuray.components.doctor.objects import (
    env_of,
    labels,
    name,
    running_tpu_pods,
    short,
    tpu_containers,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult

__all__ = ["check_torch_tpu_env"]

_SRC_RAY_TORCH_TPU = "https://github.com/ray-project/ray/blob/releases/2.60.0/python/ray/train/torch/config.py"


def check_torch_tpu_env(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """Every running TPU worker pod of a ``torch_tpu`` stack names tpuray's callback in ``RAY_TRAIN_CALLBACKS`` in
    its TPU container(s), carries its pool's label, and counts two TPU resources per chip on tpu7x; None for another
    backend."""
    if cfg.workload.backend != "torch_tpu":
        return None
    runtime = RUNTIMES[cfg.workload.backend]
    per_chip = {p.name: runtime.ray_tpu_per_chip(p.tpu_slice) for p in cfg.slice_pools}
    # one count for the whole stack: the config refuses torch_tpu pools that differ (rules.backend_rules)
    stack_per_chip = max(per_chip.values())
    fact = (
        f"Ray's own TorchTPU path gets each worker's TORCH_TPU_* env from {TORCH_TPU_ENV_CALLBACK} "
        f"({RAY_TRAIN_CALLBACKS_ENV} on the TPU worker pods), and counts TPU devices on tpu7x "
        f"({RAY_TPU_RESOURCE_PER_CHIP_ENV}=2)"
    )
    fix = "pulumi up (the stack's worker group template sets both); the pods keep the env they were created with"
    pods = running_tpu_pods(objs, cfg.ray.namespace)
    if not pods:
        return CheckResult("torch-tpu-env", "warn", f"{fact}; no TPU worker pod runs: unknown", _SRC_RAY_TORCH_TPU, fix)
    bad = []
    for pod in pods:
        pool = labels(pod).get(POOL_LABEL)
        if pool not in per_chip:
            bad.append(f"{name(pod)}: {POOL_LABEL} is {pool or 'missing'}, not a pool of the stack")
        want = per_chip.get(str(pool), stack_per_chip)
        for path in tpu_containers(pod):
            env = env_of(pod, path)
            named = [c.strip() for c in env.get(RAY_TRAIN_CALLBACKS_ENV, "").split(",")]
            if TORCH_TPU_ENV_CALLBACK not in named:
                bad.append(f"{name(pod)}: no {RAY_TRAIN_CALLBACKS_ENV}={TORCH_TPU_ENV_CALLBACK}")
            elif want > 1 and env.get(RAY_TPU_RESOURCE_PER_CHIP_ENV) != str(want):
                bad.append(f"{name(pod)}: {RAY_TPU_RESOURCE_PER_CHIP_ENV} is {env.get(RAY_TPU_RESOURCE_PER_CHIP_ENV)}")
    if bad:
        return CheckResult("torch-tpu-env", "fail", f"{fact}; {short(bad, 3)}", _SRC_RAY_TORCH_TPU, fix)
    return CheckResult("torch-tpu-env", "pass", f"{fact}; {len(pods)} worker pod(s) have it", _SRC_RAY_TORCH_TPU, fix)
