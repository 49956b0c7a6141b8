"""Plans of other git refs, for ``tpuray diff BASE NEW`` with refs instead of plan directories.

Each ref is checked out into a temporary ``git worktree`` and its program runs in a fresh subprocess whose
``tpuray.components`` are that ref's (a small link tree first on ``PYTHONPATH``), so the base branch is
rendered with the base branch's components. The runner is a copy of this checkout's
:mod:`~tpuray.components.review.engine`, which imports nothing of ``tpuray`` and so works against any ref.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tpuray.components.review import engine as plan_engine
from tpuray.components.review.render import plan_json
from tpuray.components.review.rule_types import Resource
from tpuray.components.review.rules import check_resources

__all__ = ["GitPlanError", "is_git_ref", "plan_of_ref"]

# Top-level folders installed as tpuray.<name> (pyproject's package-dir).
_PACKAGES = ("components", "workloads")


class GitPlanError(RuntimeError):
    pass


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise GitPlanError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def is_git_ref(root: Path, ref: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _link_tree(tree: Path, into: Path) -> Path:
    pkg = into / "tpuray"
    pkg.mkdir(parents=True)
    for name in _PACKAGES:
        if (tree / name).is_dir():
            (pkg / name).symlink_to(tree / name, target_is_directory=True)
    return into


def plan_of_ref(root: Path, ref: str, stack: str) -> dict[str, Any]:
    """The ``plan.json`` document of ``stack`` at ``ref``; no resources if the ref has no such stack or program."""
    with tempfile.TemporaryDirectory(prefix="tpuray-plan-") as tmp:
        work = Path(tmp) / "tree"
        _git(root, "worktree", "add", "--detach", "--quiet", str(work), ref)
        try:
            return _plan_in_tree(work, stack, Path(tmp))
        finally:
            _git(root, "worktree", "remove", "--force", str(work))


def _plan_in_tree(tree: Path, stack: str, tmp: Path) -> dict[str, Any]:
    stack_file = tree / f"Pulumi.{stack}.yaml"
    program = tree / "infra" / "__main__.py"
    project = plan_engine.project_name(tree, "tpuray")
    if not stack_file.is_file() or not program.is_file():
        return {"project": project, "stack": stack, "resources": [], "outputs": {}, "violations": []}
    runner = tmp / "plan_engine.py"
    shutil.copyfile(plan_engine.__file__, runner)
    path = _link_tree(tree, tmp / "pythonpath")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    done = subprocess.run(
        [
            sys.executable,
            str(runner),
            "--program",
            str(program),
            "--stack-file",
            str(stack_file),
            "--stack",
            stack,
            "--project",
            project,
            "--project-file",
            str(tree / "Pulumi.yaml"),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise GitPlanError(f"plan of stack {stack} failed:\n{done.stderr.strip()[-4000:]}")
    run: dict[str, Any] = json.loads(done.stdout)
    resources = [Resource(r["type"], r["name"], r["inputs"], r["urn"]) for r in run["resources"]]
    doc: dict[str, Any] = json.loads(plan_json(run, check_resources(resources)))
    return doc
