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

from collections.abc import Mapping, Sequence
from typing import Any

from tpuray.components.doctor.objects import item_paths, mapping_at, name, short, text_at

__all__ = ["crd_problems", "pruned_paths", "rendered_kinds"]

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


def crd_problems(rendered: Sequence[Mapping[str, Any]], crds: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """Problems of the installed CRDs against the rendered custom resources, and what was found."""
    problems: list[str] = []
    found: list[str] = []
    for kind, api_version, objects in rendered_kinds(rendered):
        group, _, served_as = api_version.rpartition("/")
        crd = next(
            (c for c in crds if text_at(c, "spec", "group") == group and text_at(c, "spec", "names", "kind") == kind),
            None,
        )
        if crd is None:
            problems.append(f"no CRD for {kind} ({api_version})")
            continue
        versions = {at: mapping_at(crd, *at) for at in item_paths(crd, "spec", "versions")}
        served = [str(v.get("name")) for v in versions.values() if v.get("served")]
        entry = next((at for at, v in versions.items() if v.get("name") == served_as and v.get("served")), None)
        found.append(f"{name(crd)} serves {', '.join(served) or 'nothing'}")
        if entry is None:
            problems.append(f"{name(crd)} does not serve {served_as} (serves {', '.join(served) or 'nothing'})")
            continue
        # every path of every rendered object against the served schema (crd_schema: the API server's pruning)
        if mapping_at(crd, *entry, "schema").get("openAPIV3Schema") is None:
            problems.append(f"{name(crd)} {served_as} has no openAPIV3Schema: unknown what it keeps")
            continue
        schema = mapping_at(crd, *entry, "schema", "openAPIV3Schema")  # an empty one prunes everything
        dropped = list(dict.fromkeys(p for obj in objects for p in pruned_paths(obj, schema)))
        if dropped:
            problems.append(
                f"{name(crd)} {served_as} has no {short(dropped, 4)} in its schema: the API server would drop "
                f"{'it' if len(dropped) == 1 else 'them'}"
            )
    return problems, "; ".join(dict.fromkeys(found))


def rendered_kinds(
    rendered: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, list[Mapping[str, Any]]]]:
    """(kind, apiVersion, the objects) of the rendered custom resources, one entry per kind."""
    kinds: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in rendered:
        kinds.setdefault((str(obj["kind"]), str(obj["apiVersion"])), []).append(obj)
    return [(k, v, objects) for (k, v), objects in kinds.items()]
