"""Shared fixtures of the plan tests: the real stacks rendered once per session, in this process (a plugin of
tests/conftest.py, so the review, planning and component tests all reach the same session renders).

Rendering dev and then prod in one process also exercises the engine's reset of the SDK's global state.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import ROOT as ROOT  # re-exported: the tests that read plans import it from here
from tpuray.components.review.plan import Plan, render_stack

GOLDEN = ROOT / "tests" / "review" / "golden"  # written by tests/review/test_plan_golden.py
STACKS = ("dev", "prod", "prod-dws")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def plans() -> dict[str, Plan]:
    return {stack: render_stack(stack, ROOT) for stack in STACKS}


@pytest.fixture
def resource_of(plans: dict[str, Plan]) -> Callable[[str, str, str | None], dict[str, Any]]:
    """A deep copy of one resource of a stack's plan, by type and (optionally) name, for mutating."""

    def pick(stack: str, type_: str, name: str | None = None) -> dict[str, Any]:
        for r in plans[stack].resources:
            if r["type"] == type_ and (name is None or r["name"] == name or r["inputs"].get("name") == name):
                return copy.deepcopy(r)
        raise LookupError(f"no {type_} {name or ''} in the {stack} plan")

    return pick


def canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)
