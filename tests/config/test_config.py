"""The typed stack configuration: both stack files validate; bad configs fail with path-named errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stacks import shipped_config, shipped_values
from tpuray.components.catalog.topology import FLEX_START_MIN_GKE_VERSION
from tpuray.components.config import (
    ConfigError,
    FlexStart,
    Reservation,
    SlicePoolConfig,
    StackConfig,
    gke_version_key,
    load_stack_file,
    parse_stack_config,
    stack_values,
)
from tpuray.components.config.base import Problem, pattern_form
from tpuray.components.config.project_file import config_declarations
from tpuray.components.config.stack_yaml import YamlError, load_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_dev_stack_is_small_single_host_spot() -> None:
    cfg = shipped_config("dev")
    assert len(cfg.slice_pools) == 1
    pool = cfg.slice_pools[0]
    assert not pool.tpu_slice.multi_host
    assert pool.capacity.type == "spot"
    assert cfg.workload_pool() is pool


def test_prod_stack_is_multihost_multislice_with_protection() -> None:
    cfg = shipped_config("prod")
    assert cfg.cluster.deletion_protection
    v5p = next(p for p in cfg.slice_pools if p.generation == "v5p")
    assert v5p.tpu_slice.multi_host and v5p.slices == 2
    assert isinstance(v5p.capacity, Reservation)
    assert v5p.capacity.reservation_value == "projects/tpuray-shared-capacity/reservations/v5p-train-reservation"
    v6e = next(p for p in cfg.slice_pools if p.generation == "v6e")
    assert isinstance(v6e.capacity, FlexStart) and v6e.capacity.max_run_duration == 24 * 3600
    # the v6e pool is flex-start, which for TPUs needs a newer GKE than v6e itself (1.31.2-gke.1115000)
    assert cfg.master_version == FLEX_START_MIN_GKE_VERSION
    assert all(gke_version_key(cfg.master_version) >= gke_version_key(p.min_gke_version) for p in cfg.slice_pools)


def test_pulumi_yaml_config_block_is_derived_from_the_model() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["config"] == config_declarations()
    assert project["main"] == "infra/"
    assert project["runtime"]["name"] == "python"
    for key, decl in project["config"].items():
        assert key.startswith("tpuray:")
        assert decl["description"], key


def test_declared_defaults_validate_as_the_model_defaults() -> None:
    decls = config_declarations()
    given_values = {k.split(":", 1)[1]: d["default"] for k, d in decls.items() if "default" in d}
    required = {k.split(":", 1)[1] for k, d in decls.items() if "default" not in d}
    assert required == {"project", "region", "slicePools"}
    cfg = parse_stack_config({**given_values, **{k: shipped_values("dev")[k] for k in required}, "zone": "us-west4-a"})
    assert cfg.cluster.name == "tpuray"


def test_provider_namespaces_are_ignored_and_bare_keys_belong_to_the_project() -> None:
    raw = {"gcp:project": "x", "project": "tpuray-dev-project", "tpuray:region": "us-west4"}
    assert stack_values(raw) == {"project": "tpuray-dev-project", "region": "us-west4"}


def corrupted(stack: str, path: list[Any], value: Any) -> dict[str, Any]:
    v = shipped_values(stack)
    node: Any = v
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return v


@pytest.mark.parametrize(
    ("stack", "path", "value", "expected_path", "hint"),
    [
        ("prod", ["slicePools", 1, "topology"], "3x3", "slicePools[1].topology", "nearest valid shapes"),
        ("prod", ["slicePools", 0, "generation"], "v9", "slicePools[0].generation", "valid choices"),
        ("prod", ["slicePools", 0, "capacity"], {"type": "reserve"}, "slicePools[0].capacity.type", "valid choices"),
        ("prod", ["slicePools", 0, "capacity"], {"name": "r"}, "slicePools[0].capacity.type", "valid choices"),
        ("dev", ["region"], "US-Central1", "region", "e.g. us-central2"),
        ("dev", ["cluster", "name"], "Tpu_Dev", "cluster.name", "lowercase letters, digits and '-'"),
        ("dev", ["slicePools", 0, "name"], "V5E_dev", "slicePools[0].name", "e.g. 'tpu-dev'"),
        (
            "prod",
            ["slicePools", 0, "capacity"],
            {"type": "reservation"},
            "slicePools[0].capacity.name",
            "Field required",
        ),
        ("prod", ["slicePools", 1, "capacity"], {"type": "flex-start"}, "slicePools[1].capacity.maxRunDuration", ""),
        (
            "dev",
            ["slicePools", 0, "capacity"],
            {"type": "spot", "name": "r"},
            "slicePools[0].capacity.name",
            "unknown key",
        ),
        ("prod", ["slicePools", 1, "autoscaling"], {"enabled": False}, "slicePools[1].autoscaling", "flex-start"),
        ("prod", ["slicePools", 0, "capacity"], {"type": "queued"}, "slicePools[0].autoscaling", "minSlices 0"),
        ("dev", ["slicePools", 0, "slices"], "two", "slicePools[0].slices", "integer"),
        ("dev", ["slicePools", 0, "machineType"], "ct5lp-hightpu-8t", "slicePools[0].machineType", "ct5lp-hightpu-4t"),
        ("prod", ["zone"], "", "slicePools[0].zone", "single zone"),
        ("prod", ["zone"], "europe-west4-a", "zone", "not in region"),
        ("dev", ["cluster", "releaseChannel"], "FAST", "cluster.releaseChannel", "REGULAR"),
        ("dev", ["cluster", "minMasterVersion"], "1.29.0", "cluster.minMasterVersion", "older than"),
        ("prod", ["workload", "slicePool"], "nope", "workload.slicePool", "v6e-flex"),
        ("prod", ["workload", "model", "heads"], 5, "workload.model.heads", "does not divide"),
        ("dev", ["network"], {"podsCidr": "10.0.0.0/12"}, "network.podsCidr", "overlaps"),
        ("dev", ["slicePools"], [], "slicePools", "at least 1"),
        ("dev", ["colour"], "blue", "colour", "unknown key"),
    ],
)
def test_corrupted_stacks_fail_with_path_named_errors(
    stack: str, path: list[Any], value: Any, expected_path: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(corrupted(stack, path, value))
    matching = [m for p, m in err.value.problems if p == expected_path]
    assert matching, err.value.problems
    assert any(hint in m for m in matching), err.value.problems
    assert f"{expected_path}: " in str(err.value)


def _patterns(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        return {v for k, v in schema.items() if k == "pattern"} | {p for v in schema.values() for p in _patterns(v)}
    return {p for v in schema for p in _patterns(v)} if isinstance(schema, list) else set()


def test_every_pattern_a_stack_value_must_match_says_its_valid_form() -> None:
    """pydantic's own message for a mismatch shows only the regex; each pattern of the stack model has its form."""
    patterns = _patterns(StackConfig.model_json_schema(by_alias=True))
    assert len(patterns) >= 5
    assert {p for p in patterns if not pattern_form(p)} == set()


