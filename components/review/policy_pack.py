"""The CrossGuard policies of ``policy/``: :data:`tpuray.components.review.rules.RULES` as
``pulumi_policy.ResourceValidationPolicy`` objects.

Needs the ``policy`` extra (``pulumi-policy``). Only ``policy/__main__.py`` constructs the ``PolicyPack``:
constructing one starts the analyzer server.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from tpuray.components.config import PRODUCTION_STACKS
from tpuray.components.review.rule_types import Resource, Rule, RuleContext, StackRule, stack_of_urn
from tpuray.components.review.rules import RULES, STACK_RULES

__all__ = ["CONFIG_SCHEMA_PROPERTIES", "POLICIES", "STACK_POLICIES", "policy_for", "stack_policy_for"]

CONFIG_SCHEMA_PROPERTIES: dict[str, Any] = {
    "productionStacks": {
        "type": "array",
        "items": {"type": "string"},
        "default": list(PRODUCTION_STACKS),
        "description": "stack names (or prefixes before '-') held to the production rules (deletion protection, "
        "a non-public control plane, images pinned by digest)",
    }
}


def _context(args: ResourceValidationArgs) -> RuleContext:
    config = args.get_config() or {}
    stacks = config.get("productionStacks") or PRODUCTION_STACKS
    return RuleContext(stack=stack_of_urn(args.urn), production_stacks=tuple(str(s) for s in stacks))


def policy_for(rule: Rule) -> ResourceValidationPolicy:
    """One rule as a mandatory resource validation policy."""

    def validate(args: ResourceValidationArgs, report_violation: Any) -> None:
        if args.resource_type not in rule.types:
            return
        res = Resource(type=args.resource_type, name=args.name, props=args.props, urn=args.urn)
        for message in rule.check(res, _context(args)):
            report_violation(f"{args.name}: {message}", None)

    return ResourceValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel.ADVISORY if rule.advisory else EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=CONFIG_SCHEMA_PROPERTIES),
    )


def stack_policy_for(rule: StackRule) -> StackValidationPolicy:
    """One stack rule as a mandatory stack validation policy."""

    def validate(args: StackValidationArgs, report_violation: Any) -> None:
        resources = [Resource(type=r.resource_type, name=r.name, props=r.props, urn=r.urn) for r in args.resources]
        stacks = (args.get_config() or {}).get("productionStacks") or PRODUCTION_STACKS
        ctx = RuleContext(
            stack=stack_of_urn(resources[0].urn) if resources else "", production_stacks=tuple(map(str, stacks))
        )
        for urn, message in rule.check(resources, ctx):
            report_violation(f"{urn.rsplit('::', 1)[-1]}: {message}", urn)

    return StackValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=CONFIG_SCHEMA_PROPERTIES),
    )


POLICIES: list[ResourceValidationPolicy] = [policy_for(rule) for rule in RULES]
STACK_POLICIES: list[StackValidationPolicy] = [stack_policy_for(rule) for rule in STACK_RULES]
