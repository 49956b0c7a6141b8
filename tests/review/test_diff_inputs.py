"""``tpuray diff`` on the plans a reviewer may be handed: a change to ``cost.rates`` alone, plans of two stacks, a
hand-edited node count that is no count, and inputs nested deeper than any recursion limit."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.plans import GOLDEN
from tpuray.components.cli import main
from tpuray.components.review.diff import StackMismatchError, diff_plans, render_markdown

NODE_POOL = "gcp:container/nodePool:NodePool"


def _tpu_pool(plan: dict[str, Any]) -> dict[str, Any]:
    pool: dict[str, Any] = next(
        r for r in plan["resources"] if r["type"] == NODE_POOL and "tpu" in r["inputs"]["nodeConfig"]["machineType"]
    )
    return pool


def _plan(stack: str = "dev") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / stack / "plan.json").read_text())
    return doc


def _write(folder: Path, plan: dict[str, Any] | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(plan if isinstance(plan, str) else json.dumps(plan))
    return folder


def _diff_cli(tmp_path: Path, base: dict[str, Any] | str, new: dict[str, Any] | str) -> tuple[int, str, str]:
    out = tmp_path / "comment.md"
    code = main(["diff", str(_write(tmp_path / "a", base)), str(_write(tmp_path / "b", new)), "--out", str(out)])
    return code, out.read_text() if out.exists() else "", ""


def test_a_rates_only_change_is_not_no_changes() -> None:
    base = _plan()
    new = copy.deepcopy(base)
    # dev: 4 v5e chips on spot in us-west4 at the catalogue's $0.4692/chip-h = $1.88/h; a supplied rate of $0.50
    new["config"]["tpuray:cost"] = json.dumps(
        {"rates": [{"generation": "v5e", "capacity": "spot", "usdPerChipHour": 0.5, "source": "contract B"}]}
    )
    d = diff_plans(base, new)
    assert not d.changed and not d.added and not d.removed
    md = render_markdown([d])
    assert "No changes." not in md
    assert "$1.88/h → $2.00/h" in md and "+$0.12/h" in md
    assert "| v5e-dev | $1.88 | $2.00 | +$0.12 | price |" in md
    # the same plan twice still says so
    assert "No changes." in render_markdown([diff_plans(base, copy.deepcopy(base))])


def test_plans_of_two_stacks_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StackMismatchError, match="stack 'dev' and the new plan of stack 'prod'"):
        diff_plans(_plan("dev"), _plan("prod"))
    code, _, _ = _diff_cli(tmp_path, _plan("dev"), _plan("prod"))
    err = capsys.readouterr().err
    assert code == 2 and "a diff compares one stack at two versions" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        # numbers no plan.json holds: the file reader refuses them (components/catalog/data_file.py)
        ("1e999", "the number 1e999 does not fit a double"),
        ("-1", "autoscaling.totalMaxNodeCount is -1"),
        ("2.5", "autoscaling.totalMaxNodeCount is 2.5"),
        ("9" * 400, "an integer of 400 digits"),
        ('"3"', "autoscaling.totalMaxNodeCount is '3'"),
        ("true", "autoscaling.totalMaxNodeCount is True"),
    ],
    ids=["infinite", "negative", "fraction", "400-digit", "text", "boolean"],
)
def test_a_node_count_that_is_no_count_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str, shown: str
) -> None:
    base = _plan()
    new = copy.deepcopy(base)
    pool = _tpu_pool(new)
    pool["inputs"]["autoscaling"] = {"totalMaxNodeCount": 1, "totalMinNodeCount": 0}
    text = json.dumps(new).replace('"totalMaxNodeCount": 1', f'"totalMaxNodeCount": {count}')
    code, _, _ = _diff_cli(tmp_path, base, text)
    err = capsys.readouterr().err
    assert code == 2, err
    assert shown in err
    assert "whole number from 0 to 15,000" in err or "plan.json" in err
    assert "internal error" not in err and "Traceback" not in err


def test_deep_inputs_are_compared_without_recursion() -> None:
    base = _plan()
    new = copy.deepcopy(base)
    deep_a: Any = 0
    deep_b: Any = 1
    for _ in range(5000):  # far deeper than Python's recursion limit
        deep_a, deep_b = {"k": deep_a}, {"k": deep_b}
    _tpu_pool(base)["inputs"]["deep"] = deep_a
    _tpu_pool(new)["inputs"]["deep"] = deep_b
    d = diff_plans(base, new)
    (change,) = d.changed
    (field,) = change.fields
    assert field.path == ("deep", *["k"] * 5000) and (field.old, field.new) == (0, 1)
    assert "No changes." not in render_markdown([d])


def test_deep_json_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(_plan()).replace('"violations": []', f'"violations": [], "deep": {deep}', 1)
    code, _, _ = _diff_cli(tmp_path, _plan(), text)
    err = capsys.readouterr().err
    assert code == 2 and "nested deeper than 100 levels" in err and "Traceback" not in err


# ---- every refusal names the plan (base or new, with its file) and the field ---------------------------------------
def _first(plan: dict[str, Any], type_: str) -> tuple[int, dict[str, Any]]:
    return next((i, r) for i, r in enumerate(plan["resources"]) if r["type"] == type_)


def _node_pool(plan: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    pool = _tpu_pool(plan)
    return plan["resources"].index(pool), pool


def _set_commitment(plan: dict[str, Any], term: str) -> None:
    pools = json.loads(plan["config"]["tpuray:slicePools"])
    pools[0]["capacity"]["commitment"] = term
    plan["config"]["tpuray:slicePools"] = json.dumps(pools)


def _corrupt(plan: dict[str, Any], case: str) -> tuple[str, str]:
    """Break ``plan`` one way; returns (the field the refusal must name, a phrase of its problem)."""
    if case == "nodeConfig":
        i, pool = _node_pool(plan)
        pool["inputs"]["nodeConfig"] = 3
        return f"resources[{i}].inputs.nodeConfig", "3, not an object"
    if case == "nodeLocations":
        i, pool = _node_pool(plan)
        pool["inputs"]["nodeLocations"] = [5]
        return f"resources[{i}].inputs.nodeLocations[0]", "5, not a string"
    if case == "count":
        i, pool = _node_pool(plan)
        pool["inputs"]["autoscaling"] = {"totalMaxNodeCount": -1}
        return f"resources[{i}].inputs", "autoscaling.totalMaxNodeCount is -1"
    if case == "flavor-name":
        i, queue = _first(plan, "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
        del queue["inputs"]["spec"]["resourceGroups"][0]["flavors"][0]["name"]
        return f"resources[{i}].inputs.spec.resourceGroups[0].flavors[0].name", "missing"
    if case == "node-labels":
        i, flavor = _first(plan, "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
        flavor["inputs"]["spec"]["nodeLabels"] = "x"
        return f"resources[{i}].inputs.spec.nodeLabels", "'x', not an object"
    if case == "rates":
        plan["config"]["tpuray:cost"] = json.dumps({"rates": 5})
        return "config.tpuray:cost", "rates"
    if case == "commitment":
        _set_commitment(plan, "2y")
        return "config.tpuray:slicePools", "capacity.commitment is '2y'"
    if case == "aliases":
        i, pool = _node_pool(plan)
        pool["options"]["aliasURNs"] = 5
        return f"resources[{i}].options.aliasURNs", "not a list of strings"
    if case == "aliases-null":
        i, pool = _node_pool(plan)
        pool["options"]["aliasURNs"] = None
        return f"resources[{i}].options.aliasURNs", "not a list of strings (it is null)"
    if case == "cost-deep":  # the config's JSON text, nested past Python's recursion limit
        plan["config"]["tpuray:cost"] = '{"rates": ' + "[" * 5000 + "]" * 5000 + "}"
        return "config.tpuray:cost", "nested deeper than 100 levels"
    if case == "pools-deep":
        plan["config"]["tpuray:slicePools"] = "[" * 5000 + "]" * 5000
        return "config.tpuray:slicePools", "nested deeper than 100 levels"
    raise AssertionError(case)


_CASES = [
    *("nodeConfig", "nodeLocations", "count", "flavor-name", "node-labels", "rates", "commitment"),
    *("aliases", "aliases-null", "cost-deep", "pools-deep"),
]
_SHAPE_CASES = {"aliases", "aliases-null"}
"""Refused by the plan file's shape check, whose line names the file but not which side of the diff it is."""


