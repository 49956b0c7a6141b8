"""The registry of review rules: every resource rule and stack rule, and the function that runs them.

The rule modules (:mod:`.policy_rules`, :mod:`.security_rules`, :mod:`.maintenance_rules`, :mod:`.pod_fit`,
:mod:`.serving_rules`, :mod:`.listener_rules`) build on the shared types of :mod:`.rule_types` and import nothing from
here; this module gathers them. ``tpuray plan`` runs :func:`check_resources` over the resources it collected;
:mod:`.policy_pack` makes each rule a CrossGuard policy.
"""

from __future__ import annotations

from collections.abc import Iterable

from tpuray.components.review.listener_rules import LISTENER_STACK_RULES
from tpuray.components.review.maintenance_rules import MAINTENANCE_STACK_RULES
from tpuray.components.review.pod_fit import POD_FIT_STACK_RULES
from tpuray.components.review.policy_rules import PLATFORM_RULES
from tpuray.components.review.rule_types import Resource, Rule, RuleContext, StackRule, Violation, stack_of_urn
from tpuray.components.review.security_rules import SECURITY_RULES, SECURITY_STACK_RULES
from tpuray.components.review.serving_rules import SERVING_STACK_RULES

__all__ = ["RULES", "STACK_RULES", "check_resources"]

RULES: tuple[Rule, ...] = (*PLATFORM_RULES, *SECURITY_RULES)
"""Every rule over one resource: tpuray's placement and platform rules, then the security rules."""
STACK_RULES: tuple[StackRule, ...] = (
    *SECURITY_STACK_RULES,
    *MAINTENANCE_STACK_RULES,
    *POD_FIT_STACK_RULES,
    *SERVING_STACK_RULES,
    *LISTENER_STACK_RULES,
)
"""Every rule over a whole stack: security, maintenance, every planned Ray pod against its node pool, whether a
serving upgrade fits its pool, and one listener per port in every planned Ray pod."""


def check_resources(resources: Iterable[Resource], ctx: RuleContext | None = None) -> list[Violation]:
    """Every rule over every resource of a plan, then the stack rules; the stack comes from the URNs unless
    ``ctx`` names it."""
    out: list[Violation] = []
    resources = list(resources)
    for res in resources:
        c = ctx or RuleContext(stack=stack_of_urn(res.urn))
        for rule in RULES:
            if res.type in rule.types:
                out.extend(Violation(rule.name, res.urn or res.name, m, rule.advisory) for m in rule.check(res, c))
    stack_ctx = ctx or RuleContext(stack=stack_of_urn(resources[0].urn) if resources else "")
    for stack_rule in STACK_RULES:
        out.extend(Violation(stack_rule.name, urn, m) for urn, m in stack_rule.check(resources, stack_ctx))
    return out
