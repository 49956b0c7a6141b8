"""Problems as ``(path, message)`` pairs: :class:`ConfigError` and the formatting of pydantic errors."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from tpuray.components.config.base import (
    FIELD_SEP,
)
from tpuray.components.config.capacity import CAPACITY_TYPES, FlexStart, OnDemand, Queued, Reservation, Spot
from tpuray.components.config.stack import StackConfig


class ConfigError(ValueError):
    """Every problem of a stack configuration, each as ``(path, message)``."""

    MAX_SHOWN = 40
    """Problems printed at most; the rest are counted (a generated file can have thousands)."""
    MAX_LINE = 400

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(problems)} problem(s){where}:"]
        for path, message in problems[: self.MAX_SHOWN]:
            line = f"  {path}: {message}"
            lines.append(line if len(line) <= self.MAX_LINE else line[: self.MAX_LINE - 3] + "...")
        if len(problems) > self.MAX_SHOWN:
            lines.append(f"  ... and {len(problems) - self.MAX_SHOWN} more")
        super().__init__("\n".join(lines))


def _path(loc: Iterable[int | str]) -> str:
    out, previous = "", None
    for part in loc:
        tag, previous = previous == "capacity" and part in CAPACITY_TYPES, part
        if tag:
            continue  # the discriminated union's tag adds nothing a reader needs
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(root: type[BaseModel], loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The config model that holds the key at ``loc`` (``loc`` without its last part), if one does."""
    model: Any = root
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        if part in CAPACITY_TYPES:  # the discriminated union's tag names the member
            model = {"on-demand": OnDemand, "spot": Spot, "reservation": Reservation, "flex-start": FlexStart,
                     "queued": Queued}[part]  # fmt: skip
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(str(part))
        if field is None:
            return None
        models = [a for a in _flat_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = models[0] if models else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _flat_args(annotation: Any) -> list[Any]:
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    return [leaf for a in args for leaf in _flat_args(a)]


def _unknown_key(loc: tuple[int | str, ...], model: type[BaseModel]) -> str:
    """``unknown key``, with the nearest valid key at that place and the valid keys."""
    holder = _model_at(model, loc[:-1])
    if holder is None:
        return "unknown key"
    valid = [f.alias or n for n, f in holder.model_fields.items()]
    key = str(loc[-1])
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5) or difflib.get_close_matches(
        to_camel(key), valid, n=1, cutoff=0.5
    )
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown key{hint} valid keys here: {', '.join(valid)}"


def problems(err: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """A pydantic error of any config model as ``(path, message)`` pairs, paths in camelCase.

    ``model`` is the model that was validated (default :class:`StackConfig`); it lets an unknown key name the
    nearest valid one.
    """
    root = model or StackConfig
    problems: list[tuple[str, str]] = []
    for e in err.errors(include_url=False, include_input=False):
        base = _path(e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = _unknown_key(tuple(e["loc"]), root)
        elif e["type"] == "union_tag_invalid":
            tag = str(e.get("ctx", {}).get("tag", ""))[:40]
            msg = f"unknown capacity type {tag!r}; valid choices: {', '.join(CAPACITY_TYPES)}"
        elif e["type"] == "union_tag_not_found":
            msg = f"missing 'type'; valid choices: {', '.join(CAPACITY_TYPES)}"
        elif e["type"] == "literal_error" and "expected" in e.get("ctx", {}):
            msg = f"not allowed; valid choices: {e['ctx']['expected']}"
        for line in msg.split("\n"):
            if FIELD_SEP in line:
                sub, text = line.split(FIELD_SEP, 1)
                problems.append((f"{base}.{sub}" if base else sub, text))
            else:
                problems.append((base or "(root)", line))
    return problems