@pytest.mark.parametrize("case", _CASES)
@pytest.mark.parametrize("side", ["base", "new"])
def test_a_refusal_names_the_plan_and_the_field(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], side: str, case: str
) -> None:
    tmp = tmp_path_factory.mktemp("d")
    plans = {"base": _plan("prod-dws"), "new": _plan("prod-dws")}
    field, problem = _corrupt(plans[side], case)
    code, _, _ = _diff_cli(tmp, plans["base"], plans["new"])
    err = capsys.readouterr().err
    path = tmp / ("a" if side == "base" else "b") / "plan.json"
    assert code == 2, err
    assert str(path) in err and field in err and problem in err, err
    if case not in _SHAPE_CASES:  # the file reader's refusal names the file; the diff's names the side too
        assert f"the {side} plan {path}: {field}" in err, err
    other = tmp / ("b" if side == "base" else "a") / "plan.json"
    assert str(other) not in err and "internal error" not in err and "Traceback" not in err


def test_plans_of_two_stacks_name_both_files_and_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = _diff_cli(tmp_path, _plan("dev"), _plan("prod"))
    err = capsys.readouterr().err
    a, b = tmp_path / "a" / "plan.json", tmp_path / "b" / "plan.json"
    assert code == 2 and f"the base plan {a} and the new plan {b}: stack:" in err
    assert f"the base plan {a} is of stack 'dev' and the new plan {b} of stack 'prod'" in err


