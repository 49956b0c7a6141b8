"""The KubeRay TPU webhook, which gives every multi-host Ray TPU pod its worker id and hostnames: registered for
the stack's Ray pods, and running a release that serves the stack's generations and reads KubeRay's pod indexing.
Pure functions of the objects read, like :mod:`.checks`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from tpuray.components.catalog.names import TPU_WEBHOOK, TPU_WEBHOOK_SOURCE, WEBHOOK_POD_LABEL
from tpuray.components.catalog.pins import (
    MULTI_HOST_INDEXING,
    WEBHOOK_BASE_RELEASE,
    WEBHOOK_GENERATION_FLOORS,
    WEBHOOK_INDEXING_RELEASE,
    release_key,
)
from tpuray.components.config import StackConfig
from tpuray.components.doctor.objects import (
    container_named,
    container_names,
    deployment_ready,
    describe_hint,
    find_deployment,
    image_tag,
    item_paths,
    mapping_at,
    meta,
    name,
    short,
    strings_at,
    text_at,
)
from tpuray.components.doctor.operator_gates import operator_gate
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult

__all__ = ["check_tpu_webhook", "check_tpu_webhook_version"]

_SRC_WEBHOOK_INDEXING = "https://github.com/ai-on-gke/kuberay-tpu-webhook/commit/f82f9b4"


def _mutates_pod_create(cfg_obj: Mapping[str, Any], hook: tuple[str | int, ...]) -> bool:
    """A webhook (at ``hook`` of its MutatingWebhookConfiguration) with a rule on pod CREATE."""
    for rule in item_paths(cfg_obj, *hook, "rules"):
        ops, groups, resources = (set(strings_at(cfg_obj, *rule, k)) for k in ("operations", "apiGroups", "resources"))
        if ({"CREATE", "*"} & ops) and ({"", "*"} & groups) and ({"pods", "*"} & resources):
            return True
    return False


def _selects_ray_pods(cfg_obj: Mapping[str, Any], hook: tuple[str | int, ...]) -> bool:
    selector = mapping_at(cfg_obj, *hook, "objectSelector", "matchLabels")
    return bool(selector) and all(selector.get(k) == v for k, v in WEBHOOK_POD_LABEL.items())


def check_tpu_webhook(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    found = []
    for cfg_obj in objs.webhooks:
        for hook in item_paths(cfg_obj, "webhooks"):
            said = f"{name(cfg_obj)}/{text_at(cfg_obj, *hook, 'name')}"
            selects, creates = _selects_ray_pods(cfg_obj, hook), _mutates_pod_create(cfg_obj, hook)
            if creates and ("tpu" in said.lower() or selects):
                found.append(said)
    multi_host = sorted(p.name for p in cfg.slice_pools if p.tpu_slice.multi_host)
    fact = (
        "multi-host Ray TPU pods need the KubeRay TPU webhook (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES): a mutating "
        f"webhook on pod CREATE for {', '.join(f'{k}={v}' for k, v in WEBHOOK_POD_LABEL.items())}"
    )
    # The KubeRay Helm chart does not bundle it (the GKE Ray add-on did; the config refuses the add-on). A
    # single-host pod is its slice's only worker: the workload reads worker 0 without it (workloads/placement/probe.py).
    fix = f"install the {TPU_WEBHOOK} Helm chart ({TPU_WEBHOOK_SOURCE})"
    if not found and not multi_host:
        return CheckResult(
            "tpu-webhook", "pass", f"{fact}; none registered, and no pool is multi-host", TPU_WEBHOOK_SOURCE, fix
        )
    if not found:
        return CheckResult(
            "tpu-webhook", "fail", f"{fact} ({short(multi_host)}); none registered", TPU_WEBHOOK_SOURCE, fix
        )
    return CheckResult("tpu-webhook", "pass", f"{fact}; found {short(found)}", TPU_WEBHOOK_SOURCE, fix)


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
