"""Read a stack's typed configuration from ``pulumi.Config("tpuray")`` inside a Pulumi program.

Each top-level key of :class:`~tpuray.components.config.StackConfig` is read from the stack's config: string
fields raw, objects and arrays as JSON (how the CLI and ``PULUMI_CONFIG`` hand them to the program). The values
then go through :func:`~tpuray.components.config.parse_stack_config`, so a bad stack fails with one
:class:`~tpuray.components.config.ConfigError` listing every problem before any resource is declared.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pydantic.alias_generators import to_camel

from tpuray.components.config import NAMESPACE, ConfigError, StackConfig, parse_stack_config
from tpuray.components.project_file import pulumi_type

__all__ = ["from_pulumi_config", "raw_stack_values"]


def raw_stack_values(config: pulumi.Config) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The stack's ``tpuray:`` values keyed by their camelCase names, and any JSON problems."""
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for name, info in StackConfig.model_fields.items():
        key = info.alias or to_camel(name)
        raw = config.get(key)
        if raw is None:
            continue
        if pulumi_type(info.annotation)["type"] == "string":  # the CLI hands strings over raw
            values[key] = raw
            continue
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append((key, f"expected a JSON object or array (as the Pulumi CLI passes it): {e.msg}"))
    return values, problems


def from_pulumi_config(config: pulumi.Config | None = None) -> StackConfig:
    """The validated :class:`StackConfig` of the running stack; raises :class:`ConfigError`."""
    config = config or pulumi.Config(NAMESPACE)
    values, problems = raw_stack_values(config)
    stack = pulumi.get_stack()
    source = f"stack {stack}"
    if problems:
        raise ConfigError(problems, source)
    return parse_stack_config(values, source, stack)
