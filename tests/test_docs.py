"""The docs stay true to the code: generated references match what the code gives, links resolve, the README
stays short and links every guide, and every measured figure a guide points at is in docs/figures.json."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _load(path: Path) -> ModuleType:
    """A script of tools/ or bench/ (folders that are not packages), imported by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


gen_docs = _load(ROOT / "tools" / "gen_docs.py")


# ---- generated references -------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", sorted(gen_docs.PAGES))
def test_generated_reference_matches_the_code(page: str) -> None:
    committed = DOCS / "reference" / page
    assert committed.is_file(), f"docs/reference/{page} is missing: run `{gen_docs.REGENERATE}`"
    assert committed.read_text() == gen_docs.PAGES[page](), (
        f"docs/reference/{page} differs from what the code gives: run `{gen_docs.REGENERATE}` and commit the page"
    )


def _leaf_keys(value: Any, key: str = "") -> set[str]:
    """The keys of a stack dumped by alias, as the reference writes them: ``a.b``, ``list[].c``, and a capacity's
    keys under its type (``capacity{type: spot}``)."""
    if isinstance(value, dict):
        tag = f"{{type: {value['type']}}}" if key.endswith("capacity") else ""
        prefix = f"{key}{tag}." if key else ""
        return {k for name, v in value.items() if not (tag and name == "type") for k in _leaf_keys(v, prefix + name)}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return {k for v in value for k in _leaf_keys(v, key + "[]")}
    return {key}


def test_config_reference_has_a_row_for_every_key_the_config_accepts() -> None:
    """Every key of each shipped stack, every default filled in (``model_dump`` by alias), has its row."""
    rows = {k.key for k in gen_docs.config_keys()}
    for stack in gen_docs.SHIPPED_STACKS:
        dumped = gen_docs._shipped_config(stack).model_dump(mode="json", by_alias=True)
        missing = _leaf_keys(dumped) - rows
        assert not missing, f"no row for {sorted(missing)} in docs/reference/config.md"


def test_doctor_reference_lists_every_check_id() -> None:
    """The page names each check id the doctor gives on the shipped stacks (a pool's ids as ``<pool>``)."""
    from tpuray.components.doctor import ClusterObjects, run_checks

    page = (DOCS / "reference" / "doctor-checks.md").read_text()
    empty = ClusterObjects((), (), (), (), (), "v0.0.0", "test")
    for stack in gen_docs.SHIPPED_STACKS:
        cfg = gen_docs._shipped_config(stack)
        for result in run_checks(cfg, empty):
            shown = result.id
            for pool in cfg.slice_pools:
                if shown.endswith("." + pool.name):
                    shown = shown.removesuffix(pool.name) + "<pool>"
            assert f"`{shown}`" in page, f"docs/reference/doctor-checks.md lacks {shown}"


# ---- links -----------------------------------------------------------------------------------------------------
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)}


