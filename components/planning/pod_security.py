"""The securityContext of every Ray container and the Pod Security Admission labels of the Ray namespace.

Pure data; imports no Pulumi. Ray containers meet the Kubernetes ``restricted`` Pod Security Standard
(https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted): non-root, no privilege
escalation, every capability dropped, the runtime's default seccomp profile. TPU containers need no privileged
mode on the GKE versions tpuray requires (GKE documents ``privileged: true`` only for versions before 1.28:
https://cloud.google.com/kubernetes-engine/docs/how-to/tpus; tpuray declares >= 1.30, ``topology.MIN_GKE_VERSION``),
and the GCS FUSE sidecar GKE injects follows ``restricted`` too (gcs-fuse-csi-driver ``pkg/webhook/sidecar_spec.go``:
uid 65534, no escalation, ALL dropped, RuntimeDefault), so the namespace enforces ``restricted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "PSA_LEVEL",
    "RAY_GID",
    "RAY_UID",
    "container_security_context",
    "pod_security_context",
    "pod_security_labels",
    "restricted_problems",
]

RAY_UID = 1000
"""The ``ray`` user of the rayproject images (and of workloads/Dockerfile, built on them)."""
RAY_GID = 100
"""The ``users`` group of the rayproject images."""
PSA_LEVEL = "restricted"
"""The strictest Pod Security Standard; every Ray pod meets it."""


def container_security_context() -> dict[str, Any]:
    """A ``restricted`` container securityContext. ``runAsUser`` is numeric so the kubelet can verify non-root
    even for an image whose USER is a name."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RAY_UID,
        "runAsGroup": RAY_GID,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """The pod-level securityContext: the same non-root user and seccomp profile, for any container a webhook or
    KubeRay adds without its own (the GCS FUSE sidecar, KubeRay's init containers)."""
    ctx = container_security_context()
    return {k: ctx[k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile")}


def pod_security_labels(level: str = PSA_LEVEL) -> dict[str, str]:
    """Namespace labels that enforce, warn about and audit ``level``
    (https://kubernetes.io/docs/concepts/security/pod-security-admission/)."""
    return {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "warn", "audit")} | {
        f"pod-security.kubernetes.io/{mode}-version": "latest" for mode in ("enforce", "warn", "audit")
    }


def restricted_problems(where: str, container: Mapping[str, Any], pod: Mapping[str, Any] | None = None) -> list[str]:
    """How a container (with its pod's securityContext as fallback) falls short of ``restricted``."""
    ctx = container.get("securityContext") or {}
    pod_ctx = (pod or {}).get("securityContext") or {}

    def field(name: str) -> Any:
        return ctx.get(name, pod_ctx.get(name))

    found = []
    if field("runAsNonRoot") is not True:
        found.append(f"{where}: securityContext.runAsNonRoot is not true")
    if field("runAsUser") == 0:
        found.append(f"{where}: securityContext.runAsUser is 0 (root)")
    if ctx.get("allowPrivilegeEscalation") is not False:
        found.append(f"{where}: securityContext.allowPrivilegeEscalation is not false")
    if ctx.get("privileged") is True:
        found.append(f"{where}: securityContext.privileged is true")
    drop = (ctx.get("capabilities") or {}).get("drop") or []
    if "ALL" not in drop:
        found.append(f"{where}: securityContext.capabilities.drop does not hold ALL")
    added = [c for c in (ctx.get("capabilities") or {}).get("add") or [] if c != "NET_BIND_SERVICE"]
    if added:
        found.append(f"{where}: securityContext.capabilities.add {added}")
    seccomp = (field("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        found.append(f"{where}: securityContext.seccompProfile.type is {seccomp!r}, not RuntimeDefault")
    return found
