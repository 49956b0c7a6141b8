"""The CLI never destroys or lies: ``plan --out`` writes only where it may, ``diff`` fails when it compared nothing,
and no bad input ends in a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plan.conftest import ROOT
from tpuray.components.cli import main
from tpuray.components.review.plan import Plan, write_plan
from tpuray.components.review.plan_dir import MARKER, write_file


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return code, text


def plan_to(capsys: pytest.CaptureFixture[str], out: Path | str, stack: str = "dev") -> tuple[int, str]:
    return run(capsys, "plan", "--stack", stack, "--root", str(ROOT), "--out", str(out))


# ---- plan --out -------------------------------------------------------------------------------------------------
def test_a_foreign_directory_is_refused_and_untouched(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "mine.yaml").write_text("keep: me")
    code, text = plan_to(capsys, tmp_path)
    assert code == 2 and "did not write" in text
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "manifests" / "mine.yaml").read_text() == "keep: me"
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("where", ["/", "root", "root-parent", "home"])
def test_roots_are_refused(capsys: pytest.CaptureFixture[str], where: str) -> None:
    out = {"/": Path("/"), "root": ROOT, "root-parent": ROOT.parent, "home": Path.home()}[where]
    code, text = plan_to(capsys, out)
    assert code == 2 and "refusing" in text


def test_a_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "plan"
    f.write_text("not a directory")
    code, text = plan_to(capsys, f)
    assert code == 2 and "is a file" in text and f.read_text() == "not a directory"


def test_symlinks_are_never_followed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "out"
    link.symlink_to(elsewhere, target_is_directory=True)
    code, text = plan_to(capsys, link)
    assert code == 2 and "symlink" in text and not any(elsewhere.iterdir())
    # a plan directory whose manifests/ points elsewhere
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    (plan_dir / MARKER).write_text("")
    (plan_dir / "manifests").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "precious.yaml").write_text("x")
    code, text = plan_to(capsys, plan_dir)
    assert code == 2 and "symlink" in text and (elsewhere / "precious.yaml").exists()


@pytest.mark.parametrize("where", ["manifests/raycluster-ray-tpuray-dev.yaml", "plan.json", "notes/deep/link.md"])
def test_a_symlink_anywhere_in_a_plan_directory_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    plan_dir = tmp_path / "plan"
    (plan_dir / where).parent.mkdir(parents=True)
    (plan_dir / MARKER).write_text("")
    (plan_dir / where).symlink_to(precious)
    code, text = plan_to(capsys, plan_dir)
    assert code == 2 and f"{where} is a symlink" in text
    assert precious.read_text() == "keep" and (plan_dir / where).is_symlink()


def test_plan_files_are_never_written_through_a_link(tmp_path: Path) -> None:
    """Should a link appear after the directory was checked, the write itself refuses it."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    (tmp_path / "plan.json").symlink_to(precious)
    with pytest.raises(OSError):
        write_file(tmp_path / "plan.json", "{}")
    assert precious.read_text() == "keep"


def test_its_own_directory_is_replaced_file_by_file(plans: dict[str, Plan], tmp_path: Path) -> None:
    write_plan(plans["dev"], tmp_path, ROOT)
    assert (tmp_path / MARKER).is_file()
    (tmp_path / "notes.md").write_text("mine")  # not a plan file: survives the next plan
    (tmp_path / "manifests" / "stale.yaml").write_text("old: manifest")  # a manifest: replaced
    write_plan(plans["dev"], tmp_path, ROOT)
    assert (tmp_path / "notes.md").read_text() == "mine"
    assert not (tmp_path / "manifests" / "stale.yaml").exists()
    assert (tmp_path / "plan.json").is_file()


@pytest.mark.parametrize("stack", ["../escape", "a/b", "..", "", "x" * 101, "sp ace"])
def test_stack_names_that_are_not_pulumi_names(capsys: pytest.CaptureFixture[str], stack: str, tmp_path: Path) -> None:
    code, text = run(capsys, "plan", "--stack", stack, "--root", str(ROOT), "--out", str(tmp_path / "o"))
    assert code == 2 and "stack name" in text
    assert not (tmp_path / "o").exists()


