"""The layers of tpuray.components: the Pulumi program loads no review tooling, and the planners load no Pulumi."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(code: str) -> set[str]:
    """Module names loaded by a fresh interpreter after running ``code``."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, cwd=ROOT)
    return set(out.stdout.split())


def _program_imports() -> list[str]:
    """The tpuray modules that infra/__main__.py imports."""
    tree = ast.parse((ROOT / "infra" / "__main__.py").read_text())
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return [m for m in mods if m.startswith("tpuray.")]


def test_the_pulumi_program_loads_no_review_module() -> None:
    imports = _program_imports()
    assert "tpuray.components.stack" in imports  # the program still composes the stack
    loaded = _loaded_after("\n".join(f"import {m}" for m in imports))
    assert "tpuray.components.stack" in loaded
    assert not {m for m in loaded if m.startswith("tpuray.components.review")}
    assert not {m for m in loaded if m.startswith("tpuray.components.doctor")}


def test_the_doctor_loads_no_pulumi_and_imports_the_kubernetes_client_only_when_it_reads_live() -> None:
    loaded = _loaded_after("import tpuray.components.doctor, tpuray.components.doctor.commands")
    assert "tpuray.components.doctor.checks" in loaded
    assert not {m for m in loaded if m == "pulumi" or m.startswith(("pulumi.", "pulumi_"))}
    assert not {m for m in loaded if m == "kubernetes" or m.startswith("kubernetes.")}


def test_review_package_imports() -> None:
    loaded = _loaded_after("import tpuray.components.review, tpuray.components.review.commands")
    assert "tpuray.components.review.commands" in loaded


def _deploy_calls() -> tuple[set[str], set[str]]:
    """(names deploy() calls, names components/stack.py imports from tpuray modules)."""
    tree = ast.parse((ROOT / "components" / "stack.py").read_text())
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpuray.")
        for alias in node.names
    }
    deploy = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "deploy")
    called = {n.func.id for n in ast.walk(deploy) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return called, imported


def test_deploy_calls_no_planner_but_plan_stack() -> None:
    """deploy() instantiates components from the StackPlan: of tpuray's functions it calls plan_stack only (the
    classes it calls are the components and their Args, which take the plan's parts and add the links)."""
    called, imported = _deploy_calls()
    assert "plan_stack" in called
    assert {n for n in called & imported if not n[0].isupper()} == {"plan_stack"}
    local = {
        n.name for n in ast.parse((ROOT / "components" / "stack.py").read_text()).body if isinstance(n, ast.FunctionDef)
    }
    assert called & local <= {"_ray_token"}  # the one infra-side read: the Ray token secret, never in the plan


@pytest.mark.parametrize(
    "module",
    [
        "tpuray.components.catalog.topology",
        "tpuray.components.catalog.names",
        "tpuray.components.config",
        "tpuray.components.planning.node_pools",
        "tpuray.components.planning.kuberay",
        "tpuray.components.planning.stack_plan",
        "tpuray.components.planning.component_args",
        "tpuray.components.planning.network_policy",
        "tpuray.components.planning.pod_security",
        "tpuray.components.planning.ray_auth",
        "tpuray.components.catalog.images",
    ],
)
def test_facts_config_and_planners_load_no_pulumi(module: str) -> None:
    loaded = _loaded_after(f"import {module}")
    assert module in loaded
    assert not {m for m in loaded if m == "pulumi" or m.startswith(("pulumi.", "pulumi_"))}
    assert not {m for m in loaded if m.startswith("tpuray.components.review")}


# Problems of a stack are found and worded in one place: components/config/ (the command lines of
# workloads/ use its loaders, find_stack_file, validated_as and exclusive_sources).


def _builds_config_error(path: Path) -> bool:
    """``path`` calls ``ConfigError(...)`` (a construction or a ``raise``); a mere import or ``except`` is fine."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == "ConfigError":
                return True
    return False


def test_only_the_config_package_builds_a_config_error() -> None:
    sources = [
        p
        for folder in ("components", "workloads", "infra", "policy", "tools", "bench")
        for p in (ROOT / folder).rglob("*.py")
    ]
    builders = {p.relative_to(ROOT).as_posix() for p in sources if _builds_config_error(p)}
    outside = {b for b in builders if not b.startswith("components/config/")}
    assert outside == set(), outside
    assert (
        "components/config/errors.py" in builders or "components/config/loaders.py" in builders
    )  # the check sees calls


# A capacity type's behaviour is its class's traits (config/capacity.py); the planners ask the capacity
# object, never test its class.
PLANNERS = ("components/planning", "components/review", "components/pricing", "components/doctor")
PLANNER_FILES = ("components/tpu_slice_pool.py",)


def _capacity_class_names() -> set[str]:
    import tpuray.components.config.capacity as capacity

    return {
        name for name, obj in vars(capacity).items() if isinstance(obj, type) and issubclass(obj, capacity.CapacityType)
    }


def _isinstance_on(path: Path, names: set[str]) -> list[int]:
    """Lines of the ``isinstance(x, C)`` calls in ``path`` whose second argument names one of ``names`` (``C``,
    ``a.C``, ``C | D``, ``(C, D)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"):
            continue
        if len(node.args) == 2:
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            if named & names:
                found.append(node.lineno)
    return found


def test_no_planner_tests_the_class_of_a_capacity() -> None:
    names = _capacity_class_names()
    assert {"OnDemand", "Spot", "Reservation", "FlexStart", "Queued", "CapacityType"} <= names
    files = [p for folder in PLANNERS for p in (ROOT / folder).rglob("*.py")]
    files += [ROOT / f for f in PLANNER_FILES]
    assert len(files) > 20
    found = {p.relative_to(ROOT).as_posix(): lines for p in files if (lines := _isinstance_on(p, names))}
    assert found == {}


def test_the_capacity_isinstance_check_sees_a_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(c, x):\n    isinstance(x, int)\n    return isinstance(c.capacity, FlexStart | cap.Queued)\n"
        "def g(c):\n    return isinstance(c, (str, Spot))\n"
    )
    assert _isinstance_on(sample, _capacity_class_names()) == [3, 5]


# The folders by job (components/__init__.py): which tpuray folders each may import, read from every import
# statement of its modules, at any depth (a function-level import counts).
TPURAY_FOLDERS_ALLOWED = {
    "components/catalog": ("catalog",),
    "components/config": ("catalog", "config"),
    "components/planning": ("catalog", "config", "planning"),
    "workloads": ("catalog", "config"),
}
THIRD_PARTY_REFUSED = {
    "components/catalog": ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "pulumi_random", "pydantic"),
    "components/config": ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "pulumi_random"),
    "components/planning": ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "pulumi_random"),
    "workloads": ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "pulumi_random"),
}
ENTRY_POINTS = {"__init__.py", "cli.py", "stack.py", "stack_config.py"}


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "tpuray.components":  # from tpuray.components import catalog
                found |= {f"tpuray.components.{a.name}" for a in node.names}
    return found


