"""The KubeRay operator's feature gates as it runs them: its command line read as Go reads it, its
``--feature-gates`` value as the featuregate package reads it, else its release's default
(:data:`~tpuray.components.catalog.pins.KUBERAY_GATES`); the release is its container image's. Pure functions of the
objects read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from tpuray.components.catalog.pins import KUBERAY_GATES, feature_gate_default, release_key
from tpuray.components.config import StackConfig
from tpuray.components.doctor.go_flags import GO_BOOLS, ExitsError, parse_feature_gates, parse_go_flags
from tpuray.components.doctor.kuberay_checks import KUBERAY_OPERATOR_NAME, operator_release
from tpuray.components.doctor.objects import (
    Path,
    container_named,
    container_names,
    find_deployment,
    meta,
    name,
    strings_at,
)
from tpuray.components.doctor.reader import ClusterObjects

__all__ = ["FEATURE_GATES_FLAG", "OPERATOR_FLAGS", "operator_gate"]

FEATURE_GATES_FLAG = "feature-gates"
"""The operator's flag (``ray-operator/main.go``: ``flag.StringVar(&featureGates, "feature-gates", ...)``), the only
place its gates are set; the chart renders it into the container's args (``_helpers.tpl``, ``kuberay.featureGates``)."""

OPERATOR_FLAGS: Mapping[str, bool] = {
    **dict.fromkeys(
        (
            "metrics-addr",
            "health-probe-bind-address",
            "leader-election-namespace",
            "reconcile-concurrency",
            "watch-namespace",
            "log-file-path",
            "log-file-encoder",
            "log-stdout-encoder",
            "batch-scheduler",
            "config",
            FEATURE_GATES_FLAG,
            "qps",
            "burst",
            "kubeconfig",
            "zap-encoder",
            "zap-log-level",
            "zap-stacktrace-level",
            "zap-time-encoding",
        ),
        False,
    ),
    **dict.fromkeys(
        (
            "enable-leader-election",
            "forced-cluster-upgrade",
            "enable-batch-scheduler",
            "use-kubernetes-proxy",
            "enable-metrics",
            "zap-devel",
        ),
        True,
    ),
}
"""Every flag the operator's ``flag.CommandLine`` holds (name -> boolean), the same at KubeRay v1.5.0 to v1.7.0:
``ray-operator/main.go``'s ``flag.*Var`` calls, controller-runtime's zap options (``opts.BindFlags``:
``pkg/log/zap/zap.go``, v0.24.1; only ``zap-devel`` is boolean) and its ``kubeconfig`` flag (``pkg/client/config``'s
``init``). Whether a flag is boolean decides whether it takes the next argument as its value."""

OPERATOR_BINARY = "manager"
"""The image's entrypoint (``ray-operator/Dockerfile``: ``ENTRYPOINT ["/manager"]``; the chart's ``operatorCommand``
is ``/manager``)."""

_SPECIAL = {"Alpha": "AllAlpha", "Beta": "AllBeta"}
"""featuregate's own gates: each sets every gate of its stage that the value does not name."""


def _flags_of(dep: Mapping[str, Any], path: Path) -> tuple[list[str] | None, str]:
    """The arguments ``/manager`` receives (a container's ``command`` replaces the image's entrypoint, its ``args``
    follow), or None and why they cannot be read."""
    command = strings_at(dep, *path, "command")
    if command and PurePosixPath(command[0]).name != OPERATOR_BINARY:
        return None, f"its container runs {command[0][:80]!r}, not /{OPERATOR_BINARY}: its flags are not read"
    return [*command[1:], *strings_at(dep, *path, "args")], ""


def operator_gate(cfg: StackConfig, objs: ClusterObjects, gate: str) -> tuple[bool | None, str]:
    """Whether the stack's KubeRay operator runs ``gate`` (a key of
    :data:`~tpuray.components.catalog.pins.GATE_DEFAULTS`; None: unknown, no operator, or an operator that exits on
    its arguments), and how that was read."""
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, cfg.ray.job_api_namespace)
    if dep is None:
        return None, "no kuberay-operator Deployment"
    path = container_named(dep, KUBERAY_OPERATOR_NAME)
    at = f"{meta(dep).get('namespace', '?')}/{name(dep)}"
    if path is None:
        return None, f"{at} has no container {KUBERAY_OPERATOR_NAME} (containers: {', '.join(container_names(dep))})"
    runs = operator_release(dep)
    who = f"KubeRay {runs.said} at {at}"
    args, why = _flags_of(dep, path)
    if args is None:
        return None, f"{who}: {why}"
    key = release_key(runs.release) if runs.release else None
    known = KUBERAY_GATES.get(f"{key[0]}.{key[1]}") if key else None
    try:
        flag = parse_go_flags(args, OPERATOR_FLAGS).get(FEATURE_GATES_FLAG)
        gates = parse_feature_gates(flag or "")
        unknown = [g for g in gates if known is not None and g not in known and g not in _SPECIAL.values()]
        if unknown:
            raise ExitsError(f"unrecognized feature gate: {unknown[0]}")
    except ExitsError as e:
        return None, f"{who} exits on its arguments ({e}): no gate runs"
    if gate in gates:
        return GO_BOOLS[gates[gate]], f"{who}: --{FEATURE_GATES_FLAG} sets {gate}={gates[gate]}"
    named = [s for s in _SPECIAL.values() if s in gates]
    if named:
        stage = known[gate].stage if known is not None and gate in known else None
        if stage is None:
            return None, f"{who}: --{FEATURE_GATES_FLAG} sets {', '.join(named)}, and {gate}'s stage there is not known"
        if _SPECIAL[stage] in gates:
            said = gates[_SPECIAL[stage]]
            return GO_BOOLS[said], f"{who}: --{FEATURE_GATES_FLAG} sets {_SPECIAL[stage]}={said}, and {gate} is {stage}"
    default = feature_gate_default(gate, runs.release) if runs.release else None
    if default is None:
        return None, (f"{who}, with no --{FEATURE_GATES_FLAG} naming {gate}: its default in that release is not known")
    return default, f"{who} has {gate} {'on' if default else 'off'}: its default, no --{FEATURE_GATES_FLAG} names it"
