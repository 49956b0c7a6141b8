"""Read a stack's ``tpuray:`` values: from a stack file, or from a mapping of values."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tpuray.components.catalog.data_file import DataFileError, loads_json
from tpuray.components.config.base import ConfigError, Problem
from tpuray.components.config.errors import problems
from tpuray.components.config.rules import (
    rules_of_valid_parts,
)
from tpuray.components.config.stack import StackConfig
from tpuray.components.config.stack_yaml import YamlError, read_yaml_file

NAMESPACE = "tpuray"
"""The Pulumi config namespace (the project name): keys are ``tpuray:<key>``."""

RAY_TOKEN_CONFIG_KEY = "rayAuthToken"
"""Optional ``tpuray:rayAuthToken`` (set with ``pulumi config set --secret``): the Ray token to use instead of a
generated one. Read only with ``Config.get_secret`` by the program."""
SECRET_KEYS = frozenset({RAY_TOKEN_CONFIG_KEY})
"""Secret-bearing config keys: never part of :class:`StackConfig` (whose values are plain and may be printed),
never read with ``Config.get``."""


def parse_stack_config(values: Mapping[str, Any], source: str | None = None, stack: str | None = None) -> StackConfig:
    """Validate the ``tpuray:`` config values of a stack (namespace already stripped); ``stack`` names the stack
    for the production rules."""
    if not isinstance(values, Mapping):
        message = f"expected a mapping of config keys, got {type(values).__name__}"
        raise ConfigError([Problem("(root)", message)], source)
    try:
        # by alias only: a snake_case key (slice_pools) is a different Pulumi config key the program never reads
        return StackConfig.model_validate(dict(values), by_name=False, context={"stack": stack})
    except ValidationError as e:
        found = problems(e)
        found += [p for p in rules_of_valid_parts(values, stack) if p not in found]
        raise ConfigError(found, source) from None


_GO_JSON_PLAIN_BELOW = 1e21
"""Go's encoding/json writes a float64 of magnitude below 1e21 without an exponent (encode.go, floatEncoder), so
an integral one reaches the program as a JSON integer."""


def as_pulumi_passes(value: Any) -> Any:
    """A value from the stack file as the Pulumi program receives it: Pulumi decodes the file with yaml.v3 and hands
    objects to the program as JSON (``pulumi_values``), so a float that is a whole number (``1e3``, ``60.0``)
    arrives as the integer ``1000``/``60``; everything else is unchanged."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _GO_JSON_PLAIN_BELOW:
        return int(value)
    if isinstance(value, Mapping):
        return {k: as_pulumi_passes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_pulumi_passes(v) for v in value]
    return value


def stack_values(raw_config: Mapping[str, Any], source: str | None = None) -> dict[str, Any]:
    """The ``tpuray:`` keys of a stack file's ``config:`` map, namespace stripped.

    Keys without a namespace belong to the project (as Pulumi reads them); other namespaces (``gcp:``,
    ``kubernetes:``) are the providers' and ignored here.
    """
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in raw_config.items():
        ns, _, name = str(key).rpartition(":")
        if ns in ("", NAMESPACE) and name not in SECRET_KEYS:  # secret-bearing keys are read with get_secret only
            if name in given_as:  # `cluster` and `tpuray:cluster` are one Pulumi key
                raise ConfigError([Problem(name, f"given twice, as {given_as[name]!r} and {str(key)!r}")], source)
            given_as[name] = str(key)
            values[name] = as_pulumi_passes(value)
    return values


def pulumi_values(raw: Mapping[str, str], string_keys: Collection[str], source: str | None = None) -> dict[str, Any]:
    """A stack's ``tpuray:`` values as a Pulumi program reads them (``pulumi.Config.get``, one string per key): the
    keys in ``string_keys`` as given, the others decoded from JSON, which is how the Pulumi CLI and
    ``PULUMI_CONFIG`` hand objects and arrays to a program. Raises :class:`ConfigError` naming each key that is
    not JSON."""
    values: dict[str, Any] = {}
    found: list[Problem] = []
    for key, text in raw.items():
        if key in string_keys:
            values[key] = text
            continue
        try:
            values[key] = loads_json(text, what="value")
        except DataFileError as e:
            found.append(Problem(key, f"expected a JSON object or array (as the Pulumi CLI passes it): {e}"))
    if found:
        raise ConfigError(found, source)
    return values


def stack_of_file(path: str | Path) -> str | None:
    """``Pulumi.<stack>.yaml`` -> ``<stack>``; None for other file names."""
    m = re.fullmatch(r"Pulumi\.(.+)\.ya?ml", Path(path).name)
    return m.group(1) if m else None


def load_stack_file(path: str | Path, stack: str | None = None) -> StackConfig:
    """Load a ``Pulumi.<env>.yaml`` stack file without the Pulumi CLI; the stack's name (for the production
    rules) is ``stack``, else the ``<env>`` of the file name."""
    p = Path(path)
    try:
        doc = read_yaml_file(p)
    except YamlError as e:
        raise ConfigError([Problem("(file)", str(e))], str(p)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise ConfigError([Problem("config", "a stack file needs a top-level 'config:' mapping")], str(p))
    return parse_stack_config(stack_values(doc["config"], str(p)), str(p), stack or stack_of_file(p))


def find_stack_file(stack: str, start: Path, flag: str = "--stack") -> Path:
    """``Pulumi.<stack>.yaml`` in ``start`` or the nearest of its parents that has one; the error names ``flag``."""
    name = f"Pulumi.{stack}.yaml"
    for d in (start, *start.parents):
        if (d / name).is_file():
            return d / name
    raise ConfigError([Problem(flag, f"no {name} in {start} or its parents; pass --stack-file")])


M = TypeVar("M", bound=BaseModel)


def validated_as(
    model: type[M],
    data: Mapping[str, Any] | str,
    name: Callable[[str, str], tuple[str, str]],
    *,
    strict: bool | None = None,
) -> M:
    """``model`` from ``data`` (a mapping, or JSON text); every problem is worded by :func:`problems` and placed by
    ``name(path, message) -> (field, message)`` (a command line names its flag), all in one :class:`ConfigError`."""
    try:
        if isinstance(data, str):
            return model.model_validate_json(data, strict=strict)
        return model.model_validate(data, strict=strict)
    except ValidationError as e:
        raise ConfigError([name(path, msg) for path, msg in problems(e, model)]) from None


def exclusive_sources(given: Mapping[str, bool]) -> None:
    """At most one of the named sources (flags) is given; the error names the first and the others."""
    named = [k for k, v in given.items() if v]
    if len(named) > 1:
        raise ConfigError([Problem(named[0], f"comes instead of {'/'.join(named[1:])}; pass one of them")])