def _prose(text: str) -> str:
    """The text without code blocks and code spans (a regex there is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"(`+).+?\1", "", text)


def _local_links(page: Path) -> list[tuple[str, Path, str]]:
    """(link as written, the file it names, its anchor) for each relative link of a Markdown page."""
    out = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target) or not target:
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        out.append((target, path, anchor))
    return out


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target, path, anchor in _local_links(page):
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_readme_is_short_and_links_every_guide() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the guides belong in docs/"
    linked = {path for _, path, _ in _local_links(README)}
    guides = {p.resolve() for p in DOCS.glob("*.md")}
    unlinked = sorted(p.name for p in guides - linked)
    assert not unlinked, f"README.md links no docs/{unlinked}"
    for name in sorted(gen_docs.PAGES):
        assert (DOCS / "reference" / name).resolve() in linked, f"README.md does not link docs/reference/{name}"


# ---- measured figures ------------------------------------------------------------------------------------------
FIGURES = DOCS / "figures.json"
_POINTER = re.compile(r"`([a-z0-9_]+)` in \[?figures\.json")


def test_every_figure_a_page_points_at_is_recorded_with_its_date_and_machine() -> None:
    figures = json.loads(FIGURES.read_text())
    pointed = {
        name: page.relative_to(ROOT).as_posix()
        for page in _pages()
        for name in _POINTER.findall(" ".join(page.read_text().split()))
    }
    assert pointed, "no page points at docs/figures.json"
    missing = {name: page for name, page in pointed.items() if name not in figures}
    assert not missing, f"pages point at figures.json entries that do not exist: {missing}"
    for name, entry in figures.items():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), name
        assert entry["machine"].get("cpus"), f"{name}: no machine description"
        assert entry["result"], name


def test_every_bench_records_under_an_entry_of_the_figures_file() -> None:
    figures = json.loads(FIGURES.read_text())
    names = {
        name
        for script in sorted((ROOT / "bench").glob("*.py"))
        for name in re.findall(r'emit\(\s*"([a-z0-9_]+)"', script.read_text())
    }
    assert names >= {"plan_bench", "drain_signal_cost", "train_overhead", "train_overhead_portable"}
    assert names <= set(figures), f"benches record entries figures.json lacks: {sorted(names - set(figures))}"


def test_record_replaces_one_entry_with_the_date_command_and_machine(tmp_path: Path) -> None:
    figures_mod = _load(ROOT / "bench" / "figures.py")
    path = tmp_path / "figures.json"
    path.write_text(json.dumps({"other": {"date": "2026-01-01", "result": {"x": 1}}}))
    figures_mod.record("plan_bench", {"plan_prod_s": 1.5}, path, ["bench/plan_bench.py", "--repeat", "5"])
    figures_mod.record("plan_bench", {"plan_prod_s": 1.7}, path, ["bench/plan_bench.py", "--record"])
    got = json.loads(path.read_text())
    assert got["other"] == {"date": "2026-01-01", "result": {"x": 1}}
    entry = got["plan_bench"]
    assert entry["result"] == {"plan_prod_s": 1.7}
    assert entry["command"] == "python bench/plan_bench.py --record"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"])
    assert entry["machine"]["cpus"] >= 1 and len(entry["machine"]["load_average_at_start"]) == 3


def _main_install(text: str) -> str:
    """The pip install of the main venv: its extras and flags, as written in ``text``."""
    m = re.search(r"\.venv/bin/(?:python -m )?pip install (?:-q )?(-e '\.\[workload[^']*\]'[^&\n]*)", text)
    assert m, "no install of the main venv"
    return m.group(1).strip()


def test_the_readme_installs_as_ci_does() -> None:
    """A fresh clone's command 1 and CI install the same extras in the same editable mode: the default editable
    mode maps the two packages through an import hook that import-linter's graph (grimp) does not follow, so a
    newcomer's command 2 would fail the import contracts that CI passes."""
    ci = _main_install((ROOT / ".ci" / "run").read_text())
    assert "editable_mode=strict" in ci
    assert _main_install(README.read_text()) == ci


def test_the_architecture_page_follows_one_slice_pool_through_at_most_eight_files_that_exist() -> None:
    section = ARCHITECTURE.read_text().split("## Following one slice pool", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. (?:\[)?`([^`]+)`", section, flags=re.M)
    assert 2 <= len(steps) <= 8, steps
    files = [s for s in steps if not s.startswith("Pulumi.")]
    assert all((ROOT / f).is_file() for f in files), files
    # the chain reaches the node pool, the worker group and the Kueue flavor
    assert {"components/tpu_slice_pool.py", "components/planning/kuberay.py", "components/planning/kueue.py"} <= set(
        files
    )


def _map_of(page: Path) -> str:
    """The module map of ``page``: its fenced blocks."""
    return "\n".join(re.findall(r"```\n(.*?)```", page.read_text(), flags=re.S))


def test_the_architecture_map_names_every_module_and_only_modules_that_exist() -> None:
    page = ROOT / "docs" / "architecture.md"
    text = _map_of(page)
    modules = sorted(
        p for folder in ("components", "workloads") for p in (ROOT / folder).rglob("*.py") if p.name != "__init__.py"
    )
    assert modules
    unnamed = [str(p.relative_to(ROOT)) for p in modules if not re.search(rf"(?<![\w/]){re.escape(p.name)}", text)]
    assert not unnamed, f"{page.name} does not map these modules: {unnamed}"
    names = {
        p.name
        for folder in ("components", "workloads", "infra", "policy", "tools")
        for p in (ROOT / folder).rglob("*.py")
    }
    stale = sorted(set(re.findall(r"\b(\w+\.py)\b", text)) - names)
    assert not stale, f"{page.name} names modules that do not exist: {stale}"


def test_the_architecture_page_follows_the_backend_choice_through_at_most_six_files_that_read_it() -> None:
    section = ARCHITECTURE.read_text().split("## Following the backend choice", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. (?:the runtime's folder: )?(?:\[)?`([^`]+)`", section, flags=re.M)
    assert 2 <= len(steps) <= 6, steps
    files = [s for s in steps if not s.startswith("Pulumi.")]
    for f in files:
        assert (ROOT / f).is_file(), f
        assert re.search(r"backend|RUNTIMES|RuntimeBackend", (ROOT / f).read_text()), f"{f} does not read the backend"
    assert {"components/catalog/runtimes.py", "workloads/launch.py"} <= set(files)
