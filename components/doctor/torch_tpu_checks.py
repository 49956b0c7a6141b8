"""What a stack's TPU runtime needs on a live cluster, beyond what every stack needs: the KubeRay TPU webhook at a
release that serves the stack's generations and the KubeRay operator's pod indexing, and, for ``backend:
torch_tpu``, the env Ray's own TorchTPU path gets from the stack's worker pods (the callback that sets each worker's
TorchTPU env, and Ray counting TPU devices on tpu7x). Pure functions of the objects read, like :mod:`.checks`.
"""

from __future__ import annotations

from functools import partial

from packaging.version import Version

from tpuray.components.catalog.names import (
    POOL_LABEL,
    RAY_TPU_RESOURCE_PER_CHIP_ENV,
    RAY_TRAIN_CALLBACKS_ENV,
    TORCH_TPU_ENV_CALLBACK,
    TPU_WEBHOOK,
    TPU_WEBHOOK_SOURCE,
)
from tpuray.components.catalog.pins import (
    MULTI_HOST_INDEXING,
    WEBHOOK_BASE_RELEASE,
    WEBHOOK_GENERATION_FLOORS,
    WEBHOOK_INDEXING_RELEASE,
    release_key,
)
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.config import StackConfig
from tpuray.components.doctor.objects import (
    container_named,
    container_names,
    deployment_ready,
    describe_hint,
    env_of,
    find_deployment,
    image_tag,
    labels,
    meta,
    name,
    running_tpu_pods,
    short,
    tpu_containers,
)
from tpuray.components.doctor.operator_gates import operator_gate
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import Check, CheckResult

__all__ = [
    "check_torch_tpu_env",
    "check_tpu_webhook_version",
    "runtime_checks",
]

_SRC_RAY_TORCH_TPU = "https://github.com/ray-project/ray/blob/releases/2.60.0/python/ray/train/torch/config.py"
_SRC_WEBHOOK_INDEXING = "https://github.com/ai-on-gke/kuberay-tpu-webhook/commit/f82f9b4"


def check_tpu_webhook_version(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """The webhook's Deployment serves, with a ready replica, a release that serves every multi-host pool's
    generation and, where the KubeRay operator indexes multi-host pods, reads its labels; None without a
    multi-host pool."""
    gens = sorted({p.generation for p in cfg.slice_pools if p.tpu_slice.multi_host})
    if not gens:
        return None
    need = max(Version(WEBHOOK_GENERATION_FLOORS.get(g, WEBHOOK_BASE_RELEASE)) for g in gens)
    fact = (
        f"multi-host {', '.join(gens)} slices need the {TPU_WEBHOOK} >= {need} (>= {WEBHOOK_INDEXING_RELEASE} where "
        f"the KubeRay operator runs {MULTI_HOST_INDEXING})"
    )
    fix = f"install or upgrade the {TPU_WEBHOOK} chart (ray.tpuWebhook.chartVersion; pulumi up installs it)"
    dep = find_deployment(objs, TPU_WEBHOOK, cfg.ray.tpu_webhook.namespace)
    if dep is None:
        return CheckResult(
            "tpu-webhook-version", "fail", f"{fact}; no {TPU_WEBHOOK} Deployment", TPU_WEBHOOK_SOURCE, fix
        )
    at = f"{meta(dep).get('namespace', '?')}/{name(dep)}"
    path = container_named(dep, TPU_WEBHOOK)
    tag = image_tag(dep, path)[1] if path is not None else None
    # its images are tagged v<release>-gke.<n> (the README's "Container Images")
    key = release_key(tag) if tag else None
    have = Version(".".join(map(str, key))) if key else None
    runs = (
        f"{at} runs {tag}"
        if tag
        else (
            f"{at} runs an unknown version"
            + (
                ""
                if path is not None
                else f" (no container {TPU_WEBHOOK}: {', '.join(container_names(dep)) or 'none'})"
            )
        )
    )
    if not deployment_ready(dep):
        return CheckResult(
            "tpu-webhook-version",
            "fail",
            f"{fact}; {runs}, with no ready replica: no pod is mutated",
            TPU_WEBHOOK_SOURCE,
            describe_hint(dep),
        )
    if have is None:
        return CheckResult("tpu-webhook-version", "warn", f"{fact}; {runs} (unknown)", TPU_WEBHOOK_SOURCE, fix)
    if have < need:
        return CheckResult("tpu-webhook-version", "fail", f"{fact}; {runs}", TPU_WEBHOOK_SOURCE, fix)
    indexing, how = operator_gate(cfg, objs, MULTI_HOST_INDEXING)
    floor = Version(WEBHOOK_INDEXING_RELEASE)
    if have >= floor or indexing is False:
        said = how if indexing is False else f"it reads KubeRay's indexing labels (>= {floor})"
        return CheckResult("tpu-webhook-version", "pass", f"{fact}; {runs}; {said}", TPU_WEBHOOK_SOURCE, fix)
    gate_fix = (
        f"turn KubeRay's {MULTI_HOST_INDEXING} gate off (pulumi up: the stack's operator release sets it off), or "
        f"run {TPU_WEBHOOK} >= {floor}"
    )
    strands = (
        f"{TPU_WEBHOOK} < {floor} requires pod affinity on a replicaIndex label it no longer sets once KubeRay "
        "indexes the pods, so no multi-host replica schedules"
    )
    if indexing is None:
        return CheckResult(
            "tpu-webhook-version", "warn", f"{fact}; {runs}; {how}: {strands}", _SRC_WEBHOOK_INDEXING, gate_fix
        )
    return CheckResult(
        "tpu-webhook-version",
        "fail",
        f"{fact}; {runs}, and {how}: {strands}",
        _SRC_WEBHOOK_INDEXING,
        gate_fix,
    )


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


def runtime_checks(cfg: StackConfig, objs: ClusterObjects) -> list[tuple[str, Check]]:
    """The checks above, each with its id, for ``run_checks`` (each gives None where it does not apply)."""
    return [
        ("tpu-webhook-version", partial(check_tpu_webhook_version, cfg, objs)),
        ("torch-tpu-env", partial(check_torch_tpu_env, cfg, objs)),
    ]
