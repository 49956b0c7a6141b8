"""The base of every config model and the helpers the models share: a model-level error that names a sub-field
(:class:`Problem`, :func:`field_problem`), the error that lists a stack's problems (:class:`ConfigError`), durations,
name patterns and the valid form of each pattern."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import pydantic.dataclasses
from pydantic import (
    BaseModel,
    ConfigDict,
    GetPydanticSchema,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema


class ConfigModel(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown keys are errors; values are immutable.

    Strict types: Pulumi's project config declares each key's type, so ``deletionProtection: 0`` or ``steps: true``
    is an error here too rather than a silent conversion.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True, strict=True
    )


def config_dataclass(cls: type[Any]) -> GetPydanticSchema:
    """Validate a component's frozen dataclass (``cls``) as config: camelCase keys, unknown keys are errors, and
    the result is a plain ``cls`` (equal to one built by hand).

    Used as ``Annotated[cls, config_dataclass(cls)]``. The dataclass level is lax so that a mapping is accepted
    (strict pydantic takes only an instance for a dataclass); its fields are plain strings, which lax pydantic
    does not coerce from numbers or booleans either.
    """
    wrapped = pydantic.dataclasses.dataclass(cls, config=ConfigDict(**{**ConfigModel.model_config, "strict": False}))
    names = [f.name for f in dataclasses.fields(cls)]

    def plain(value: Any) -> Any:
        return cls(**{n: getattr(value, n) for n in names})

    return GetPydanticSchema(
        lambda _src, handler: core_schema.no_info_after_validator_function(plain, handler(wrapped))
    )


_PATTERN_FORMS: dict[str, str] = {}


def pattern(regex: str, form: str) -> str:
    """``regex``, for a ``Field(pattern=...)``, with ``form``: its valid form in words and an example, which a value
    that does not match is told (pydantic's own message shows only the regex).

    pydantic matches a ``pattern`` given as a string with the Rust ``regex`` crate (``ConfigDict.regex_engine``'s
    default, ``rust-regex``): it searches anywhere in the value, so every pattern is anchored with ``^`` and ``$``,
    and there ``$`` is the end of the text. A pattern matched with Python's ``re`` (a compiled one, or a rule's own)
    uses ``fullmatch``: there ``$`` also matches before a final newline."""
    _PATTERN_FORMS[regex] = form
    return regex


def pattern_form(regex: str) -> str | None:
    """The valid form :func:`pattern` gave ``regex``, if it gave one."""
    return _PATTERN_FORMS.get(regex)


NAME_PATTERN = pattern(
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
    "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (an RFC 1035 "
    "label), e.g. 'tpu-dev'",
)
_DURATION = re.compile(r"^\s*([0-9]+)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: object) -> int:
    """A duration as seconds: an int, or a string like ``"3600s"``, ``"90m"``, ``"24h"``, ``"7d"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '24h', '90m' or '3600s', got {value!r}")
    if isinstance(value, int):
        return value
    m = _DURATION.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"expected a duration like '24h', '90m' or '3600s', got {value!r}")
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]


class Problem(NamedTuple):
    """One problem of a config value: where (a camelCase path below the model that finds it) and what.

    A named pair, so a caller may also unpack it as ``path, message``."""

    path: str
    message: str


class ConfigError(ValueError):
    """Every problem of a stack configuration, each a :class:`Problem` (a ``(path, message)`` pair)."""

    MAX_SHOWN = 40
    """Problems printed at most; the rest are counted (a generated file can have thousands)."""
    MAX_LINE = 400

    def __init__(self, problems: Sequence[tuple[str, str]], source: str | None = None) -> None:
        self.problems = [Problem(*p) for p in problems]
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(problems)} problem(s){where}:"]
        for path, message in self.problems[: self.MAX_SHOWN]:
            line = f"  {path}: {message}"
            lines.append(line if len(line) <= self.MAX_LINE else line[: self.MAX_LINE - 3] + "...")
        if len(problems) > self.MAX_SHOWN:
            lines.append(f"  ... and {len(problems) - self.MAX_SHOWN} more")
        super().__init__("\n".join(lines))


class FieldProblems(ValueError):  # pydantic turns a ValueError from a validator into its error
    """Problems a model's validator finds under its own fields: pydantic keeps the exception in the error's
    context, and :func:`tpuray.components.config.errors.problems` puts each one at its path."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in self.problems))


def field_problem(field: str, message: str) -> FieldProblems:
    """The one problem a model's validator raises about its field ``field``."""
    return FieldProblems([Problem(field, message)])
