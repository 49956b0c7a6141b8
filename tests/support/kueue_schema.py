"""Validate Kueue objects against the Kueue v0.19.2 CRD schemas (``kueue-crds`` beside ``kuberay-crds``).

The same strict OpenAPI-to-JSON-Schema reading as :mod:`kuberay_schema` (unknown fields are errors), against the
version named by each object's apiVersion. jsonschema cannot run the CRDs' CEL rules
(``x-kubernetes-validations``), so the ones tpuray's objects could break are restated in :func:`cel_problems`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.crds import crd_folder
from tests.support.kuberay_schema import load_crd, served_validator

KINDS = {
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "ProvisioningRequestConfig": "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}


def crd_dir() -> Path:
    return crd_folder("kueue-crds")


def _validator(kind: str, version: str, directory: str) -> Any:
    return served_validator(Path(directory) / KINDS[kind], kind, version, _python_patterns)


def _python_patterns(node: Any) -> Any:
    """Go's RE2 takes ``^(?i)...``; Python wants global flags first (``(?i)^...``)."""
    if isinstance(node, list):
        return [_python_patterns(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _python_patterns(v) for k, v in node.items()}
    if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
        out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)") :]
    return out


def scope_of(kind: str) -> str:
    doc = load_crd(crd_dir() / KINDS[kind])
    return str(doc["spec"]["scope"])


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of a Kueue object, as ``path: message``."""
    group, _, version = obj["apiVersion"].partition("/")
    assert group == "kueue.x-k8s.io", obj["apiVersion"]
    v = _validator(obj["kind"], version, str(crd_dir()))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


def cel_problems(obj: dict[str, Any]) -> list[str]:
    """The CRDs' CEL rules that apply to what tpuray renders (ResourceFlavor tolerations, ClusterQueue groups)."""
    spec = obj.get("spec") or {}
    out: list[str] = []
    if obj["kind"] == "ResourceFlavor":
        for t in spec.get("tolerations", []):
            if "key" not in t and t.get("operator") != "Exists":
                out.append("toleration without key needs operator Exists")
            if t.get("operator", "Equal") not in ("Equal", "Exists"):
                out.append(f"toleration operator {t.get('operator')!r}")
            if t.get("operator") == "Exists" and "value" in t:
                out.append("toleration with operator Exists has a value")
            if t.get("effect", "NoSchedule") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                out.append(f"toleration effect {t.get('effect')!r}")
    if obj["kind"] == "ClusterQueue":
        for g in spec.get("resourceGroups", []):
            for f in g["flavors"]:
                if len(f["resources"]) != len(g["coveredResources"]):
                    out.append(f"flavor {f['name']} lists {len(f['resources'])} resources, not coveredResources'")
                if [r["name"] for r in f["resources"]] != list(g["coveredResources"]):
                    out.append(f"flavor {f['name']} resources are not coveredResources in order")
        if "cohortName" not in spec and any(
            "borrowingLimit" in r for g in spec.get("resourceGroups", []) for f in g["flavors"] for r in f["resources"]
        ):
            out.append("borrowingLimit without cohortName")
    return out
