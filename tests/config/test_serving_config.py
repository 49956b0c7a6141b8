"""The serving section: each bad value fails naming its field and the valid form, before anything is declared."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support.stacks import SERVE_POOL, serving_values, shipped_values
from tpuray.components.config import ConfigError, parse_stack_config
from tpuray.components.config.serving import ServingConfig, whole_percent_steps


def problems_of(v: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(v, stack="dev")
    return [(p.path, p.message) for p in e.value.problems]


def test_a_valid_service_parses_and_stacks_without_one_are_unchanged() -> None:
    cfg = parse_stack_config(serving_values({"replicas": 2, "minSlices": 1, "maxSlices": 2}), stack="dev")
    assert cfg.serving is not None
    assert (cfg.serving.replicas, cfg.serving.lowest, cfg.serving.highest) == (2, 1, 2)
    assert cfg.serving.upgrade.strategy == "NewCluster"
    assert parse_stack_config(shipped_values("dev"), stack="dev").serving is None


@pytest.mark.parametrize("bad", [1.5, "2", True])
def test_replicas_must_be_whole_slices(bad: object) -> None:
    [(path, msg)] = problems_of(serving_values({"replicas": bad}))
    assert path == "serving.replicas"
    assert "whole number of slices" in msg


def test_a_pool_too_small_for_the_slices_names_both_numbers() -> None:
    [(path, msg)] = problems_of(serving_values({"replicas": 2, "maxSlices": 5}))
    assert path == "serving.maxSlices"
    assert "5 slices" in msg and "holds 4" in msg and "v5litepod-16" in msg


def test_replicas_outside_the_autoscaling_range() -> None:
    [(path, msg)] = problems_of(serving_values({"replicas": 3, "maxSlices": 2}))
    assert path == "serving.replicas" and "minSlices <= replicas <= maxSlices" in msg


def test_an_unknown_strategy_names_kuberays() -> None:
    [(path, msg)] = problems_of(serving_values({"upgrade": {"strategy": "BlueGreen"}}))
    assert path == "serving.upgrade.strategy"
    for valid in ("NewCluster", "NewClusterWithIncrementalUpgrade", "None"):
        assert valid in msg


@pytest.mark.parametrize(
    "bad",
    [
        "chat.app",
        "chat/app:app",
        "chat.app:",
        ":app",
        "chat app:app",
        "chat.app:app:x",
        "chat.app:app\n",  # a final newline: Python's $ matches before it, Ray's getattr(module, "app\n") fails
        "chat.app:builder.app",  # Ray asks the module for one attribute named "builder.app"
        "chat.app\n:app",
        " chat.app:app",
    ],
)
def test_import_path_must_be_module_colon_attribute(bad: str) -> None:
    [(path, msg)] = problems_of(serving_values({"importPath": bad}))
    assert path == "serving.importPath" and "module:attribute" in msg and "one attribute" in msg


def _accepts(import_path: str) -> bool:
    try:
        ServingConfig.model_validate({"importPath": import_path, "slicePool": "serve"})
    except ValidationError:
        return False
    return True


_IDENTIFIER = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@settings(deadline=None)
@given(module=st.lists(_IDENTIFIER, min_size=1, max_size=4), attribute=_IDENTIFIER)
def test_every_dotted_module_and_one_attribute_is_accepted(module: list[str], attribute: str) -> None:
    assert _accepts(f"{'.'.join(module)}:{attribute}")


# the characters an import path is made of, and those that break one
_PATH_TEXT = st.text(alphabet="ab_1.: \n\t", max_size=12)


@settings(max_examples=300, deadline=None)
@given(tail=_PATH_TEXT)
def test_an_accepted_import_path_is_one_ray_resolves(tail: str) -> None:
    """Whatever the config accepts, Ray 2.60's own ``import_attr`` (the function Serve builds the application
    with) resolves to the object the path names as Python code would define it: the module of that dotted name,
    and the attribute chain after the colon, each name without surrounding space. The module's first part is unique
    to the test, so no real module is shadowed."""
    utils = pytest.importorskip("ray._common.utils")  # the workload extra's Ray
    import_path = f"tpuray_probe_{tail}"
    if not _accepts(import_path):
        return
    module_text, attribute_text = import_path.split(":", 1)
    parts = [p.strip() for p in module_text.split(".")]
    names = [".".join(parts[: i + 1]) for i in range(len(parts))]
    *owners, last = [a.strip() for a in attribute_text.split(".")]
    target = object()
    added = {n: types.ModuleType(n) for n in names if n not in sys.modules}
    sys.modules.update(added)
    try:
        holder: object = sys.modules[names[-1]]
        for owner in owners:  # "builder.app": an object named builder holding app
            setattr(holder, owner, types.SimpleNamespace())
            holder = getattr(holder, owner)
        setattr(holder, last, target)
        assert utils.import_attr(import_path) is target
    finally:
        for n in added:
            del sys.modules[n]


def test_serving_on_the_training_pool_is_refused() -> None:
    [(path, msg)] = problems_of(serving_values({"slicePool": "v5e-dev"}))
    assert path == "serving.slicePool"
    assert "training" in msg and "v5e-serve" in msg  # names the pool to choose instead


def test_an_unknown_pool_lists_the_pools() -> None:
    [(path, msg)] = problems_of(serving_values({"slicePool": "nope"}))
    assert path == "serving.slicePool" and "v5e-dev, v5e-serve" in msg


def test_a_queued_pool_cannot_serve() -> None:
    queued = {**SERVE_POOL, "capacity": {"type": "queued"}}
    v = serving_values({}, queued)
    v["kueue"] = {"enabled": True}
    v["ray"]["jobMode"] = "ephemeral"
    found = problems_of(v)
    assert any(p == "serving.slicePool" and "queued pool" in m for p, m in found), found


@pytest.mark.parametrize("key", ["importPath", "slicePool"])
def test_the_application_and_its_pool_are_required(key: str) -> None:
    v = serving_values({})
    del v["serving"][key]
    assert [p for p, _ in problems_of(v)] == [f"serving.{key}"]


def test_a_service_name_kuberay_would_refuse() -> None:
    v = serving_values({"name": "a-very-long-serving-application"[:30]})
    v["cluster"]["name"] = "a-cluster-name-of-twenty"
    [(path, msg)] = problems_of(v)
    assert path == "serving.name" and "at most 47" in msg


def test_incremental_needs_its_options_autoscaling_and_a_whole_percent_step() -> None:
    base = {"replicas": 3, "minSlices": 1, "maxSlices": 4}
    [(path, _)] = problems_of(
        serving_values({**base, "upgrade": {"strategy": "NewClusterWithIncrementalUpgrade", "stepSlices": 1}})
    )
    assert path == "serving.upgrade.gatewayClassName"
    incremental = {"strategy": "NewClusterWithIncrementalUpgrade", "gatewayClassName": "gke-l7-rilb"}
    [(path, msg)] = problems_of(serving_values({**base, "upgrade": {**incremental, "stepSlices": 1}}))
    assert path == "serving.upgrade.stepSlices" and "valid steps are 3" in msg  # 1 of 3 is 33.3 %
    [(path, msg)] = problems_of(serving_values({"replicas": 2, "upgrade": {**incremental, "stepSlices": 1}}))
    assert path == "serving.maxSlices" and "autoscaler" in msg
    cfg = parse_stack_config(
        serving_values({"replicas": 2, "maxSlices": 4, "upgrade": {**incremental, "stepSlices": 1}})
    )
    assert cfg.serving is not None and cfg.serving.step_percent == 50


def test_options_of_the_incremental_strategy_are_refused_on_the_others() -> None:
    [(path, msg)] = problems_of(serving_values({"upgrade": {"strategy": "NewCluster", "stepSlices": 1}}))
    assert path == "serving.upgrade.stepSlices" and "NewClusterWithIncrementalUpgrade" in msg


@given(st.integers(1, 64))
def test_every_whole_percent_step_is_a_whole_number_of_slices_and_percent(replicas: int) -> None:
    steps = whole_percent_steps(replicas)
    assert replicas in steps  # the whole capacity at once is always a valid step
    for s in range(1, replicas + 1):
        assert (s in steps) == ((100 * s) % replicas == 0)
    for s in steps:
        ServingConfig.model_validate(
            {
                "importPath": "a:b",
                "slicePool": "p",
                "replicas": replicas,
                "minSlices": 0,
                "upgrade": {"strategy": "NewClusterWithIncrementalUpgrade", "stepSlices": s, "gatewayClassName": "g"},
                "maxSlices": 64,
            }
        )
