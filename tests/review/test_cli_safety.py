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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.plans import ROOT
from tpuray.components.cli import main
from tpuray.components.review.plan import Plan, write_plan
from tpuray.components.review.plan_dir import MARKER, PlanOutError, write_new_file, write_plan_files


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
    """Should a link appear after the directory was checked, the write replaces the link itself."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    (tmp_path / "plan.json").symlink_to(precious)
    write_new_file(tmp_path / "plan.json", "{}")
    assert precious.read_text() == "keep"
    assert not (tmp_path / "plan.json").is_symlink() and (tmp_path / "plan.json").read_text() == "{}"


def _tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_its_own_directory_is_replaced_file_by_file(plans: dict[str, Plan], tmp_path: Path) -> None:
    assert write_plan(plans["prod"], tmp_path, ROOT) == []
    assert json.loads((tmp_path / MARKER).read_text())["files"]["dashboard.json"]  # listed with its SHA-256
    (tmp_path / "notes.md").write_text("mine")  # not a plan file: survives the next plan
    (tmp_path / "manifests" / "mine.yaml").write_text("keep: me")  # the user's own manifest: kept, and named
    # dev declares no dashboard and fewer manifests: prod's own files go, the user's stay
    kept = write_plan(plans["dev"], tmp_path, ROOT)
    assert kept == ["manifests/mine.yaml", "notes.md"]
    assert (tmp_path / "notes.md").read_text() == "mine"
    assert (tmp_path / "manifests" / "mine.yaml").read_text() == "keep: me"
    assert not (tmp_path / "dashboard.json").exists() and (tmp_path / "plan.json").is_file()
    listed = json.loads((tmp_path / MARKER).read_text())
    assert set(listed["files"]) == set(_tree(tmp_path)) - {MARKER, "notes.md", "manifests/mine.yaml"}
    assert "pending" not in listed


def test_a_users_manifest_is_kept_and_named_by_the_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert plan_to(capsys, tmp_path)[0] == 0
    (tmp_path / "manifests" / "mine.yaml").write_text("keep: me")
    code, text = plan_to(capsys, tmp_path)
    assert code == 0 and "kept 1 file(s)" in text and "manifests/mine.yaml" in text
    assert (tmp_path / "manifests" / "mine.yaml").read_text() == "keep: me"


def test_a_hard_linked_copy_keeps_its_bytes(plans: dict[str, Plan], tmp_path: Path) -> None:
    """``cp -al plan backup``: every file of the backup is the same inode; a later plan must not write into them."""
    plan_dir, backup = tmp_path / "plan", tmp_path / "backup"
    write_plan(plans["prod"], plan_dir, ROOT)
    for f in sorted(plan_dir.rglob("*")):
        if f.is_file():
            (backup / f.relative_to(plan_dir)).parent.mkdir(parents=True, exist_ok=True)
            os.link(f, backup / f.relative_to(plan_dir))
    before = _tree(backup)
    write_plan(plans["prod-dws"], plan_dir, ROOT)
    assert _tree(backup) == before
    assert _tree(plan_dir)["plan.json"] != before["plan.json"]


@pytest.mark.parametrize("edited", ["plan.json", "dashboard.json", "manifests/raycluster-ray-tpuray-dev.yaml"])
def test_a_plan_file_changed_since_stops_the_plan(
    capsys: pytest.CaptureFixture[str], plans: dict[str, Plan], tmp_path: Path, edited: str
) -> None:
    """A listed file the user edited is neither overwritten (plan.json) nor removed (prod's dashboard.json, which a
    dev plan does not write): the plan stops before writing anything, naming it."""
    write_plan(plans["prod" if edited == "dashboard.json" else "dev"], tmp_path, ROOT)
    (tmp_path / edited).write_text("my edit")
    before = _tree(tmp_path)
    code, text = plan_to(capsys, tmp_path)
    assert code == 2 and f"{edited} changed since tpuray plan wrote it" in text
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("where", ["topology.md", "manifests"])
def test_a_file_of_the_users_where_the_plan_writes_one_stops_it(
    plans: dict[str, Plan], tmp_path: Path, where: str
) -> None:
    write_plan(plans["dev"], tmp_path, ROOT)
    listed = json.loads((tmp_path / MARKER).read_text())
    target = tmp_path / where
    if target.is_dir():
        shutil.rmtree(target)
        listed["files"] = {k: v for k, v in listed["files"].items() if not k.startswith("manifests/")}
    else:
        del listed["files"][where]
    (tmp_path / MARKER).write_text(json.dumps(listed))
    target.write_text("mine")  # not listed, where the plan writes a file (or a folder of files)
    before = _tree(tmp_path)
    with pytest.raises(PlanOutError, match=f"{where} is (not a file tpuray plan wrote|a file, and this plan)"):
        write_plan(plans["dev"], tmp_path, ROOT)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("marker", "said"),
    [
        ("written by tpuray plan; a later plan replaces this directory's plan files\n", "earlier tpuray version"),
        ("", "not JSON"),
        ("[]", "format is not 'tpuray-plan-marker/1'"),
        ('{"format": "tpuray-plan-marker/1", "files": []}', "files is not an object"),
        ('{"format": "tpuray-plan-marker/1", "files": {"../outside.txt": "' + "0" * 64 + '"}}', "not a relative path"),
        ('{"format": "tpuray-plan-marker/1", "files": {"/etc/passwd": "' + "0" * 64 + '"}}', "not a relative path"),
        ('{"format": "tpuray-plan-marker/1", "files": {"a//b": "' + "0" * 64 + '"}}', "not a relative path"),
        ('{"format": "tpuray-plan-marker/1", "files": {"plan.json": "x"}}', "is not a SHA-256"),
        ('{"format": "tpuray-plan-marker/1", "files": {".tpuray-plan": "' + "0" * 64 + '"}}', "the marker itself"),
    ],
)
def test_a_malformed_marker_is_an_error_not_a_wipe(
    capsys: pytest.CaptureFixture[str], plans: dict[str, Plan], tmp_path: Path, marker: str, said: str
) -> None:
    plan_dir = tmp_path / "plan"
    write_plan(plans["dev"], plan_dir, ROOT)
    (plan_dir / MARKER).write_text(marker)
    (tmp_path / "outside.txt").write_text("keep")
    before = _tree(tmp_path)
    code, text = plan_to(capsys, plan_dir)
    assert code == 2 and said in text and "plan again" in text
    assert _tree(tmp_path) == before


_NAMES = st.sampled_from(["plan.json", "cost.md", "manifests/a.yaml", "manifests/b.yaml", "x/y/z.md"])
_PLANS = st.dictionaries(_NAMES, st.text(max_size=8), max_size=5)
_ACTIONS = st.lists(
    st.tuples(st.sampled_from(["add", "edit", "delete", "link"]), _NAMES, st.text(max_size=8)), max_size=4
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_PLANS, actions=_ACTIONS, second=_PLANS)
def test_a_plan_never_changes_what_it_did_not_write(
    tmp_path_factory: pytest.TempPathFactory,
    first: dict[str, str],
    actions: list[tuple[str, str, str]],
    second: dict[str, str],
) -> None:
    """Whatever the user did between two plans, the second one either stops with every byte as it was, or writes
    its files while every file it did not write (and every hard link of one it did) keeps its bytes."""
    tmp = tmp_path_factory.mktemp("p")
    out, backup = tmp / "plan", tmp / "backup"
    write_plan_files(out, first)
    for action, rel, text in actions:
        target = out / rel
        if action == "delete" and target.is_file():
            target.unlink()
        elif action == "edit" and target.is_file():
            target.write_text(target.read_text() + "!" + text)
        elif action == "add" and not target.exists() and not any((out / p).is_file() for p in Path(rel).parents):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("user " + text)
        elif action == "link" and target.is_file():
            (backup / rel).parent.mkdir(parents=True, exist_ok=True)
            if not (backup / rel).exists():
                os.link(target, backup / rel)
    listed = json.loads((out / MARKER).read_text())["files"]
    before, backed_up = _tree(out), _tree(backup) if backup.exists() else {}
    theirs = {rel for rel, data in before.items() if rel != MARKER and rel not in listed}
    try:
        kept = write_plan_files(out, second)
    except PlanOutError:
        assert _tree(out) == before
        return
    after = _tree(out)
    assert {rel: after[rel].decode() for rel in second} == second
    assert all(after.get(rel) == before[rel] for rel in theirs)  # every file it did not write, unchanged
    assert sorted(theirs) == kept
    assert set(after) == {MARKER, *second, *theirs}  # its earlier files the new plan does not write are gone
    assert (_tree(backup) if backup.exists() else {}) == backed_up


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
