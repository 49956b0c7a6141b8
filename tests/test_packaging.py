"""The distribution: a built wheel installs `tpuray.components` and `tpuray.workloads`, typed, with no
top-level `components`/`workloads` package that would shadow a platform repo's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _not_source() -> list[str]:
    """What .gitignore keeps out of the repo (its plain name patterns), and .git: a build sees only the project's
    own files."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return [".git", *(ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith(("#", "!")))]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # setuptools writes build/ and *.egg-info into the tree it builds: a copy of its own keeps two builds (another
    # worker's, a developer's) from writing into one another's
    src = tmp_path_factory.mktemp("src") / "tpuray"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_not_source()))
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (whl,) = out.glob("tpuray-*.whl")
    return whl


@pytest.fixture(scope="module")
def target(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    t = tmp_path_factory.mktemp("target")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(t), str(wheel)], check=True
    )
    return t


def test_wheel_layout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "tpuray/components/topology.py" in names
    assert "tpuray/components/py.typed" in names
    assert "tpuray/workloads/py.typed" in names
    assert not [n for n in names if n.startswith(("components/", "workloads/", "infra/", "tests/"))]
    # every module of the two source folders ships (a subpackage missing from pyproject's list would not)
    for folder in ("components", "workloads"):
        for module in (ROOT / folder).rglob("*.py"):
            assert f"tpuray/{module.relative_to(ROOT).as_posix()}" in names, module.relative_to(ROOT)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tpuray = tpuray.components.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_imports_resolve_from_the_installed_wheel(target: Path, tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import tpuray.components.topology as t, tpuray.workloads
        print(t.__file__)
        print(t.TpuSlice.parse("v5p", "4x4x8").pod_type)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    assert Path(out[0]).is_relative_to(target)
    assert out[1] == "v5p-256"


def test_mypy_sees_the_wheels_types(target: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(
        "from tpuray.components.topology import TpuSlice\nchips: int = TpuSlice.parse('v6e', '4x4').chips\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text("from tpuray.components.topology import TpuSlice\nchips: str = TpuSlice.parse('v6e', '4x4').chips\n")
    env = {**os.environ, "MYPYPATH": str(target)}

    def mypy(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(path)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )

    assert mypy(good).returncode == 0, mypy(good).stdout
    result = mypy(bad)
    assert result.returncode == 1 and "Incompatible types in assignment" in result.stdout
