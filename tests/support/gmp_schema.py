"""Validate Managed Service for Prometheus objects against the GMP v0.17.2 CRD schemas (``gmp-crds`` beside
``kuberay-crds``).

The same strict OpenAPI-to-JSON-Schema reading as :mod:`kuberay_schema`, against the version named by each object's
apiVersion. jsonschema cannot run the CRDs' CEL rules (``x-kubernetes-validations``): the ones tpuray's objects
could break are restated in :func:`cel_problems`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.support.crds import crd_folder
from tests.support.kuberay_schema import served_validator

KINDS = {
    "PodMonitoring": "monitoring.googleapis.com_podmonitorings.yaml",
    "ClusterPodMonitoring": "monitoring.googleapis.com_clusterpodmonitorings.yaml",
}


def crd_dir() -> Path:
    return crd_folder("gmp-crds")


def _validator(kind: str, version: str, directory: str) -> Any:
    return served_validator(Path(directory) / KINDS[kind], kind, version)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of a GMP object, as ``path: message``."""
    group, _, version = obj["apiVersion"].partition("/")
    assert group == "monitoring.googleapis.com", obj["apiVersion"]
    v = _validator(obj["kind"], version, str(crd_dir()))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


_DURATION = re.compile(r"(\d+(ms|s|m|h))+")
PROTECTED_LABELS = {"project_id", "location", "cluster", "namespace", "job", "instance", "__address__"}


def _seconds(d: str) -> float:
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * unit[u] for n, u in re.findall(r"(\d+)(ms|s|m|h)", d))


def cel_problems(obj: dict[str, Any]) -> list[str]:
    """The CRD's CEL rules (and format rules jsonschema leaves unchecked) for the endpoints tpuray renders: a port
    that is not 0, a timeout no longer than the interval, at most one of authorization/basicAuth/oauth2, Prometheus
    durations, and no relabeling of the protected target labels."""
    out: list[str] = []
    for i, ep in enumerate((obj.get("spec") or {}).get("endpoints", [])):
        if ep.get("port") in (0, "0"):
            out.append(f"endpoints[{i}].port: Port is required")
        for key in ("interval", "timeout"):
            if key in ep and not _DURATION.fullmatch(str(ep[key])):
                out.append(f"endpoints[{i}].{key}: {ep[key]!r} is not a Prometheus duration")
        if "timeout" in ep and _seconds(ep["timeout"]) > _seconds(ep["interval"]):
            out.append(f"endpoints[{i}]: scrape timeout greater than interval")
        if sum(k in ep for k in ("authorization", "basicAuth", "oauth2")) > 1:
            out.append(f"endpoints[{i}]: more than one of authorization, basicAuth, oauth2")
        for j, rule in enumerate(ep.get("metricRelabeling", [])):
            if rule.get("targetLabel") in PROTECTED_LABELS or rule.get("action") == "labelmap":
                out.append(f"endpoints[{i}].metricRelabeling[{j}]: rewrites a protected label or uses labelmap")
    return out
