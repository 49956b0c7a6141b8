"""Which fields of a custom resource the API server would drop, walking the object against its CRD's schema.

The API server prunes every field a structural schema does not specify, silently, at every depth
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning;
the algorithm: kubernetes/apiextensions-apiserver ``pkg/apiserver/schema/pruning/algorithm.go``). A field is kept
when its object's schema lists it in ``properties``, or gives ``additionalProperties`` (then that schema applies),
or sets ``x-kubernetes-preserve-unknown-fields: true`` (not inherited: a listed child follows its own schema). An
object at the root or under ``x-kubernetes-embedded-resource: true`` keeps ``apiVersion``, ``kind`` and
``metadata``. So an older RayJob CRD without ``spec.rayClusterSpec.authOptions`` takes the object and drops the
token auth; a spec schema with no properties drops everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["pruned_paths"]

_EMBEDDED_KEYS = frozenset({"apiVersion", "kind", "metadata"})


def pruned_paths(obj: Mapping[str, Any], schema: Any) -> list[str]:
    """The paths of ``obj`` (``spec.a.b[0].c``) that ``schema`` (a CRD version's ``openAPIV3Schema``) would prune,
    each once, in no promised order. Iterative: the walk is as deep as the object, never Python's stack."""
    out: list[str] = []
    stack: list[tuple[Any, Any, str, bool]] = [(obj, schema, "", True)]
    while stack:
        value, sch, path, embedded = stack.pop()
        sch = sch if isinstance(sch, Mapping) else {}
        preserve = sch.get("x-kubernetes-preserve-unknown-fields") is True
        if isinstance(value, Mapping):
            props = sch.get("properties")
            props = props if isinstance(props, Mapping) else {}
            extra = sch.get("additionalProperties")
            embedded = embedded or sch.get("x-kubernetes-embedded-resource") is True
            children = []
            for key, child in value.items():
                where = f"{path}.{key}" if path else str(key)
                if embedded and key in _EMBEDDED_KEYS:
                    continue  # ObjectMeta and the type fields: the API server's, whatever the schema says
                if key in props:
                    children.append((child, props[key], where, False))
                elif isinstance(extra, Mapping):
                    children.append((child, extra, where, False))
                elif not (extra is True or preserve):
                    out.append(where)
            stack.extend(reversed(children))
        elif isinstance(value, list):
            items = sch.get("items")
            if not isinstance(items, Mapping):
                items = {"x-kubernetes-preserve-unknown-fields": True} if preserve else {}
            stack.extend(reversed([(child, items, f"{path}[{i}]", False) for i, child in enumerate(value)]))
    return out
