"""Read a stack's typed configuration from ``pulumi.Config("tpuray")`` inside a Pulumi program.

Each top-level key of :class:`~tpuray.components.config.StackConfig` is read from the stack's config: string
fields raw, objects and arrays as JSON (how the CLI and ``PULUMI_CONFIG`` hand them to the program). The values
then go through :func:`~tpuray.components.config.parse_stack_config`, so a bad stack fails with one
:class:`~tpuray.components.config.ConfigError` listing every problem before any resource is declared.
"""

from __future__ import annotations

import pulumi
from pydantic.alias_generators import to_camel

from tpuray.components.config import NAMESPACE, StackConfig, parse_stack_config, pulumi_values
from tpuray.components.config.project_file import pulumi_type

__all__ = ["from_pulumi_config", "raw_stack_values"]


def raw_stack_values(config: pulumi.Config) -> tuple[dict[str, str], set[str]]:
    """The stack's raw ``tpuray:`` strings keyed by their camelCase names, and the keys whose type is a string
    (the CLI hands those over raw; the others are JSON)."""
    raw: dict[str, str] = {}
    strings: set[str] = set()
    for name, info in StackConfig.model_fields.items():
        key = info.alias or to_camel(name)
        value = config.get(key)
        if value is None:
            continue
        raw[key] = value
        if pulumi_type(info.annotation)["type"] == "string":
            strings.add(key)
    return raw, strings


def from_pulumi_config(config: pulumi.Config | None = None) -> StackConfig:
    """The validated :class:`StackConfig` of the running stack; raises :class:`ConfigError`."""
    config = config or pulumi.Config(NAMESPACE)
    raw, strings = raw_stack_values(config)
    stack = pulumi.get_stack()
    source = f"stack {stack}"
    return parse_stack_config(pulumi_values(raw, strings, source), source, stack)
