"""The CrossGuard policies run on plain resources, as ``pulumi preview --policy-pack`` runs them: each resource
policy on one resource, each stack policy on a list of them; each returns the messages it reported."""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)

from tpuray.components.review.policy_pack import POLICIES, STACK_POLICIES

BY_NAME = {p.name: p for p in POLICIES}
STACK_BY_NAME = {p.name: p for p in STACK_POLICIES}


def violations(policy: ResourceValidationPolicy, r: dict[str, Any], config: dict[str, Any] | None = None) -> list[str]:
    found: list[str] = []
    args = ResourceValidationArgs(r["type"], r["inputs"], r["urn"], r["name"], None, None, config)  # type: ignore[arg-type]

    def report(message: str, urn: str | None = None) -> None:
        found.append(message)

    policy.validate(args, report)
    return found


def stack_violations(name: str, resources: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    args = StackValidationArgs(
        [
            PolicyResource(r["type"], r["inputs"], r["urn"], r["name"], None, None, None, [], {})  # type: ignore[arg-type]
            for r in resources
        ]
    )

    def report(message: str, urn: str | None = None) -> None:
        found.append(message)

    STACK_BY_NAME[name].validate(args, report)
    return found
