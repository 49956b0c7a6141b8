"""Reading plain data (manifests, Pulumi wire values) defensively: a missing key or a wrong type is None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_int", "as_list", "get_path"]


def get_path(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def as_int(value: Any) -> int | None:
    """An integer (wire numbers are floats, quantities may be strings), or None; booleans are not integers."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []
