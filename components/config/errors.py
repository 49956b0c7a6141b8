"""pydantic's validation errors as :class:`~tpuray.components.config.base.Problem` values (``path``, ``message``),
the problems a :class:`~tpuray.components.config.base.ConfigError` lists."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from tpuray.components.config.base import FieldProblems, Problem, pattern_form
from tpuray.components.config.capacity import capacity_types
from tpuray.components.config.stack import StackConfig


def _path(loc: Iterable[int | str]) -> str:
    out, previous = "", None
    for part in loc:
        tag, previous = previous == "capacity" and part in capacity_types(), part
        if tag:
            continue  # the discriminated union's tag adds nothing a reader needs
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _flat_args(annotation: Any) -> list[Any]:
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    return [leaf for a in args for leaf in _flat_args(a)]


def _fields(holder: type) -> dict[str, Any]:
    """The keys of a config model or dataclass, as written in YAML, with their annotations."""
    if issubclass(holder, BaseModel):
        return {f.alias or n: f.annotation for n, f in holder.model_fields.items()}
    if dataclasses.is_dataclass(holder):  # a component's value type used as config (camelCase keys too)
        hints = typing.get_type_hints(holder)
        return {to_camel(f.name): hints[f.name] for f in dataclasses.fields(holder)}
    return {}


def _holders(annotation: Any) -> list[type]:
    """The config models and dataclasses an annotation names (several for a union)."""
    flat = _flat_args(annotation)
    return [a for a in flat if isinstance(a, type) and (issubclass(a, BaseModel) or dataclasses.is_dataclass(a))]


def _tags(holder: type) -> tuple[Any, ...]:
    """The discriminator values of a tagged union's member (its ``type: Literal[...]``), else none."""
    return typing.get_args(_fields(holder).get("type"))


def _model_at(root: type, loc: Iterable[int | str]) -> type | None:
    """The config model (or dataclass) that holds the key at ``loc`` (``loc`` without its last part), if one does.

    Read from the models' annotations, so a new section or capacity class needs no table here."""
    holders: list[type] = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [h for h in holders if part in _tags(h)] if len(holders) > 1 else []
        if tagged:  # the discriminated union's tag names the member
            holders = tagged
            continue
        if len(holders) != 1 or str(part) not in _fields(holders[0]):
            return None
        holders = _holders(_fields(holders[0])[str(part)])
    return holders[0] if len(holders) == 1 else None


def _unknown_key(loc: tuple[int | str, ...], model: type) -> str:
    """``unknown key``, with the nearest valid key at that place and the valid keys."""
    holder = _model_at(model, loc[:-1])
    if holder is None:
        return "unknown key"
    valid = list(_fields(holder))
    key = str(loc[-1])
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5) or difflib.get_close_matches(
        to_camel(key), valid, n=1, cutoff=0.5
    )
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown key{hint} valid keys here: {', '.join(valid)}"


def problems(err: ValidationError, model: type[BaseModel] | None = None) -> list[Problem]:
    """A pydantic error of any config model as :class:`Problem` values, paths in camelCase.

    ``model`` is the model that was validated (default :class:`StackConfig`); it lets an unknown key name the
    nearest valid one.
    """
    root = model or StackConfig
    problems: list[Problem] = []
    for e in err.errors(include_url=False, include_input=False):
        base = _path(e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's, a dataclass's
            msg = _unknown_key(tuple(e["loc"]), root)
        elif e["type"] == "union_tag_invalid":  # the tag's own key, where the user has to change it
            tag = str(e.get("ctx", {}).get("tag", ""))[:40]
            base, msg = f"{base}.type", f"unknown capacity type {tag!r}; valid choices: {', '.join(capacity_types())}"
        elif e["type"] == "union_tag_not_found":
            base, msg = f"{base}.type", f"missing; valid choices: {', '.join(capacity_types())}"
        elif e["type"] == "string_pattern_mismatch":
            regex = str(e.get("ctx", {}).get("pattern", ""))
            msg = f"expected {pattern_form(regex) or f'a string matching {regex}'}"
        elif e["type"] == "literal_error" and "expected" in e.get("ctx", {}):
            msg = f"not allowed; valid choices: {e['ctx']['expected']}"
        raised = e.get("ctx", {}).get("error")
        if isinstance(raised, FieldProblems):  # a validator's problems under its own fields
            problems += [Problem(f"{base}.{p.path}" if base else p.path, p.message) for p in raised.problems]
        else:
            problems += [Problem(base or "(root)", line) for line in msg.split("\n")]
    return problems
