"""The KubeRay operator's feature gates as it runs them: its ``--feature-gates`` flag, else its release's default
(:data:`~tpuray.components.catalog.pins.GATE_DEFAULTS`). Pure functions of the objects read."""

from __future__ import annotations

from tpuray.components.catalog.pins import feature_gate_default
from tpuray.components.config import StackConfig
from tpuray.components.doctor.kuberay_checks import KUBERAY_OPERATOR_NAME
from tpuray.components.doctor.objects import (
    container_named,
    container_names,
    find_deployment,
    image_tag,
    labels,
    meta,
    name,
    strings_at,
)
from tpuray.components.doctor.reader import ClusterObjects

__all__ = ["FEATURE_GATES_FLAG", "operator_gate"]

FEATURE_GATES_FLAG = "feature-gates"
"""The operator's flag (``ray-operator/main.go``: ``flag.StringVar(&featureGates, "feature-gates", ...)``), the only
place its gates are set; the chart renders it into the container's args (``_helpers.tpl``, ``kuberay.featureGates``)."""
_GO_BOOLS = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}
"""What Go's ``strconv.ParseBool`` takes (case-insensitively here, as it takes t/T/TRUE/true/True)."""


def _gate_flag(args: list[str]) -> str | None:
    """The value of the last ``--feature-gates`` among ``args`` (Go's flag package: ``-flag=v``, ``--flag=v``,
    ``-flag v``; a flag given twice keeps the last), or None."""
    value, i = None, 0
    while i < len(args):
        flag, eq, rest = args[i].lstrip("-").partition("=")
        if args[i].startswith("-") and flag == FEATURE_GATES_FLAG:
            if not eq:  # the next argument is its value, whatever it looks like
                i += 1
                rest = args[i] if i < len(args) else ""
            value = rest
        i += 1
    return value


def operator_gate(cfg: StackConfig, objs: ClusterObjects, gate: str) -> tuple[bool | None, str]:
    """Whether the stack's KubeRay operator runs ``gate`` (a key of
    :data:`~tpuray.components.catalog.pins.GATE_DEFAULTS`; None: unknown, or no operator), and how that was read."""
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, cfg.ray.job_api_namespace)
    if dep is None:
        return None, "no kuberay-operator Deployment"
    path = container_named(dep, KUBERAY_OPERATOR_NAME)
    at = f"{meta(dep).get('namespace', '?')}/{name(dep)}"
    if path is None:
        return None, f"{at} has no container {KUBERAY_OPERATOR_NAME} (containers: {', '.join(container_names(dep))})"
    flag = _gate_flag([*strings_at(dep, *path, "command"), *strings_at(dep, *path, "args")])
    gates: dict[str, str] = {}
    for pair in (flag or "").split(","):
        key, _, value = pair.partition("=")
        if key.strip():
            gates[key.strip()] = value.strip()  # a gate named twice: the last wins (featuregate Set)
    _, tag = image_tag(dep, path)
    running = labels(dep).get("app.kubernetes.io/version") or tag
    if gate in gates:
        on = _GO_BOOLS.get(gates[gate].lower())
        said = f"--{FEATURE_GATES_FLAG} sets {gate}={gates[gate]}"
        bad = "" if on is not None else " (not a boolean: the operator exits)"
        return on, f"KubeRay {running or 'of an unknown version'} ({at}): {said}{bad}"
    default = feature_gate_default(gate, running) if running else None
    if default is None:
        return None, (
            f"KubeRay {at} runs {running or 'an unknown version'}, with no --{FEATURE_GATES_FLAG} naming "
            f"{gate}, whose default there is not known"
        )
    return default, (
        f"KubeRay {running} ({at}) has {gate} {'on' if default else 'off'}: its default, no "
        f"--{FEATURE_GATES_FLAG} names it"
    )
