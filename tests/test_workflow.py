"""The preview workflow's hardening, checked without GitHub (``.ci/run`` also runs actionlint and zizmor)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def steps() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in WORKFLOWS:
        doc = yaml.safe_load(path.read_text())
        for job in doc["jobs"].values():
            out += [(path.name, step) for step in job.get("steps", [])]
    return out


def test_there_are_workflow_steps() -> None:
    assert WORKFLOWS and len(steps()) > 5


def test_every_action_is_pinned_by_commit_sha() -> None:
    for name, step in steps():
        if "uses" in step and not step["uses"].startswith("./"):
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), (name, step["uses"])


def test_no_expression_is_interpolated_into_a_shell_step() -> None:
    for name, step in steps():
        assert "${{" not in step.get("run", ""), (name, step.get("name"))


def test_checkout_keeps_no_credentials() -> None:
    checkouts = [step for _, step in steps() if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert checkouts and all(step["with"]["persist-credentials"] is False for step in checkouts)


def test_workflows_grant_no_permissions_by_default() -> None:
    for path in WORKFLOWS:
        assert yaml.safe_load(path.read_text())["permissions"] == {}, path.name
