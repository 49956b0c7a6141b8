"""The Ray platform split from ``RayTpuCluster`` without a replacement: what an existing stack's ``pulumi up`` sees.

The platform's children moved from the ``RayTpuCluster`` named ``ray`` to the ``RayPlatform`` of the same name, so
their URNs changed; each must carry an alias naming its old URN (the engine then updates it in place) and every
other resource must keep its URN. ``tests/fixtures/urns/before_ray_platform_split.json`` holds the URNs of the
three stacks' plans as the program declared them before the split (the goldens of that commit). A change that
renames or removes a resource of those stacks fails the URN comparison on purpose: an existing stack would lose it
(one that adds a resource does not). Once every
deployed stack has run ``pulumi up`` past the split, the aliases, this module and its fixture may go together.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from tests.support import engine_run as er
from tests.support.plans import STACKS
from tpuray.components.config import parse_stack_config
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.ray_platform import FORMER_PARENT_TYPE, RayPlatform, RayPlatformArgs
from tpuray.components.review.diff import diff_plans
from tpuray.components.review.engine import ProgramRun

PROGRAM = er.ROOT / "infra" / "__main__.py"
BEFORE = json.loads((er.ROOT / "tests" / "fixtures" / "urns" / "before_ray_platform_split.json").read_text())
PLATFORM = "tpuray:index:RayPlatform"
REMOVED_SINCE: dict[str, set[str]] = {
    "prod-dws": {
        "urn:pulumi:prod-dws::tpuray::tpuray:index:TpuSlicePool$gcp:container/nodePool:NodePool::v6e-dws-v6e-dws-1",
    },
}
"""What a stack dropped on purpose since the split, with its reason. prod-dws: its queued v6e pool went from two
slices to one, since one ProvisioningRequest is only known to fill one multi-host slice
(``components/config/rules.py``, ``queued_job_slices_rules``), so its second node pool goes. A queued pool has nodes
only while a request is granted: apply that ``pulumi up`` when no job runs on it."""


@pytest.fixture(scope="module", params=STACKS)
def program_run(request: pytest.FixtureRequest) -> tuple[str, ProgramRun]:
    stack = request.param
    return stack, er.run(PROGRAM, stack=stack, config=er.cli_config(stack))[0]


def old_urn(urn: str, old_parent: str) -> str:
    """Where a child of the platform was before: under ``old_parent``, its type qualified by the old parent's."""
    child_type, name = urn.split("::")[2].split("$")[-1], urn.split("::")[3]
    return f"{old_parent.rsplit('::', 2)[0]}::{old_parent.split('::')[2]}${child_type}::{name}"


def test_every_moved_child_has_an_alias_naming_its_old_parent(program_run: tuple[str, ProgramRun]) -> None:
    stack, rec = program_run
    old_parent = f"urn:pulumi:{stack}::tpuray::{FORMER_PARENT_TYPE}::ray"
    moved = er.children_of(rec, PLATFORM)
    assert len(moved) >= 19, [r["type"] for r in moved]  # namespace, policies, token, bucket, identities, operator
    for r in moved:
        aliases = r["options"].get("aliasURNs", [])
        assert aliases == [old_urn(r["urn"], old_parent)], r["urn"]
        assert aliases[0].startswith(f"urn:pulumi:{stack}::tpuray::{FORMER_PARENT_TYPE}$"), aliases
        assert aliases[0] in BEFORE[stack], f"{r['urn']}'s alias names no resource of the stack before the split"


def test_urns_before_and_after_the_split(program_run: tuple[str, ProgramRun]) -> None:
    stack, rec = program_run
    before = set(BEFORE[stack])
    after = {r["urn"]: r for r in rec.resources}
    # every resource an existing stack has is still claimed, by its own URN or by an alias
    claimed = set(after) | {a for r in after.values() for a in r["options"].get("aliasURNs", [])}
    assert before - claimed == REMOVED_SINCE.get(stack, set()), "these would be deleted (or replaced) by pulumi up"
    # what is not moved keeps its URN, and the platform component is new (a resource added to the stack since the
    # split is new too: it is not held to this list)
    unmoved = [u for u, r in after.items() if not r["options"].get("aliasURNs")]
    assert f"urn:pulumi:{stack}::tpuray::{PLATFORM}::ray" in set(unmoved) - before
    assert not any(u in before for u, r in after.items() if r["options"].get("aliasURNs")), "moved yet unmoved"


def test_plan_diff_matches_a_moved_resource_by_its_alias() -> None:
    head = "urn:pulumi:s::p::tpuray:index"
    old: dict[str, Any] = {
        "urn": f"{head}:RayTpuCluster$kubernetes:core/v1:Namespace::ray-namespace",
        "type": "kubernetes:core/v1:Namespace",
        "name": "ray-namespace",
        "parent": f"{head}:RayTpuCluster::ray",
        "options": {},
        "inputs": {"a": 1},
    }
    moved = {
        **old,
        "urn": f"{head}:RayPlatform$kubernetes:core/v1:Namespace::ray-namespace",
        "parent": f"{head}:RayPlatform::ray",
        "options": {"aliasURNs": [old["urn"]]},
    }
    base = {"stack": "s", "resources": [old]}
    d = diff_plans(base, {"stack": "s", "resources": [moved]})
    assert d.added == [] and d.removed == []
    (change,) = d.changed
    assert [f.path for f in change.fields] == [("(parent)",)] and not change.replaced
    # without the alias the same pair is a delete and a create
    d = diff_plans(base, {"stack": "s", "resources": [{**moved, "options": {}}]})
    assert len(d.added) == len(d.removed) == 1


def build_nested() -> Callable[[], dict[str, Any]]:
    """A platform inside another component: the old parent is the RayTpuCluster under that same component."""

    def build() -> dict[str, Any]:
        outer = pulumi.ComponentResource("test:index:Outer", "outer")
        cfg = parse_stack_config(
            {
                "project": "tpuray-test-proj",
                "region": "us-east5",
                "zone": "us-east5-a",
                "slicePools": [{"name": "v6e", "generation": "v6e", "topology": "4x4"}],
            }
        )
        plan = plan_stack(cfg, "test").ray
        RayPlatform("ray", RayPlatformArgs(plan), pulumi.ResourceOptions(parent=outer))
        return {}

    return build


def test_a_nested_platforms_alias_names_the_old_parent_under_the_same_component() -> None:
    rec, _ = er.run(build_nested())
    moved = er.children_of(rec, PLATFORM)
    assert moved
    old_parent = "urn:pulumi:test::tpuray::test:index:Outer$tpuray:index:RayTpuCluster::ray"
    for r in moved:
        assert r["options"]["aliasURNs"] == [old_urn(r["urn"], old_parent)]
