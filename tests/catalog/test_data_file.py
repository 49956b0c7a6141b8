"""The one bounded reader of the JSON files tpuray is given (:mod:`tpuray.components.catalog.data_file`) and the
commands that read through it: every refusal is one DataFileError naming the file, never a RecursionError, a
MemoryError, a TypeError or a read that never ends."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.data_file import MAX_DEPTH, DataFileError, loads_json, read_json_file
from tpuray.components.cli import main
from tpuray.components.config.stack_yaml import YamlError, read_yaml_file


def _refusal(path: Path) -> str:
    with pytest.raises(DataFileError) as err:
        read_json_file(path, what="test file")
    message = str(err.value)
    assert message.startswith(f"test file {path}: ") and "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),  # past Python's recursion limit
        ('{"a": ' * 5000 + "1" + "}" * 5000, f"nested deeper than {MAX_DEPTH} levels"),
        ('{"steps": 1, "steps": 2}', "duplicate key 'steps'"),
        ('[{"x": {"a": 1, "b": 2, "a": 3}}]', "duplicate key 'a'"),
        ("[NaN]", "NaN is not JSON"),
        ('{"n": -Infinity}', "-Infinity is not JSON"),
        ("[1e400]", "1e400 does not fit a double"),
        ("[" + "9" * 400 + "]", "an integer of 400 digits"),
        ("[" + "9" * 5000 + "]", "an integer of 5000 digits"),  # CPython's own int() limit is 4300 digits
        ("{not json", "not JSON (line 1, column 2"),
        ("", "not JSON (line 1, column 1"),
    ],
)
def test_json_that_is_refused(tmp_path: Path, text: str, complaint: str) -> None:
    f = tmp_path / "doc.json"
    f.write_text(text)
    assert complaint in _refusal(f)


def test_what_is_accepted_reads_as_json_loads_reads_it(tmp_path: Path) -> None:
    doc = {"a": [1, -2, 3.5, None, True, "ü\u0000"], "b": {"c": [[[]]]}, "big": 18446744073709551615}
    f = tmp_path / "ok.json"
    f.write_text(json.dumps(doc))
    assert read_json_file(f, what="test file") == doc
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_json(deep, what="x") == json.loads(deep)


@pytest.mark.parametrize("kind", ["dev-zero-link", "fifo", "directory", "missing", "utf16", "latin1", "too-big"])
def test_files_that_are_not_data(tmp_path: Path, kind: str) -> None:
    f = tmp_path / "doc.json"
    if kind == "dev-zero-link":
        f.symlink_to("/dev/zero")  # a read of it never ends
    elif kind == "fifo":
        os.mkfifo(f)  # an open of it waits for a writer
    elif kind == "directory":
        f.mkdir()
    elif kind == "utf16":
        f.write_text('{"a": 1}', encoding="utf-16")  # PowerShell's > writes this
    elif kind == "latin1":
        f.write_bytes(b'{"a": "\xe9"}')
    elif kind == "too-big":
        f.write_text("[" + "0," * 600 + "0]")
    if kind == "too-big":
        with pytest.raises(DataFileError, match="larger than 1 KiB"):
            read_json_file(f, what="test file", max_bytes=1024)
        return
    complaint = {
        "dev-zero-link": "not a regular file",
        "fifo": "not a regular file",
        "directory": "a directory",
        "missing": "no such file",
        "utf16": "UTF-16",
        "latin1": "not valid UTF-8 at byte 7 (line 1)",
    }[kind]
    assert complaint in _refusal(f)


def test_yaml_files_are_opened_by_the_same_reader(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.dev.yaml"
    f.symlink_to("/dev/zero")
    with pytest.raises(YamlError, match="not a regular file") as err:
        read_yaml_file(f, what="stack file")
    assert isinstance(err.value, DataFileError) and f"stack file {f}" in str(err.value)


# ---- the commands that read JSON --------------------------------------------------------------------------------
def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "internal error" not in out + err and "Traceback" not in out + err
    return code, out + err


@pytest.mark.parametrize("content", ["[" * 3000 + "]" * 3000, '{"resources": [], "resources": []}', "LINK"])
def test_diff_of_a_hostile_plan_json_names_it(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "plan.json").write_text(json.dumps({"stack": "dev", "resources": []}))
    if content == "LINK":
        (bad / "plan.json").symlink_to("/dev/zero")
    else:
        (bad / "plan.json").write_text(content)
    code, text = _run(capsys, "diff", str(good), str(bad))
    assert code == 2 and str(bad / "plan.json") in text


def test_cost_json_through_the_reader(tmp_path: Path) -> None:
    from tpuray.components.catalog.throughput import CostFileError, slice_usd_per_hour

    f = tmp_path / "cost.json"
    f.write_text('{"pools": [], "pools": [{"pool": "a"}]}')
    with pytest.raises(CostFileError, match=f"--cost-json {f}: duplicate key 'pools'"):
        slice_usd_per_hour(f, None, 1)


def test_workload_json_with_a_duplicate_key_is_refused() -> None:
    from tpuray.workloads.gpt.cli import build_parser
    from tpuray.workloads.gpt.cli import settings as train_settings

    args = build_parser().parse_args(["--workload", '{"steps": 5, "steps": 6}'])
    with pytest.raises(DataFileError, match="--workload: duplicate key 'steps'"):
        train_settings(args)


# ---- the hypothesis corpus: any JSON, any nesting, any duplicate ------------------------------------------------
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=30,
)


def _nest(value: Any, depth: int) -> str:
    text = json.dumps(value)
    return "[" * depth + text + "]" * depth


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES, depth=st.integers(0, 3 * MAX_DEPTH), dup=st.booleans(), key=st.text(max_size=4))
def test_every_document_is_read_exactly_or_refused_with_the_rule(value: Any, depth: int, dup: bool, key: str) -> None:
    """Duplicates and depth are the two structural rules: a document breaking one is refused naming it, and
    every other document reads back as json.loads reads it."""
    text = _nest(value, depth)
    if dup:
        text = "{" + f"{json.dumps(key)}: 1, {json.dumps(key)}: " + text + "}"
    expected: Any = json.loads(text)
    real_depth = _depth(expected)
    try:
        got = loads_json(text, what="--x")
    except DataFileError as e:
        assert str(e).startswith("--x: ")
        assert (dup and "duplicate key" in str(e)) or (real_depth > MAX_DEPTH and "nested deeper" in str(e))
        return
    assert not dup and real_depth <= MAX_DEPTH and got == expected


def _depth(value: Any) -> int:
    best, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            best = max(best, d + 1)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return best