# ---- the hypothesis corpus: any JSON wherever the diff reads a plan ------------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=12,
)
NESTED_TEXT = st.integers(0, 5000).flatmap(
    lambda n: st.sampled_from(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n, '{"rates":' + "[" * n + "]" * n + "}"])
)
"""A config value's JSON text nested up to far past Python's recursion limit (the plan's config holds JSON text)."""


def _pool_path(plan: dict[str, Any], *rest: str) -> tuple[str | int, ...]:
    return ("resources", plan["resources"].index(_tpu_pool(plan)), *rest)


HOSTILE_PATHS: dict[str, Any] = {
    "stack": lambda p: ("stack",),
    "resources": lambda p: ("resources",),
    "config": lambda p: ("config",),
    "cost": lambda p: ("config", "tpuray:cost"),
    "slice pools": lambda p: ("config", "tpuray:slicePools"),
    "violations": lambda p: ("violations",),
    "a resource": lambda p: ("resources", 0),
    "urn": lambda p: ("resources", 0, "urn"),
    "type": lambda p: ("resources", 0, "type"),
    "parent": lambda p: ("resources", 0, "parent"),
    "options": lambda p: _pool_path(p, "options"),
    "aliases": lambda p: _pool_path(p, "options", "aliasURNs"),
    "replace on": lambda p: _pool_path(p, "options", "replaceOnChanges"),
    "inputs": lambda p: _pool_path(p, "inputs"),
    "node config": lambda p: _pool_path(p, "inputs", "nodeConfig"),
    "machine type": lambda p: _pool_path(p, "inputs", "nodeConfig", "machineType"),
    "autoscaling": lambda p: _pool_path(p, "inputs", "autoscaling"),
    "node count": lambda p: _pool_path(p, "inputs", "nodeCount"),
    "placement": lambda p: _pool_path(p, "inputs", "placementPolicy"),
    "locations": lambda p: _pool_path(p, "inputs", "nodeLocations"),
}
"""Where a hand-edited or hostile plan can hold anything: each a function of the plan to a path in it."""


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    side=st.sampled_from(["base", "new"]),
    where=st.sampled_from(sorted(HOSTILE_PATHS)),
    value=JSON | NESTED_TEXT,
)
def test_a_hostile_plan_is_a_clean_error_never_an_internal_one(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], side: str, where: str, value: Any
) -> None:
    """Whatever JSON sits wherever the diff reads a plan (config strings nested past the recursion limit, a null
    alias list, a count that is text), ``tpuray diff`` ends in a diff or in exit 2 with one clean line: never in
    the CLI's internal error (exit 70) or a traceback."""
    plans = {"base": _plan("prod-dws"), "new": _plan("prod-dws")}
    path = HOSTILE_PATHS[where](plans[side])
    parent: Any = plans[side]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    code, _, _ = _diff_cli(tmp_path_factory.mktemp("d"), plans["base"], plans["new"])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    assert "internal error" not in err and "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