def test_a_mismatch_names_the_form_not_the_regex() -> None:
    v = shipped_values("prod")
    v["maintenance"]["window"]["start"] = "2026-01-03 02:00"
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    assert dict(err.value.problems)["maintenance.window.start"] == (
        "expected an RFC 3339 UTC time to the second, e.g. 2026-01-03T02:00:00Z"
    )
    assert "should match pattern" not in str(err.value)


def test_an_invalid_pool_name_is_offered_as_no_choice() -> None:
    v = shipped_values("prod")
    good = v["slicePools"][1]["name"]
    v["slicePools"][0]["name"] = "V5P_Prod"
    v["workload"]["slicePool"] = "nope"
    problems = dict(parse_problems(v))
    assert "slicePools[0].name" in problems
    assert problems["workload.slicePool"].startswith("'nope' is not a slice pool; valid choices: ")
    assert good in problems["workload.slicePool"] and "V5P_Prod" not in problems["workload.slicePool"]
    # A setting that names the invalid pool gets no second error: the pool's own error says why.
    v["workload"]["slicePool"] = "V5P_Prod"
    assert "workload.slicePool" not in dict(parse_problems(v))


def parse_problems(v: dict[str, Any]) -> list[Problem]:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    return list(err.value.problems)


def test_every_problem_is_listed_at_once() -> None:
    v = corrupted("prod", ["slicePools", 1, "topology"], "3x3")
    v["slicePools"][0]["slices"] = 0
    v["cluster"]["releaseChannel"] = "FAST"
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    paths = {p.path for p in err.value.problems}
    assert {"slicePools[1].topology", "slicePools[0].slices", "cluster.releaseChannel"} <= paths
    assert all(type(p) is Problem and p.message for p in err.value.problems)  # one type, from every source


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_stack_file(tmp_path / "Pulumi.missing.yaml")
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_stack_file(bad)
    bad.write_text("encryptionsalt: x\n")
    with pytest.raises(ConfigError, match="config"):
        load_stack_file(bad)