# ---- diff ---------------------------------------------------------------------------------------------------------
def test_diff_of_empty_directories_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code, text = run(capsys, "diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 2 and "nothing to compare" in text and "No changes" not in text


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a tpuray plan"),
        ('{"resources": [1]}', "resources[0] is not an object"),
        (b"\xff\xfe", "UTF-8"),
        # the shapes tpuray diff reads, each wrong once: "not a plan", never an internal error
        ('{"resources": [{"urn": "x"}]}', "resources[0].type is not a string"),
        ('{"stack": 5, "resources": []}', "stack is not a string"),
        ('{"resources": [], "violations": 5}', "violations is not a list"),
        ('{"resources": [], "violations": [{"rule": 1}]}', "violations[0] lacks"),
        ('{"resources": [{"urn": "a", "type": "t", "name": "n", "inputs": 5}]}', "inputs is not an object"),
        (
            '{"resources": [{"urn": "a", "type": "t", "name": "n", "options": {"replaceOnChanges": 5}}]}',
            "replaceOnChanges",
        ),
        (
            '{"resources": [{"urn": "a", "type": "gcp:container/nodePool:NodePool", "name": "n", '
            '"inputs": {"nodeConfig": 3}}]}',
            "not a tpuray plan",
        ),
    ],
)
def test_diff_of_a_corrupt_plan_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | bytes, hint: str
) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "plan.json").write_text(json.dumps({"stack": "dev", "resources": []}))
    bad = tmp_path / "bad"
    bad.mkdir()
    if isinstance(content, bytes):
        (bad / "plan.json").write_bytes(content)
    else:
        (bad / "plan.json").write_text(content)
    code, text = run(capsys, "diff", str(good), str(bad))
    assert code == 2 and hint in text and "internal error" not in text


def test_diff_with_one_plan_json_missing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "plan.json").write_text(json.dumps({"stack": "dev", "resources": []}))
    (tmp_path / "b").mkdir()
    code, text = run(capsys, "diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 2 and "no such file" in text
    code, text = run(capsys, "diff", str(tmp_path / "a"), str(tmp_path / "nowhere"))
    assert code == 2 and "not a plan directory" in text


def test_diff_of_a_stack_at_neither_ref_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    code, text = run(capsys, "diff", "HEAD", "HEAD", "--root", str(ROOT), "--stack", "no-such-stack")
    assert code == 2 and "no stack file or program" in text


def test_diff_writes_its_out_file_or_says_why(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "plan.json").write_text(json.dumps({"stack": "dev", "resources": []}))
    code, text = run(capsys, "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "a"))
    assert code == 2 and "cannot write" in text


# ---- config declarations --write -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content", ["name: [unclosed\n", "- not\n- a project\n", "a: 1\na: 2\n", b"name: x\n\xff", "description: x\n"]
)
def test_declarations_write_on_a_bad_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | bytes
) -> None:
    f = tmp_path / "Pulumi.yaml"
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    before = f.read_bytes()
    code, text = run(capsys, "config", "declarations", "--write", str(f))
    assert code == 1 and "error" in text
    assert f.read_bytes() == before
    code, text = run(capsys, "config", "declarations", "--write", str(tmp_path / "missing.yaml"))
    assert code == 1


@pytest.mark.timeout(120)
def test_a_fifo_given_as_a_stack_file_is_refused_without_blocking(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "Pulumi.dev.yaml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    code, text = run(capsys, "config", "check", str(fifo))
    assert code == 1 and "not a regular file" in text
    code, text = run(
        capsys, "plan", "--stack", "dev", "--root", str(ROOT), "--stack-file", str(fifo), "--out", str(tmp_path / "o")
    )
    assert code == 1 and "not a regular file" in text and not (tmp_path / "o").exists()


def test_a_failing_program_is_one_error_line_without_asyncio_tracebacks(tmp_path: Path) -> None:
    """Outputs that depend on a failure hold its exception; asyncio printed each at exit ("Future exception was never
    retrieved") after the error was already reported. A subprocess: those lines come at interpreter exit."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "__main__.py").write_text(
        "import pulumi_gcp as gcp\n"
        "b = gcp.storage.Bucket('b', location='US')\n"
        "c = gcp.storage.Bucket('c', location=b.name.apply(lambda n: 1 / 0))\n"
        "d = gcp.storage.Bucket('d', location=c.name)\n"
    )
    argv = [sys.executable, "-m", "tpuray.components.cli", "plan", "--stack", "dev", "--root", str(tmp_path)]
    done = subprocess.run([*argv, "--out", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'infra' / '__main__.py'} failed under the mock engine: ZeroDivisionError: division by zero"
    ]


def test_config_check_of_a_directory_or_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for target in (tmp_path, tmp_path / "missing.yaml"):
        code, text = run(capsys, "config", "check", str(target))
        assert code == 1 and "(file)" in text


def test_a_symlinked_parent_folder_is_the_users_path(plans: dict[str, Plan], tmp_path: Path) -> None:
    """Only the plan directory and its own files must not be links; the folders above may be (/tmp on macOS)."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real, target_is_directory=True)
    write_plan(plans["dev"], tmp_path / "via" / "plan", ROOT)
    assert (real / "plan" / "plan.json").is_file()
