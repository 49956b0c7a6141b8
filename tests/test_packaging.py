"""The distribution: a built wheel installs `tpuray.components` and `tpuray.workloads`, typed, with no
top-level `components`/`workloads` package that would shadow a platform repo's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

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


@pytest.mark.slow  # builds the wheel (python -m build) and installs it in fresh processes
@pytest.mark.beside_clusters
def test_wheel_layout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "tpuray/components/catalog/topology.py" in names
    assert "tpuray/components/py.typed" in names
    assert "tpuray/workloads/py.typed" in names
    assert not [n for n in names if n.startswith(("components/", "workloads/", "infra/", "tests/"))]
    # every module of the two source folders ships (a subpackage missing from pyproject's list would not)
    for folder in ("components", "workloads"):
        for module in (ROOT / folder).rglob("*.py"):
            assert f"tpuray/{module.relative_to(ROOT).as_posix()}" in names, module.relative_to(ROOT)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tpuray = tpuray.components.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.slow  # builds the wheel (python -m build) and installs it in fresh processes
@pytest.mark.beside_clusters
def test_imports_resolve_from_the_installed_wheel(target: Path, tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import tpuray.components.catalog.topology as t, tpuray.workloads
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


@pytest.mark.slow  # builds the wheel (python -m build) and installs it in fresh processes
@pytest.mark.beside_clusters
def test_mypy_sees_the_wheels_types(target: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(
        "from tpuray.components.catalog.topology import TpuSlice\nchips: int = TpuSlice.parse('v6e', '4x4').chips\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from tpuray.components.catalog.topology import TpuSlice\nchips: str = TpuSlice.parse('v6e', '4x4').chips\n"
    )
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


def _torch_of(extra: str) -> SpecifierSet:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [r for r in map(Requirement, project["optional-dependencies"][extra]) if r.name == "torch"]
    return torch.specifier


def _shared_versions(a: SpecifierSet, b: SpecifierSet) -> list[Version]:
    """Versions both sets admit, among every version either names (``==2.9.*`` naming 2.9) and every X.Y.Z up to one
    past the highest component either names: a witness of any overlap two torch ranges of this form can have."""
    named = [Version(s.version.removesuffix(".*")) for s in (*a, *b)]
    top = [max(v.release[i] if len(v.release) > i else 0 for v in named) + 2 for i in range(3)]
    grid = [Version(f"{x}.{y}.{z}") for x in range(top[0]) for y in range(top[1]) for z in range(top[2])]
    return sorted({v for v in (*named, *grid) if a.contains(v) and b.contains(v)})


@pytest.mark.parametrize(
    ("xla", "tpu", "shared"),
    [
        ("==2.9.0", ">=2.11,<=2.15", []),
        ("==2.9.0", ">=2.9,<=2.15", ["2.9.0"]),
        ("==2.9.*", ">=2.9.1", ["2.9.1"]),
        ("~=2.9", ">=2.11,<=2.15", ["2.11.0"]),
        (">=2.9,<2.12", ">2.11.2", ["2.11.3"]),
    ],
)
def test_shared_versions_finds_an_overlap_where_there_is_one(xla: str, tpu: str, shared: list[str]) -> None:
    assert _shared_versions(SpecifierSet(xla), SpecifierSet(tpu))[:1] == [Version(v) for v in shared]


def test_the_torch_xla_and_torch_tpu_extras_admit_no_common_torch() -> None:
    """torch_xla 2.9 loads only with torch 2.9 and torch_tpu 0.2 needs 2.11 to 2.15: pip must refuse an
    environment with both extras (`pip install '.[workload,torch-tpu]'` ends in ResolutionImpossible), rather than
    one of them loosened into a range where both install and one fails at import."""
    xla, tpu = _torch_of("workload"), _torch_of("torch-tpu")
    assert _shared_versions(xla, tpu) == [], f"the workload extra's torch{xla} and torch-tpu's torch{tpu} overlap"


@pytest.mark.parametrize("module", ["torch", "torch_xla", "ray.train"])
def test_what_every_ray_worker_imports_is_byte_compiled(module: str) -> None:
    """Every emulated chip's worker process imports these; with ``PYTHONDONTWRITEBYTECODE`` set (as on some CI
    machines) and an install that skipped byte-compiling, each worker compiles them from source again (import
    torch_xla and ray.train took 22 to 32 s that way, 8 s from the install's ``.pyc`` files)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None:
        pytest.skip(f"{module} is not installed (the workload extra)")
    assert spec.origin is not None
    cached = importlib.util.cache_from_source(spec.origin)
    assert os.path.exists(cached), f"{cached} is missing: install with pip's default byte-compiling (no --no-compile)"
