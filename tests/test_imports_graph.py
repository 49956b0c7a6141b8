"""Which module of tpuray.components and tpuray.workloads may import which: the import contracts of pyproject.toml
hold, no module imports another's private (``_``-prefixed) name or a name its ``__all__`` leaves out, and no import
cycle joins two modules."""

from __future__ import annotations

import ast
import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "components", ROOT / "workloads")
ALLOWED_PRIVATE_MODULES = frozenset({"_ray_compat"})
"""Modules whose name starts with ``_`` and that other modules may import whole (``from tpuray.workloads import
_ray_compat``): Ray's private API behind one module."""


def test_the_import_contracts_hold() -> None:
    out = io.StringIO()
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)  # lint-imports reads pyproject.toml where it runs
        with contextlib.redirect_stdout(out):
            status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        os.chdir(cwd)
    assert status == EXIT_STATUS_SUCCESS, out.getvalue()


def _private_imports(path: Path) -> Iterator[str]:
    """``module.name`` for each ``_``-prefixed name ``path`` imports from a tpuray module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            yield f"a relative import at line {node.lineno}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpuray"):
            for alias in node.names:
                if alias.name.startswith("_") and alias.name not in ALLOWED_PRIVATE_MODULES:
                    yield f"{node.module}.{alias.name} (line {node.lineno})"
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tpuray" and any(p.startswith("_") and p not in ALLOWED_PRIVATE_MODULES for p in parts):
                    yield f"{alias.name} (line {node.lineno})"


def test_no_module_imports_a_private_name() -> None:
    paths = sorted(p for source in SOURCES for p in source.rglob("*.py"))
    found = [f"{p.relative_to(ROOT)}: {i}" for p in paths for i in _private_imports(p)]
    assert not found, "a private name is its module's own; make it public where another module needs it:\n" + (
        "\n".join(found)
    )


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from tpuray.components.catalog.names import POOL_LABEL, _hidden\nfrom tpuray.workloads import _ray_compat\n"
    )
    assert list(_private_imports(module)) == ["tpuray.components.catalog.names._hidden (line 1)"]


def _source_of(module: str, root: Path = ROOT) -> Path | None:
    """The file of a ``tpuray.components`` or ``tpuray.workloads`` module (a package's ``__init__.py``)."""
    parts = module.split(".")[1:]
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if parts and path.is_file():
            return path
    return None


def _exported(path: Path) -> set[str] | None:
    """The names of ``path``'s ``__all__``, if it declares one."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in getattr(node.value, "elts", ())}
    return None


def _unexported_imports(path: Path, root: Path = ROOT) -> Iterator[str]:
    """``module.name`` for each name ``path`` imports from a tpuray module whose ``__all__`` leaves it out (a
    submodule of a package aside)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("tpuray."):
            continue
        source = _source_of(node.module or "", root)
        exported = _exported(source) if source else None
        for alias in node.names:
            if exported is None or alias.name in exported or _source_of(f"{node.module}.{alias.name}", root):
                continue
            yield f"{node.module}.{alias.name} (line {node.lineno})"


def test_every_imported_name_is_in_its_modules_all() -> None:
    """``__all__`` is a module's public face: what another module needs from it is on it."""
    paths = sorted(p for source in SOURCES for p in source.rglob("*.py"))
    found = [f"{p.relative_to(ROOT)}: {i}" for p in paths for i in _unexported_imports(p)]
    assert not found, "add these names to their module's __all__:\n" + "\n".join(found)


def test_the_all_check_sees_one(tmp_path: Path) -> None:
    (tmp_path / "components" / "wing").mkdir(parents=True)
    (tmp_path / "components" / "wing" / "__init__.py").write_text('__all__ = ["shown"]\n')
    (tmp_path / "components" / "wing" / "part.py").write_text('__all__ = ["shown"]\nshown = hidden = 1\n')
    (tmp_path / "components" / "loose.py").write_text("hidden = 1\n")  # no __all__: nothing to check
    module = tmp_path / "m.py"
    module.write_text(
        "from tpuray.components.wing.part import hidden, shown\n"
        "from tpuray.components.wing import part\n"
        "from tpuray.components.loose import hidden\n"
    )
    assert list(_unexported_imports(module, tmp_path)) == ["tpuray.components.wing.part.hidden (line 1)"]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.parametrize("package", ["tpuray.components", "tpuray.workloads"])
def test_no_import_cycle(package: str) -> None:
    """Imports inside functions count: a cycle closed by a lazy import is still one a reader has to follow."""
    graph = grimp.build_graph("tpuray")
    modules = {m for m in graph.modules if m.startswith(package)}
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules}
    assert not _cycles(edges)


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
