"""Kueue's controller at the pinned version, and its CRDs serving what the stack renders."""

from __future__ import annotations

from tpuray.components.config import StackConfig
from tpuray.components.doctor.crd_schema import crd_problems, rendered_kinds
from tpuray.components.doctor.objects import (
    deployment_ready,
    find_deployment,
    running_version,
    version,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult, Status
from tpuray.components.doctor.sources import SRC_KUEUE
from tpuray.components.planning.kueue import kueue_spec
from tpuray.components.planning.pool_plan import kueue_entries, pool_plans

__all__ = ["KUEUE_CONTAINER", "KUEUE_CONTROLLER_NAME", "check_kueue"]

KUEUE_CONTROLLER_NAME = "kueue-controller-manager"
KUEUE_CONTAINER = "manager"


def check_kueue(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    k = cfg.kueue
    fix = f"pulumi up installs Kueue {k.chart_version} in {k.namespace} (kueue.enabled: true)"
    dep = find_deployment(objs, KUEUE_CONTROLLER_NAME, k.namespace, only_there=True)
    fact = f"the stack admits jobs through Kueue {k.chart_version}: {k.namespace}/{KUEUE_CONTROLLER_NAME}"
    if dep is None:
        controller = CheckResult("kueue-controller", "fail", f"{fact}; not found", SRC_KUEUE, fix)
    else:
        runs, _ = running_version(dep, KUEUE_CONTAINER)
        fact = f"{fact} runs {runs or 'an unknown version'}"
        if not deployment_ready(dep):
            controller = CheckResult("kueue-controller", "fail", f"{fact}, with no ready replica", SRC_KUEUE, fix)
        elif version(runs) != version(k.chart_version):
            controller = CheckResult(
                "kueue-controller",
                "warn",
                fact,
                SRC_KUEUE,
                f"pulumi up to install the pinned {k.chart_version}, or pin what runs",
            )
        else:
            controller = CheckResult("kueue-controller", "pass", fact, SRC_KUEUE, fix)
    rendered = kueue_spec(cfg, kueue_entries(pool_plans(cfg))).objects
    problems, found = crd_problems(rendered, objs.crds)
    fact = "the stack renders " + ", ".join(f"{kind} ({v})" for kind, v, _ in rendered_kinds(rendered))
    status: Status = "fail" if problems else "pass"
    crds = CheckResult("kueue-crds", status, f"{fact}; {'; '.join(problems) or found}", SRC_KUEUE, fix)
    return [controller, crds]
