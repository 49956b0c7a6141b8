"""The ``config:`` block of ``Pulumi.yaml``, derived from the :class:`StackConfig` model.

Pulumi's CLI applies project-level defaults and checks value types; the SDK does not. Deriving the block
from the model keeps the two from drifting: a test compares ``Pulumi.yaml`` with :func:`config_declarations`,
and ``tpuray config declarations`` prints it.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from tpuray.components.config import NAMESPACE, StackConfig

_SCALARS: dict[type, str] = {str: "string", bool: "boolean", int: "integer"}


def pulumi_type(annotation: Any) -> dict[str, Any]:
    """Pulumi's project config type of a field: string, integer, boolean, array (with items) or object."""
    if typing.get_origin(annotation) is typing.Annotated:  # a validated type: its base type decides
        return pulumi_type(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return pulumi_type(args[0])
    if typing.get_origin(annotation) is list:
        return {"type": "array", "items": pulumi_type(typing.get_args(annotation)[0])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"type": "object"}
    return {"type": _SCALARS[annotation]}


def config_declarations() -> dict[str, dict[str, Any]]:
    """``{"tpuray:<key>": {type, description, default?}}`` for every top-level stack setting."""
    out: dict[str, dict[str, Any]] = {}
    for name, field in StackConfig.model_fields.items():
        decl = pulumi_type(field.annotation)
        if decl["type"] == "object" and not field.is_required() and field.get_default() is None:
            # An optional section (serving) is given or not: a declared default would be put into every stack's
            # config, and Pulumi takes keys the project does not declare (as it takes tpuray:rayAuthToken).
            continue
        if decl["type"] == "object" and isinstance(field.annotation, type):
            doc = (field.annotation.__doc__ or "").strip().splitlines()[0]
        else:
            doc = field.description or ""
        decl["description"] = doc
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                decl["default"] = default.model_dump(mode="json", by_alias=True)
            else:
                decl["default"] = "" if default is None else default
        out[f"{NAMESPACE}:{field.alias or name}"] = decl
    return out
