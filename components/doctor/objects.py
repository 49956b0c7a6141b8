"""Reading the API objects the doctor's checks look at: the one place that knows their shapes.

The reader (:mod:`.reader`) checks every item's ``metadata``; the rest of an object is whatever the cluster or the
snapshot holds. A field the checks decide by, found holding a type the Kubernetes API never returns there (an
object where a string belongs), raises :class:`FieldError` naming the object and the field; ``run_checks`` turns
that into the failed check that read it. A missing field is None (or empty), which each check reports as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from tpuray.components.catalog.images import parse_image
from tpuray.components.catalog.names import TPU_RESOURCE
from tpuray.components.doctor.reader import ClusterObjects

__all__ = [
    "POD_TEMPLATE",
    "SYSTEM_NAMESPACE",
    "FieldError",
    "Path",
    "container_named",
    "container_names",
    "deployment_ready",
    "describe_hint",
    "env_of",
    "find_deployment",
    "flag_at",
    "image_tag",
    "item_paths",
    "labels",
    "list_at",
    "mapping_at",
    "meta",
    "name",
    "pod_ready",
    "pod_running",
    "requests_tpu",
    "running_tpu_pods",
    "running_version",
    "short",
    "strings_at",
    "text_at",
    "tpu_containers",
    "version",
    "where",
]

_JSON = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


class FieldError(Exception):
    """A field of an object holds what the Kubernetes API never puts there."""

    def __init__(self, obj: Mapping[str, Any], path: str, value: Any, want: str) -> None:
        self.fact = f"{where(obj)}: {path} is a JSON {_JSON.get(type(value), 'value')}, not {want}"
        super().__init__(self.fact)


# ---- metadata (the reader has checked its types) ------------------------------------------------------------------
def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = meta(obj).get("labels")
    return found if isinstance(found, Mapping) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", "?"))


def where(obj: Mapping[str, Any]) -> str:
    """``<kind> <namespace>/<name>`` (the kind where the object says it)."""
    kind = obj.get("kind")
    ns = meta(obj).get("namespace")
    return f"{kind + ' ' if isinstance(kind, str) else ''}{ns + '/' if isinstance(ns, str) else ''}{name(obj)}"


# ---- typed reads, each by its path from the object's root (which the error names) --------------------------------
Path = tuple[str | int, ...]


def _path(path: Iterable[str | int]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def _at(obj: Mapping[str, Any], path: Path) -> Any:
    value: Any = obj
    for depth, key in enumerate(path):
        if value is None:
            return None
        want = "an array" if isinstance(key, int) else "an object"
        if isinstance(key, int) != isinstance(value, list) or not isinstance(value, (list, Mapping)):
            raise FieldError(obj, _path(path[:depth]), value, want)
        if isinstance(value, list):
            value = value[key] if isinstance(key, int) and key < len(value) else None
        else:
            value = value.get(key)
    return value


def text_at(obj: Mapping[str, Any], *path: str | int) -> str | None:
    """The string at ``path`` of ``obj``, None where it is missing; :class:`FieldError` where it is another type."""
    value = _at(obj, path)
    if value is None or isinstance(value, str):
        return value
    raise FieldError(obj, _path(path), value, "a string")


def flag_at(obj: Mapping[str, Any], *path: str | int) -> bool | None:
    """The boolean at ``path`` of ``obj``, None where it is missing; :class:`FieldError` where it is another type."""
    value = _at(obj, path)
    if value is None or isinstance(value, bool):
        return value
    raise FieldError(obj, _path(path), value, "a boolean")


def list_at(obj: Mapping[str, Any], *path: str | int) -> list[Any]:
    """The array at ``path`` (empty where missing); :class:`FieldError` where it is another type."""
    value = _at(obj, path)
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise FieldError(obj, _path(path), value, "an array")


def mapping_at(obj: Mapping[str, Any], *path: str | int) -> Mapping[str, Any]:
    """The object at ``path`` (empty where missing); :class:`FieldError` where it is another type."""
    value = _at(obj, path)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise FieldError(obj, _path(path), value, "an object")


def item_paths(obj: Mapping[str, Any], *path: str | int) -> list[Path]:
    """The path of each item of the array of objects at ``path``; :class:`FieldError` at the first that is not
    an object."""
    out: list[Path] = []
    for i, item in enumerate(list_at(obj, *path)):
        if not isinstance(item, Mapping):
            raise FieldError(obj, _path((*path, i)), item, "an object")
        out.append((*path, i))
    return out


def strings_at(obj: Mapping[str, Any], *path: str | int) -> list[str]:
    """The array of strings at ``path``; :class:`FieldError` naming the first item that is not one."""
    items = list_at(obj, *path)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise FieldError(obj, _path((*path, i)), item, "a string")
    return items


# ---- pods and deployments -----------------------------------------------------------------------------------------
def pod_ready(obj: Mapping[str, Any]) -> bool:
    """The ``Ready`` condition is True (a pod's or a node's)."""
    return any(
        text_at(obj, *c, "type") == "Ready" and text_at(obj, *c, "status") == "True"
        for c in item_paths(obj, "status", "conditions")
    )


def pod_running(pod: Mapping[str, Any]) -> bool:
    """``status.phase`` is Running: a finished pod (Succeeded, Failed) of an old job runs nothing any more."""
    return text_at(pod, "status", "phase") == "Running"


def describe_hint(dep: Mapping[str, Any]) -> str:
    """The fix for a Deployment with no ready replica: what ``kubectl describe`` says about it."""
    return f"see kubectl -n {meta(dep).get('namespace')} describe deployment {name(dep)}"


def deployment_ready(dep: Mapping[str, Any]) -> bool:
    """At least one ready replica (``status.readyReplicas``, absent when there is none)."""
    ready = _at(dep, ("status", "readyReplicas"))
    if ready is None:
        return False
    if isinstance(ready, bool) or not isinstance(ready, int):
        raise FieldError(dep, "status.readyReplicas", ready, "an integer")
    return ready >= 1


POD_TEMPLATE: Path = ("spec", "template", "spec")
"""Where a Deployment keeps its pod's spec (a Pod keeps it at ``spec``)."""


def container_named(dep: Mapping[str, Any], container: str) -> Path | None:
    """The path of a Deployment's container ``container`` (a sidecar may come first), or None."""
    found = item_paths(dep, *POD_TEMPLATE, "containers")
    return next((c for c in found if text_at(dep, *c, "name") == container), None)


def container_names(dep: Mapping[str, Any]) -> list[str]:
    return [text_at(dep, *c, "name") or "?" for c in item_paths(dep, *POD_TEMPLATE, "containers")]


def image_tag(obj: Mapping[str, Any], container: Path) -> tuple[str | None, str | None]:
    """(the image, its tag) of the container at ``container``: the tag as
    :func:`~tpuray.components.catalog.images.parse_image` reads it (``repo:v1.7.0@sha256:...`` is v1.7.0; a digest
    alone has none); the tag is None where there is no image or tag, or the reference does not parse."""
    image = text_at(obj, *container, "image")
    if image is None:
        return None, None
    try:
        return image, parse_image(image).tag
    except ValueError:
        return image, None


def requests_tpu(obj: Mapping[str, Any], container: Path) -> bool:
    """The container asks for ``google.com/tpu`` in its limits or requests (the Ray worker; sidecars do not)."""
    return any(TPU_RESOURCE in mapping_at(obj, *container, "resources", part) for part in ("limits", "requests"))


def tpu_containers(pod: Mapping[str, Any]) -> list[Path]:
    """The paths of the pod's containers that ask for TPU chips."""
    return [c for c in item_paths(pod, "spec", "containers") if requests_tpu(pod, c)]


def env_of(obj: Mapping[str, Any], container: Path) -> dict[str, str]:
    """A container's literal env (``valueFrom`` entries are not values the doctor can read)."""
    out: dict[str, str] = {}
    for e in item_paths(obj, *container, "env"):
        key, value = text_at(obj, *e, "name"), text_at(obj, *e, "value")
        if key is not None and value is not None:
            out[key] = value
    return out


def running_tpu_pods(objs: ClusterObjects, namespace: str) -> list[dict[str, Any]]:
    """The running pods of ``namespace`` with a container that asks for TPU chips: the Ray TPU workers."""
    return [p for p in objs.pods if meta(p).get("namespace") == namespace and pod_running(p) and tpu_containers(p)]


def find_deployment(
    objs: ClusterObjects, wanted: str, namespace: str | None = None, *, only_there: bool = False
) -> dict[str, Any] | None:
    """The Deployment named (or ``app.kubernetes.io/name``-labelled) ``wanted``: the one in ``namespace`` first (a
    stale copy elsewhere is not the one the stack configured), then anywhere unless ``only_there``."""
    found = [d for d in objs.deployments if name(d) == wanted or labels(d).get("app.kubernetes.io/name") == wanted]
    there = [d for d in found if namespace is not None and meta(d).get("namespace") == namespace]
    if there or only_there:
        return there[0] if there else None
    return found[0] if found else None


# ---- text ---------------------------------------------------------------------------------------------------------
def version(text: str | None) -> Version | None:
    """``v1.7.0`` or ``1.3.1`` as a version; None when it is none."""
    if text is None:
        return None
    try:
        return Version(text.removeprefix("v"))
    except InvalidVersion:
        return None


def short(names: Iterable[str], limit: int = 5) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


SYSTEM_NAMESPACE = "kube-system"
"""Where GKE runs its system pods (the TPU device plugin, the NetworkPolicy agents)."""


def running_version(dep: Mapping[str, Any], container: str) -> tuple[str | None, str]:
    """(the version a Deployment runs, what was read): its container ``container``'s image tag, by name."""
    path = container_named(dep, container)
    if path is None:
        return None, f"no container {container} (containers: {', '.join(container_names(dep)) or 'none'})"
    image, tag = image_tag(dep, path)
    return tag, f"image {image}" if image else f"container {container} has no image"
