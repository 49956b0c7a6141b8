"""mypy follows only the provider SDK modules tpuray reaches (pyproject's overrides): a module the code reaches and
the overrides leave skipped would be typed ``Any``, and its calls would go unchecked without a word."""

from __future__ import annotations

import ast
import importlib
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SDKS = ("pulumi_gcp", "pulumi_kubernetes")
CODE = ("components", "infra", "policy", "tests", "bench", "tools")


def followed() -> list[str]:
    """The module patterns pyproject's mypy overrides follow normally."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    return [m for o in overrides if o.get("follow_imports") == "normal" for m in o["module"]]


def is_followed(module: str, patterns: list[str]) -> bool:
    """mypy's matching: ``a.b`` names one module, ``a.b.*`` it and every module under it."""
    return any(module == p or (p.endswith(".*") and (module + ".").startswith(p[:-1])) for p in patterns)


def reached() -> Iterator[tuple[str, str]]:
    """``(file, module)`` for every SDK module the code reaches: imported by name, or an attribute of an SDK package
    (``gcp.container``, or ``gcp.Provider``, which its package root re-exports from the module that defines it)."""
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "fixtures" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            aliases: dict[str, str] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.split(".")[0] in SDKS:
                            yield str(path), a.name
                            aliases[a.asname or a.name] = a.name
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in SDKS:
                    for a in node.names:
                        yield str(path), _owner(str(node.module), a.name)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                    yield str(path), _owner(aliases[node.value.id], node.attr)


def _owner(package: str, name: str) -> str:
    """The module that ``name`` of ``package`` is, or that defines it."""
    value = getattr(importlib.import_module(package), name)
    return value.__name__ if isinstance(value, ModuleType) else str(value.__module__)


def test_every_sdk_module_the_code_reaches_is_type_checked() -> None:
    patterns = followed()
    found = set(reached())
    assert {m.split(".")[0] for _, m in found} == set(SDKS)  # the scan sees the components' imports
    missing = sorted({m for _, m in found if not is_followed(m, patterns)})
    assert not missing, f"add to pyproject's follow_imports = normal override: {missing}"


def test_the_matching_is_mypys() -> None:
    patterns = ["pulumi_gcp", "pulumi_gcp.container.*"]
    assert is_followed("pulumi_gcp", patterns) and is_followed("pulumi_gcp.container", patterns)
    assert is_followed("pulumi_gcp.container.cluster", patterns)
    assert not is_followed("pulumi_gcp.containeranalysis", patterns)
    assert not is_followed("pulumi_gcp.sql", patterns)
