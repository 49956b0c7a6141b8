"""The one text rule (``tpuray.components.catalog.safe_text``) and the review outputs that go through it: a string read
from a plan, a stack file or a flag never adds a line, a heading, a link or a table cell to the PR comment, and never
reaches an SVG or a terminal with a control character in it."""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.plans import GOLDEN, ROOT
from tpuray.components.catalog.names import POOL_LABEL
from tpuray.components.catalog.safe_text import CONTROL_CATEGORIES, md_code, md_text, one_line, xml_text
from tpuray.components.config import ConfigError, load_stack_file
from tpuray.components.review.cost import cost_markdown, cost_of_plan
from tpuray.components.review.dashboard_svg import render_dashboard_svg
from tpuray.components.review.diff import diff_plans, render_markdown

PROPERTY = settings(max_examples=200, deadline=None)

# Text as an attacker writes it: Markdown punctuation, control characters (C0, C1, bidi overrides, separators),
# backtick runs, and plain letters between them.
hostile = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("\\`*_[]()<>|#!~&-+.:= \t\n\r\x1b\x00\x7f\x85\u202e\u200b\u2028\u2029")),
        st.characters(codec="utf-8"),
    ),
    max_size=60,
)

_SPECIAL = set("\\`*_[]<>|#!~&")


def _has_control(s: str) -> bool:
    return any(unicodedata.category(ch) in CONTROL_CATEGORIES for ch in s)


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


@PROPERTY
@given(hostile)
def test_one_line_keeps_no_control_character_and_only_changes_them(text: str) -> None:
    shown = one_line(text)
    assert not _has_control(shown) and "\n" not in shown
    if not _has_control(text):
        assert shown == text


@PROPERTY
@given(hostile)
def test_md_text_escapes_every_markdown_opener(text: str) -> None:
    shown = md_text(text)
    assert not _has_control(shown)
    # every special character is the second of an escape pair: walk the string pairwise
    i = 0
    while i < len(shown):
        if shown[i] == "\\":
            assert i + 1 < len(shown) and shown[i + 1] in _SPECIAL, shown
            i += 2
            continue
        assert shown[i] not in _SPECIAL, shown
        i += 1
    assert _unescape(shown) == one_line(text)  # nothing but escapes was added


@PROPERTY
@given(hostile)
def test_md_code_is_one_code_span_whatever_it_holds(text: str) -> None:
    shown = md_code(text)
    fence = re.match(r"`+", shown)
    assert fence is not None and shown.endswith(fence.group())
    inner = shown[len(fence.group()) : -len(fence.group())]
    assert all(len(run) < len(fence.group()) for run in re.findall(r"`+", inner))
    assert not _has_control(shown)
    assert "|" not in inner.replace("\\|", "")  # a table cell is never split


@PROPERTY
@given(hostile)
def test_xml_text_is_well_formed_text(text: str) -> None:
    shown = xml_text(text)
    assert not _has_control(shown)
    assert not set("<>\"'") & set(shown)
    assert not re.search(r"&(?!amp;|lt;|gt;|quot;|#x27;)", shown)


FORGED = "x\n\n# Budget: pass\n\n[click](https://example.com)\n| a | b |"


def _headings(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.lstrip().startswith("#")]


def _outside_code(md: str) -> str:
    """The Markdown with its code spans removed (inside one, ``[x](y)`` is literal text)."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", md)


def _plan(stack: str = "dev") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / stack / "plan.json").read_text())
    return doc


def _rename_pool(plan: dict[str, Any], label: str) -> dict[str, Any]:
    plan = copy.deepcopy(plan)
    for r in plan["resources"]:
        labels = (r["inputs"].get("nodeConfig") or {}).get("labels")
        if r["type"] == "gcp:container/nodePool:NodePool" and labels:
            labels[POOL_LABEL] = label
            r["name"] = label
    return plan


def test_a_hand_edited_plan_cannot_forge_a_heading_in_cost_md() -> None:
    plan = _rename_pool(_plan(), FORGED)
    md = cost_markdown(cost_of_plan(plan))
    # a region no catalogue row has: the pool is unpriced, and its reason quotes the region in the table
    for r in plan["resources"]:
        if r["type"] == "gcp:container/nodePool:NodePool":
            r["inputs"]["nodeLocations"] = ["mars-1\n# Budget: pass\n| x |"]
    md += cost_markdown(cost_of_plan(plan))
    assert _headings(md) == ["# Cost of stack `dev` (TPU chips only)"] * 2
    starts = [line for line in md.splitlines() if line.startswith("Budget:")]
    assert starts == ["Budget: none set (cost.budgetUsdPerHour)."] * 2
    assert "unpriced (no price for v5e spot in mars-1\\\\x0a\\# Budget: pass" in md
    assert "[click](" not in md and "\x1b" not in md


def test_a_hand_edited_plan_cannot_forge_a_heading_or_a_row_in_the_diff() -> None:
    base = _plan()
    new = _rename_pool(base, FORGED)
    new["violations"] = [{"rule": "r\n# forged", "urn": "u::x\n# urn", "message": FORGED}]
    md = render_markdown([diff_plans(base, new)], "main\n# base", "HEAD`|`")
    lines = md.splitlines()
    assert _headings(md) == [lines[0], "### stack `dev`"]
    assert lines[0] == "## tpuray plan: `main\\x0a# base` → `` HEAD`\\|` ``"
    assert "[click](" not in _outside_code(md)
    # every table row has the cell count of its header
    for line in lines:
        if line.startswith("| ") and "resource" not in line:
            cells = re.split(r"(?<!\\)\|", line)
            assert len(cells) in (6, 7, 9), line


def test_the_dashboard_svg_carries_no_control_character() -> None:
    board = json.loads((GOLDEN / "prod" / "dashboard.json").read_text())
    board["displayName"] = "board\x1b]0;title\x07"
    tiles = board["mosaicLayout"]["tiles"]
    tiles[0]["widget"]["title"] = "pool\x00\x1b[2J"
    svg = render_dashboard_svg(board)
    assert not _has_control(svg.replace("\n", ""))
    assert "\\x1b" in svg


def test_a_rate_source_with_a_newline_is_refused_naming_the_field(tmp_path: Any) -> None:
    text = (ROOT / "Pulumi.dev.yaml").read_text() + (
        "  tpuray:cost:\n    rates:\n      - {generation: v5e, capacity: spot, usdPerChipHour: 0.5, "
        'source: "contract\\nBudget: pass"}\n'
    )
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_stack_file(f)
    assert "cost.rates[0].source" in str(e.value) and "control character" in str(e.value)


def test_an_alert_that_excludes_every_pool_is_refused(tmp_path: Any) -> None:
    text = (
        (ROOT / "Pulumi.prod.yaml")
        .read_text()
        .replace(
            "    idleAlert:\n      window: 30m\n",
            "    idleAlert:\n      window: 30m\n      excludePools: [v5p-train, v6e-flex]\n",
        )
    )
    assert "excludePools" in text
    f = tmp_path / "Pulumi.prod.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_stack_file(f)
    assert "monitoring.idleAlert.excludePools" in str(e.value) and "watch nothing" in str(e.value)
    # one pool left watched is fine (its slice shape differs from the excluded one's)
    f.write_text(text.replace("excludePools: [v5p-train, v6e-flex]", "excludePools: [v6e-flex]"))
    load_stack_file(f)
