"""The KubeRay operator and its CRDs: at the versions and in the namespace the stack needs."""

from __future__ import annotations

from packaging.version import Version

from tpuray.components.config import (
    MIN_KUBERAY_AUTH_OPTIONS,
    StackConfig,
)
from tpuray.components.doctor.crd_schema import crd_problems, rendered_kinds
from tpuray.components.doctor.objects import (
    deployment_ready,
    describe_hint,
    find_deployment,
    labels,
    meta,
    name,
    running_version,
    version,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_CRD_PRUNING, SRC_KUBERAY_AUTH, SRC_KUBERAY_HELM, SRC_NETWORK_POLICY
from tpuray.components.planning.stack_plan import plan_stack

__all__ = [
    "KUBERAY_OPERATOR_NAME",
    "check_kuberay_crds",
    "check_kuberay_operator",
    "check_operator_namespace",
]

KUBERAY_OPERATOR_NAME = "kuberay-operator"


def check_kuberay_operator(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    # The config refuses every stack without the Helm operator and authOptions (cloud_limits.ray_addon_problem).
    ray = cfg.ray
    floor = MIN_KUBERAY_AUTH_OPTIONS
    needs = f"KubeRay >= {floor} (token auth through authOptions)"
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, ray.job_api_namespace)
    fix_install = f"install the kuberay-operator Helm chart {ray.helm_chart_version} (pulumi up installs it)"
    src = SRC_KUBERAY_AUTH
    if dep is None:
        return CheckResult(
            "kuberay-operator",
            "fail",
            f"the stack needs {needs}; no kuberay-operator Deployment found",
            src,
            fix_install,
        )
    text, read = running_version(dep, KUBERAY_OPERATOR_NAME)
    text = labels(dep).get("app.kubernetes.io/version") or text
    have = version(text)
    fact = f"the stack needs {needs}; {meta(dep).get('namespace', '?')}/{name(dep)} runs {text or 'an unknown version'}"
    if not deployment_ready(dep):
        return CheckResult("kuberay-operator", "fail", f"{fact}, with no ready replica", src, describe_hint(dep))
    if have is None:
        return CheckResult("kuberay-operator", "warn", f"{fact} ({read}: unknown)", src, fix_install)
    if have < Version(floor):
        return CheckResult("kuberay-operator", "fail", fact, src, f"upgrade KubeRay (its chart and CRDs) to {floor}+")
    if have != version(ray.helm_chart_version):
        return CheckResult(
            "kuberay-operator",
            "warn",
            f"{fact}; the stack pins chart {ray.helm_chart_version}",
            SRC_KUBERAY_HELM,
            "pulumi up to install the pinned chart, or pin ray.helmChartVersion to what runs",
        )
    return CheckResult("kuberay-operator", "pass", fact, src, fix_install)


def check_operator_namespace(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    """The operator calls the head's job API for RayJob status; the stack's NetworkPolicy admits that port from one
    namespace (``ray.operatorNamespace``, default the Helm chart's; planning/network_policy.py), so an operator
    elsewhere is refused and every RayJob stays unknown."""
    admitted = cfg.ray.job_api_namespace
    fact = f"the job-API NetworkPolicy of namespace {cfg.ray.namespace} admits the KubeRay operator from {admitted}"
    fix = f"run the operator in {admitted}, or set ray.operatorNamespace to where it runs and pulumi up"
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, admitted)
    if dep is None:
        found = f"{fact}; no kuberay-operator Deployment found"
        return CheckResult("kuberay-operator-namespace", "fail", found, SRC_NETWORK_POLICY, fix)
    runs_in = str(meta(dep).get("namespace", "?"))
    if runs_in != admitted:
        return CheckResult(
            "kuberay-operator-namespace", "fail", f"{fact}; it runs in {runs_in}: refused", SRC_NETWORK_POLICY, fix
        )
    return CheckResult("kuberay-operator-namespace", "pass", f"{fact}; it runs there", SRC_NETWORK_POLICY, fix)


def check_kuberay_crds(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    # The stack's name only sets label values, which no CRD schema check reads.
    manifests = plan_stack(cfg, cfg.cluster.name).manifests
    problems, found = crd_problems(manifests, objs.crds)
    fact = "the stack renders " + ", ".join(f"{k} ({v})" for k, v, _ in rendered_kinds(manifests))
    fix = (
        f"install the KubeRay {cfg.ray.helm_chart_version} CRDs (Helm does not upgrade CRDs: kubectl apply "
        "--server-side -k 'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v"
        f"{cfg.ray.helm_chart_version}')"
    )
    if problems:
        return CheckResult("kuberay-crds", "fail", f"{fact}; {'; '.join(problems)}", SRC_CRD_PRUNING, fix)
    return CheckResult("kuberay-crds", "pass", f"{fact}; {found}", SRC_CRD_PRUNING, fix)
