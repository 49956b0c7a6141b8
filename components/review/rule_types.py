"""The types every review rule shares: the resource a rule reads, its context, a rule, a stack rule and a finding.

Pure Python, imports no rule module: :mod:`.policy_rules`, :mod:`.security_rules`, :mod:`.maintenance_rules` and
:mod:`.serving_rules` build on these, and :mod:`.rules` gathers them into the registry, so no rule module imports
another's registry. Inputs are Pulumi wire values: camelCase keys, plain dicts and lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.config import PRODUCTION_STACKS, is_production_stack

__all__ = ["Resource", "Rule", "RuleContext", "StackRule", "Violation", "stack_of_urn"]


@dataclass(frozen=True)
class Resource:
    """The parts of a resource a rule reads."""

    type: str
    name: str
    props: Mapping[str, Any]
    urn: str = ""


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know beyond the resource: the stack and which stacks count as production."""

    stack: str = ""
    production_stacks: Sequence[str] = PRODUCTION_STACKS

    @property
    def production(self) -> bool:
        return is_production_stack(self.stack, self.production_stacks)


@dataclass(frozen=True)
class Rule:
    """A rule over one resource: ``check`` returns violation messages."""

    name: str
    description: str
    types: tuple[str, ...]
    check: Callable[[Resource, RuleContext], list[str]]
    advisory: bool = False
    """A warning, not a failure (CrossGuard's advisory enforcement level)."""


@dataclass(frozen=True)
class StackRule:
    """A rule over every resource of a stack: ``check`` returns ``(urn, message)`` pairs."""

    name: str
    description: str
    check: Callable[[Sequence[Resource], RuleContext], list[tuple[str, str]]]


@dataclass(frozen=True)
class Violation:
    rule: str
    urn: str
    message: str
    advisory: bool = False


def stack_of_urn(urn: str) -> str:
    """``urn:pulumi:<stack>::<project>::<type>::<name>`` -> ``<stack>``."""
    head = urn.split("::", 1)[0]
    return head.removeprefix("urn:pulumi:") if head.startswith("urn:pulumi:") else ""
