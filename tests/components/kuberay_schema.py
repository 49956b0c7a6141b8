"""Validate manifests against the KubeRay v1.7 CRD OpenAPI schemas with jsonschema.

The CRDs are found in ``$TPURAY_SHARED_DIR/kuberay-crds`` or ``<repo>/../shared/kuberay-crds``
(``python tools/fetch_crds.py`` puts the pinned, checksummed files there); missing CRDs fail under CI
(``CI=true``) and skip locally with that instruction. The OpenAPI schema is tightened the way a strict API server
(``fieldValidation=Strict``) reads it: unknown fields are errors instead of being pruned silently.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}


def crd_dir() -> Path:
    base = os.environ.get("TPURAY_SHARED_DIR")
    d = Path(base) / "kuberay-crds" if base else ROOT.parent / "shared" / "kuberay-crds"
    if not all((d / f).is_file() for f in KINDS.values()):
        msg = (
            f"KubeRay v1.7.0 CRDs not found in {d}: run `python tools/fetch_crds.py` (pinned, checksummed) "
            "or set TPURAY_SHARED_DIR to a folder holding kuberay-crds/"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return d


def _strict(node: Any) -> Any:
    """OpenAPI v3 (Kubernetes flavour) -> JSON Schema."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    props = node.get("properties")
    # property names are data (a field may be called "description"): each property's schema is converted once
    skip = (
        ("description", "x-kubernetes-validations", "properties")
        if isinstance(props, dict)
        else ("description", "x-kubernetes-validations")
    )
    out = {k: _strict(v) for k, v in node.items() if k not in skip}
    if isinstance(props, dict):
        out["properties"] = {name: _strict(v) for name, v in props.items()}
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_crd(path: Path) -> Any:
    """A CRD file, parsed with libyaml's safe loader where PyYAML has it (the KubeRay CRDs are megabytes)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)  # a safe loader


@functools.cache
def _validator(kind: str, directory: str) -> Any:
    doc = load_crd(Path(directory) / KINDS[kind])
    assert doc["spec"]["names"]["kind"] == kind
    version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])  # builds new nodes: the parsed CRD is not changed
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of a RayCluster/RayJob manifest, as ``path: message``."""
    assert manifest["apiVersion"] == "ray.io/v1", manifest.get("apiVersion")
    v = _validator(manifest["kind"], str(crd_dir()))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(manifest)]


def tpu_chip_mismatches(spec: dict[str, Any]) -> list[str]:
    """numOfHosts * google.com/tpu must equal the chips of the group's gke-tpu-topology (the TPU webhook's rule)."""
    bad = []
    for g in spec.get("workerGroupSpecs", []):
        pod = g["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
        if "google.com/tpu" not in limits:
            continue
        chips = 1
        for d in pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"].split("x"):
            chips *= int(d)
        if g["numOfHosts"] * int(limits["google.com/tpu"]) != chips:
            bad.append(f"{g['groupName']}: {g['numOfHosts']} x {limits['google.com/tpu']} != {chips}")
    return bad