@pytest.mark.parametrize("stack", sorted(ROOT.glob("Pulumi*.yaml")), ids=lambda p: p.name)
def test_stack_files_read_as_yaml_safe_load_reads_them(stack: Path) -> None:
    """load_yaml may build its nodes with libyaml: the objects are still yaml.safe_load's."""
    assert load_yaml(stack.read_text()) == yaml.safe_load(stack.read_text())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "duplicate key 'a' at line 3, column 1 (first at line 1, column 1)"),
        ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
        ("- " * 100 + "x", "nested deeper than 64 levels"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),  # past libyaml's own limit of 1000
        ("a: &x [1, 2]\nb: *y\n", "not valid YAML: found undefined alias"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)),
            "expands to more than 100000 values",
        ),
    ],
)
def test_yaml_pulumi_would_refuse_is_refused(text: str, message: str) -> None:
    with pytest.raises(YamlError) as err:
        load_yaml(text)
    assert message in str(err.value)


# ---- generated bad configs ----------------------------------------------------------------------------
# Each mutation breaks a valid stack in one known way and says which path must be reported.
WRONG_TYPES = st.one_of(
    st.lists(st.integers(), min_size=1, max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
SCALAR_PATHS: list[list[Any]] = [
    ["project"],
    ["region"],
    ["cluster", "name"],
    ["cluster", "regional"],
    ["cluster", "deletionProtection"],
    ["slicePools", 0, "name"],
    ["slicePools", 0, "generation"],
    ["slicePools", 0, "topology"],
    ["slicePools", 0, "slices"],
    ["ray", "version"],
    ["ray", "namespace"],
    ["workload", "steps"],
    ["workload", "learningRate"],
    ["checkpoints", "retentionDays"],
]


def _path_str(path: list[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _set(v: dict[str, Any], path: list[Any], value: Any) -> None:
    node: Any = v
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[path[-1]] = value


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["wrong_type", "unknown_key", "bad_topology", "capacity", "missing", "bad_number"]))
    if kind == "wrong_type":
        path = draw(st.sampled_from(SCALAR_PATHS))
        return _path_str(path), (path, draw(WRONG_TYPES))
    if kind == "unknown_key":
        places: list[list[Any]] = [[], ["cluster"], ["slicePools", 0], ["ray"], ["workload"], ["workload", "model"]]
        where = draw(st.sampled_from(places))
        key = "x" + draw(st.text("abcdefgh", min_size=1, max_size=6))
        return _path_str([*where, key]), ([*where, key], draw(st.integers() | st.text(max_size=3)))
    if kind == "bad_topology":
        topo = draw(st.sampled_from(["3x3", "4x4x6", "2x2x3", "5x5", "0x0", "4x", "x", "16x16x48", "4x8x4", "1x1x1x1"]))
        return "slicePools[0].topology", (["slicePools", 0, "topology"], topo)
    if kind == "capacity":
        cap, where = draw(
            st.sampled_from(
                [
                    ({"type": "spot", "name": "r1"}, "capacity.name"),
                    ({"type": "reservation"}, "capacity.name"),
                    ({"type": "flex-start"}, "capacity.maxRunDuration"),
                    ({"type": "flex-start", "maxRunDuration": "forever"}, "capacity.maxRunDuration"),
                    ({"type": "flex-start", "maxRunDuration": "30d"}, "capacity.maxRunDuration"),
                    ({"type": "preemptible"}, "capacity"),
                    ({"spot": True}, "capacity"),
                    ({"type": "on-demand", "spot": True}, "capacity.spot"),
                    ({"type": "queued", "maxRunDuration": -5}, "capacity.maxRunDuration"),
                ]
            )
        )
        return f"slicePools[0].{where}", (["slicePools", 0, "capacity"], cap)
    if kind == "missing":
        required: list[list[Any]] = [
            ["project"],
            ["region"],
            ["slicePools"],
            ["slicePools", 0, "name"],
            ["slicePools", 0, "generation"],
            ["slicePools", 0, "topology"],
        ]
        path = draw(st.sampled_from(required))
        return _path_str(path), (path, None)  # None means: delete the key
    positive: list[list[Any]] = [
        ["slicePools", 0, "slices"],
        ["workload", "steps"],
        ["cluster", "systemNodes"],
        ["workload", "batchSizePerChip"],
    ]
    path = draw(st.sampled_from(positive))
    return _path_str(path), (path, draw(st.integers(max_value=0)))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["dev", "prod"]), mutation())
