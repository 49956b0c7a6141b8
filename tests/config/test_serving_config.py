"""The serving section: each bad value fails naming its field and the valid form, before anything is declared."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize("bad", ["chat.app", "chat/app:app", "chat.app:", ":app", "chat app:app", "chat.app:app:x"])
def test_import_path_must_be_module_colon_attribute(bad: str) -> None:
    [(path, msg)] = problems_of(serving_values({"importPath": bad}))
    assert path == "serving.importPath" and "module:attribute" in msg


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
