"""What a stack's TPU runtime needs on a live cluster, beyond what every stack needs: the KubeRay TPU webhook at a
version that serves the stack's generations, and, for ``backend: torch_tpu``, the env Ray's own TorchTPU path gets
from the stack's worker pods (the callback that sets each worker's TorchTPU env, and Ray counting TPU devices on
tpu7x). Pure functions of the objects read, like :mod:`.checks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from tpuray.components.catalog.names import (
    POOL_LABEL,
    RAY_TPU_RESOURCE_PER_CHIP_ENV,
    RAY_TRAIN_CALLBACKS_ENV,
    TORCH_TPU_ENV_CALLBACK,
    TPU_WEBHOOK,
    TPU_WEBHOOK_SOURCE,
)
from tpuray.components.catalog.wire import as_list, get_path
from tpuray.components.config import StackConfig
from tpuray.components.doctor.checks import (
    CheckResult,
    _find_deployment,
    _image_tag_version,
    _meta,
    _name,
    _requests_tpu,
    _short,
    _version,
)
from tpuray.components.doctor.reader import ClusterObjects

__all__ = ["WEBHOOK_FLOORS", "check_torch_tpu_env", "check_tpu_webhook_version", "runtime_checks"]

WEBHOOK_FLOORS = {"tpu7x": "1.3.1"}
"""The lowest webhook release that serves a generation, where it is newer than the first one: 1.3.1 "Added Ironwood
(TPU v7x) support" (the version table of the webhook's README, ai-on-gke/kuberay-tpu-webhook)."""
_WEBHOOK_BASE = "1.2.4"
"""The table's first row: TPU v4 to v6e, with KubeRay 1.1.1."""
_SRC_RAY_TORCH_TPU = "https://github.com/ray-project/ray/blob/releases/2.60.0/python/ray/train/torch/config.py"


def check_tpu_webhook_version(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """The webhook's Deployment runs a release that serves every multi-host pool's generation; None without one."""
    gens = sorted({p.generation for p in cfg.slice_pools if p.tpu_slice.multi_host})
    if not gens:
        return None
    need = max((Version(WEBHOOK_FLOORS.get(g, _WEBHOOK_BASE)) for g in gens), default=Version(_WEBHOOK_BASE))
    fact = f"multi-host {', '.join(gens)} slices need the {TPU_WEBHOOK} >= {need}"
    fix = f"install or upgrade the {TPU_WEBHOOK} chart (ray.tpuWebhook.chartVersion; pulumi up installs it)"
    dep = _find_deployment(objs, TPU_WEBHOOK)
    if dep is None:
        return CheckResult(
            "tpu-webhook-version", "fail", f"{fact}; no {TPU_WEBHOOK} Deployment", TPU_WEBHOOK_SOURCE, fix
        )
    tag = _image_tag_version(dep)
    # its images are tagged v<release>-gke.<n> (the README's "Container Images")
    have = _version(tag.split("-", 1)[0] if tag else None)
    where = f"{_meta(dep).get('namespace', '?')}/{_name(dep)} runs {tag or 'an unknown version'}"
    if have is None:
        return CheckResult("tpu-webhook-version", "warn", f"{fact}; {where} (unknown)", TPU_WEBHOOK_SOURCE, fix)
    if have < need:
        return CheckResult("tpu-webhook-version", "fail", f"{fact}; {where}", TPU_WEBHOOK_SOURCE, fix)
    return CheckResult("tpu-webhook-version", "pass", f"{fact}; {where}", TPU_WEBHOOK_SOURCE, fix)


def _env(pod: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in as_list(get_path(pod, "spec", "containers")):
        for e in as_list(get_path(c, "env")):
            if isinstance(e, Mapping) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str):
                out[e["name"]] = e["value"]
    return out


def check_torch_tpu_env(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """Every running TPU worker pod of a ``torch_tpu`` stack names tpuray's callback in ``RAY_TRAIN_CALLBACKS``,
    and counts two TPU resources per chip on tpu7x; None for another backend."""
    if cfg.workload.backend != "torch_tpu":
        return None
    per_chip = {p.name: p.tpu_slice.spec.devices_per_chip for p in cfg.slice_pools}
    fact = (
        f"Ray's own TorchTPU path gets each worker's TORCH_TPU_* env from {TORCH_TPU_ENV_CALLBACK} "
        f"({RAY_TRAIN_CALLBACKS_ENV} on the TPU worker pods), and counts TPU devices on tpu7x "
        f"({RAY_TPU_RESOURCE_PER_CHIP_ENV}=2)"
    )
    fix = "pulumi up (the stack's worker group template sets both); the pods keep the env they were created with"
    pods = [p for p in objs.pods if _meta(p).get("namespace") == cfg.ray.namespace and _requests_tpu(p)]
    if not pods:
        return CheckResult("torch-tpu-env", "warn", f"{fact}; no TPU worker pod runs: unknown", _SRC_RAY_TORCH_TPU, fix)
    bad = []
    for pod in pods:
        env = _env(pod)
        labels = _meta(pod).get("labels")
        pool = labels.get(POOL_LABEL) if isinstance(labels, Mapping) else None
        named = [c.strip() for c in env.get(RAY_TRAIN_CALLBACKS_ENV, "").split(",")]
        want = per_chip.get(str(pool), 1)
        if TORCH_TPU_ENV_CALLBACK not in named:
            bad.append(f"{_name(pod)}: no {RAY_TRAIN_CALLBACKS_ENV}={TORCH_TPU_ENV_CALLBACK}")
        elif want > 1 and env.get(RAY_TPU_RESOURCE_PER_CHIP_ENV) != str(want):
            bad.append(f"{_name(pod)}: {RAY_TPU_RESOURCE_PER_CHIP_ENV} is {env.get(RAY_TPU_RESOURCE_PER_CHIP_ENV)}")
    if bad:
        return CheckResult("torch-tpu-env", "fail", f"{fact}; {_short(bad, 3)}", _SRC_RAY_TORCH_TPU, fix)
    return CheckResult("torch-tpu-env", "pass", f"{fact}; {len(pods)} worker pod(s) have it", _SRC_RAY_TORCH_TPU, fix)


def runtime_checks(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    """The checks above that apply to this stack."""
    return [r for r in (check_tpu_webhook_version(cfg, objs), check_torch_tpu_env(cfg, objs)) if r is not None]
