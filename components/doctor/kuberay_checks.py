"""The KubeRay operator and its CRDs: at the versions and in the namespace the stack needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from tpuray.components.config import (
    MIN_KUBERAY_AUTH_OPTIONS,
    StackConfig,
)
from tpuray.components.doctor.crd_schema import crd_problems, rendered_kinds
from tpuray.components.doctor.objects import (
    container_named,
    container_names,
    deployment_ready,
    describe_hint,
    find_deployment,
    image_tag,
    labels,
    meta,
    name,
    version,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_CRD_PRUNING, SRC_KUBERAY_AUTH, SRC_KUBERAY_HELM, SRC_NETWORK_POLICY
from tpuray.components.planning.stack_plan import plan_stack

__all__ = [
    "KUBERAY_OPERATOR_NAME",
    "VERSION_LABEL",
    "OperatorRelease",
    "check_kuberay_crds",
    "check_kuberay_operator",
    "check_operator_namespace",
    "operator_release",
]

KUBERAY_OPERATOR_NAME = "kuberay-operator"
VERSION_LABEL = "app.kubernetes.io/version"
"""The chart's label of the release it installed (``helm-chart/kuberay-operator/templates/_helpers.tpl``: the chart's
appVersion), which says nothing of the image its values point the container at."""


@dataclass(frozen=True)
class OperatorRelease:
    """The KubeRay release an operator Deployment runs, read from its container's image tag (the image is what
    runs; Helm's ``image.tag`` can point a v1.7.0 chart at a v1.6.2 image, whose gate defaults differ)."""

    release: str | None
    """The image's tag where it reads as a version (``v1.7.0``, also from ``v1.7.0@sha256:...``); None where the
    image has no tag (a digest alone), no version for a tag (``latest``), or no image: unknown."""
    read: str
    """What was read: the image, or why there is none."""
    disagrees: str
    """Where the Deployment's version label names another release than the image: saying both; else empty."""

    @property
    def said(self) -> str:
        """The release with how it was read, for a check's fact."""
        runs = self.release or "an unknown version"
        return f"{runs} ({self.read}{'; ' + self.disagrees if self.disagrees else ''})"


def operator_release(dep: Mapping[str, Any]) -> OperatorRelease:
    path = container_named(dep, KUBERAY_OPERATOR_NAME)
    if path is None:
        names = ", ".join(container_names(dep)) or "none"
        return OperatorRelease(None, f"no container {KUBERAY_OPERATOR_NAME} (containers: {names})", "")
    image, tag = image_tag(dep, path)
    if image is None:
        return OperatorRelease(None, f"container {KUBERAY_OPERATOR_NAME} has no image", "")
    release = tag if version(tag) is not None else None
    read = f"image {image}" + ("" if release else f": {'tag ' + tag if tag else 'no tag'}, no version to read")
    label = labels(dep).get(VERSION_LABEL)
    if label is not None and release is None:  # the chart's word is no reading of the image
        read += f" (its {VERSION_LABEL} label's {label} is the chart's, not the image's)"
    disagrees = ""
    if label is not None and release is not None and version(label) != version(release):
        disagrees = f"its {VERSION_LABEL} label says {label}, which the image does not run"
    return OperatorRelease(release, read, disagrees)


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
    runs = operator_release(dep)
    have = version(runs.release)
    fact = f"the stack needs {needs}; {meta(dep).get('namespace', '?')}/{name(dep)} runs {runs.said}"
    if not deployment_ready(dep):
        return CheckResult("kuberay-operator", "fail", f"{fact}, with no ready replica", src, describe_hint(dep))
    if have is None:
        return CheckResult(
            "kuberay-operator", "warn", fact, src, f"{fix_install}, or give the image a version tag beside its digest"
        )
    if have < Version(floor):
        return CheckResult("kuberay-operator", "fail", fact, src, f"upgrade KubeRay (its chart and CRDs) to {floor}+")
    if runs.disagrees:
        return CheckResult(
            "kuberay-operator",
            "warn",
            fact,
            SRC_KUBERAY_HELM,
            "run the image of the chart's own release (its image.tag value, which tpuray leaves at the chart's "
            "default), or pin ray.helmChartVersion to the release the image runs",
        )
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