def _folder_violations(folder: str) -> dict[str, list[str]]:
    allowed = tuple(f"tpuray.components.{f}" for f in TPURAY_FOLDERS_ALLOWED[folder])
    own = "tpuray.workloads" if folder == "workloads" else None
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = []
        for mod in sorted(_imported_modules(path)):
            top = mod.split(".")[0]
            if top in THIRD_PARTY_REFUSED[folder] or (
                mod.startswith("tpuray.")
                and not (
                    (own and (mod == own or mod.startswith(own + ".")))
                    or any(mod == a or mod.startswith(a + ".") for a in allowed)
                )
            ):
                bad.append(mod)
        if bad:
            out[path.relative_to(ROOT).as_posix()] = bad
    return out


@pytest.mark.parametrize("folder", sorted(TPURAY_FOLDERS_ALLOWED))
def test_each_folder_imports_only_the_folders_beneath_it(folder: str) -> None:
    assert len(list((ROOT / folder).rglob("*.py"))) >= 3
    assert _folder_violations(folder) == {}


def test_the_folder_rule_sees_a_forbidden_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "components" / "catalog").mkdir(parents=True)
    (tmp_path / "components" / "catalog" / "x.py").write_text(
        "def f():\n    from tpuray.components.config import StackConfig\n    import pydantic\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _folder_violations("components/catalog") == {
        "components/catalog/x.py": ["pydantic", "tpuray.components.config"]
    }


def _declares_a_component(path: Path) -> bool:
    """``path`` defines a class deriving from ``pulumi.ComponentResource``."""
    return any(
        isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Attribute) and b.attr == "ComponentResource" for b in node.bases)
        for node in ast.parse(path.read_text()).body
    )


def test_components_top_level_holds_only_the_components_and_the_entry_points() -> None:
    top = sorted((ROOT / "components").glob("*.py"))
    others = [p.name for p in top if p.name not in ENTRY_POINTS and not _declares_a_component(p)]
    assert others == []
    assert sum(_declares_a_component(p) for p in top) >= 5  # the check sees the components