def test_generated_bad_configs_are_rejected_with_their_path(stack: str, m: tuple[str, Any]) -> None:
    expected_path, (path, value) = m
    v = shipped_values(stack)
    if value is None:
        node: Any = v
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
    else:
        _set(v, path, value)
    try:
        parse_stack_config(v)
    except ConfigError as e:
        paths = [p for p, _ in e.problems]
        assert any(p == expected_path or p.startswith(expected_path + ".") for p in paths), (expected_path, paths)
        assert all(msg for _, msg in e.problems)
    else:
        pytest.fail(f"accepted a config broken at {expected_path}: {value!r}")


def _leaf_keys(model: type[Any], prefix: str = "") -> set[str]:
    from pydantic import BaseModel

    keys: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        ann = field.annotation
        inner = getattr(ann, "__args__", (ann,))
        sub = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if key == "slicePools":
            keys |= _leaf_keys(SlicePoolConfig, key + "[].")
        elif sub is not None and key not in {"cluster.masterAuthorizedNetworks"} and "capacity" not in key:
            keys |= _leaf_keys(sub, key + ".")
        else:
            keys.add(key)
    return keys


def test_config_guide_names_every_key() -> None:

    # the configuration guide's reference, and the reference tables of the topic pages (docs/startup.md: startup.*)
    readme = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    first_cells = [line.split("|")[1] for line in readme.splitlines() if line.startswith("| `")]
    missing = []
    for key in sorted(_leaf_keys(StackConfig)):
        head, _, last = key.rpartition(".")
        # a key is documented by its own row, or by its parent's row naming it (`workload.model.{layers,...}`)
        if not any(
            f"`{key}`" in cell or (head and f"`{head}" in cell and last in row)
            for cell, row in zip(first_cells, [r for r in readme.splitlines() if r.startswith("| `")], strict=True)
        ):
            missing.append(key)
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_cross_section_rules_still_run_when_another_section_is_invalid() -> None:
    """A type error in one section must not hide a zone, name or version problem in another."""
    v = corrupted("prod", ["cluster", "releaseChannel"], "FAST")  # a field error ...
    v["zone"] = "europe-west4-a"  # ... and cross-section ones
    v["slicePools"][1]["name"] = v["slicePools"][0]["name"]
    v["slicePools"][0]["topology"] = "4x4x6"
    v["workload"]["slicePool"] = "nope"
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v)
    paths = [p for p, _ in err.value.problems]
    assert "cluster.releaseChannel" in paths and "slicePools[0].topology" in paths
    assert "zone" in paths  # not in region
    assert "workload.slicePool" in paths
    assert len(paths) == len(set(err.value.problems))  # nothing reported twice
