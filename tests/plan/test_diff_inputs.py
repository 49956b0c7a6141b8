"""``tpuray diff`` on the plans a reviewer may be handed: a change to ``cost.rates`` alone, plans of two stacks, a
hand-edited node count that is no count, and inputs nested deeper than any recursion limit."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.plan.conftest import GOLDEN
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
