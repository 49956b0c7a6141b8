"""Validate manifests against the KubeRay v1.7 CRD OpenAPI schemas with jsonschema.

The pinned CRDs are found (or fetched once) by :mod:`tests.support.crds`. The OpenAPI schema is tightened the way a
strict API server (``fieldValidation=Strict``) reads it: unknown fields are errors instead of being pruned silently.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

from tests.support.crds import crd_folder

KINDS = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}


@functools.cache
def served_validator(path: Path, kind: str, version: str, adapt: Callable[[Any], Any] = lambda s: s) -> Any:
    """A strict validator of ``kind`` at ``version`` from the CRD file ``path`` (which must serve that version);
    ``adapt`` rewrites the converted schema where Python's regular expressions differ from Go's."""
    doc = load_crd(path)
    assert doc["spec"]["names"]["kind"] == kind
    found = [v for v in doc["spec"]["versions"] if v["name"] == version and v.get("served")]
    assert found, f"{kind} {version} is not served by the CRD"
    schema = adapt(_strict(found[0]["schema"]["openAPIV3Schema"]))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def crd_dir() -> Path:
    return crd_folder("kuberay-crds")


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
