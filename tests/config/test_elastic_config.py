"""``workload.elastic``: bounds in whole slices of the job's pool, on capacity whose lost slice can come back
(``WorkloadConfig.elastic``, ``rules.elastic_rules``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.config import ConfigError, parse_stack_config
from tpuray.components.config.capacity import CAPACITY_CLASSES

ROOT = Path(__file__).resolve().parents[2]
TRAIN = 0  # prod's v5p-train pool, the job's


def prod(
    slices: int = 2, elastic: dict[str, Any] | None = None, capacity: dict[str, Any] | None = None
) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    values: dict[str, Any] = copy.deepcopy({k.split(":", 1)[1]: v for k, v in doc["config"].items()})
    pool = values["slicePools"][TRAIN]
    pool["slices"] = slices
    if capacity is not None:
        pool["capacity"] = capacity
        pool["autoscaling"] = {"enabled": True, "minSlices": 0}
    if elastic is not None:
        values["workload"]["elastic"] = elastic
    else:
        values["workload"].pop("elastic", None)
    return values


def problems(values: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_stack_config(values, stack="prod")
    except ConfigError as e:
        return [(p, m) for p, m in e.problems]
    return []


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=8).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))))
def test_bounds_within_the_pool_are_accepted_and_default_to_its_slices(case: tuple[int, int]) -> None:
    slices, lo = case
    config = parse_stack_config(prod(slices, {"minSlices": lo}), stack="prod")
    assert config.workload.elastic is not None
    assert config.workload.elastic.bounds(slices) == (lo, slices)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=8).flatmap(lambda n: st.tuples(st.just(n), st.integers(n + 1, 64))))
def test_a_minimum_above_the_pools_slices_is_refused_naming_the_field(case: tuple[int, int]) -> None:
    slices, lo = case
    found = problems(prod(slices, {"minSlices": lo}))
    assert [p for p, _ in found] == ["workload.elastic.minSlices"]
    assert f"{lo} exceeds pool 'v5p-train''s {slices} slices; valid: 1 to {slices - 1}" in found[0][1]


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=8).flatmap(lambda n: st.tuples(st.just(n), st.integers(n + 1, 64))))
def test_a_maximum_above_the_pools_slices_is_refused_naming_the_field(case: tuple[int, int]) -> None:
    slices, hi = case
    found = problems(prod(slices, {"minSlices": 1, "maxSlices": hi}))
    assert [p for p, _ in found] == ["workload.elastic.maxSlices"]
    assert f"valid: 1 to {slices}, or unset" in found[0][1]


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=8))
def test_equal_bounds_never_resize_and_are_refused(slices: int) -> None:
    found = problems(prod(slices, {"minSlices": slices}))
    assert [p for p, _ in found] == ["workload.elastic.minSlices"]
    assert "never resize" in found[0][1] and f"valid: 1 to {slices - 1}" in found[0][1]


def test_a_minimum_above_the_maximum_is_refused_naming_the_field() -> None:
    found = problems(prod(4, {"minSlices": 3, "maxSlices": 2}))
    assert [p for p, _ in found] == ["workload.elastic.minSlices"]
    assert "valid: 1 <= minSlices <= maxSlices" in found[0][1]


def test_a_single_slice_pool_is_refused_naming_the_field() -> None:
    found = problems(prod(1, {"minSlices": 1}))
    assert [p for p, _ in found] == ["workload.elastic"]
    assert "holds one slice" in found[0][1] and "slicePools[0].slices" in found[0][1]


@pytest.mark.parametrize("bad", [1.5, "1", True, 0.0])
@pytest.mark.parametrize("field", ["minSlices", "maxSlices"])
def test_bounds_that_are_not_whole_slices_are_refused_naming_the_field(field: str, bad: object) -> None:
    elastic: dict[str, Any] = {"minSlices": 1, field: bad}
    found = problems(prod(4, elastic))
    assert [p for p, _ in found] == [f"workload.elastic.{field}"]
    assert "not a whole number of slices; valid: an integer such as 1 or 2" in found[0][1]


def test_a_missing_minimum_is_refused_naming_the_field() -> None:
    found = problems(prod(4, {"maxSlices": 3}))
    assert [p for p, _ in found] == ["workload.elastic.minSlices"]


RETURNING = {
    "on-demand": {"type": "on-demand"},
    "spot": {"type": "spot"},
    "reservation": {"type": "reservation", "name": "r"},
    "flex-start": {"type": "flex-start", "maxRunDuration": "24h"},
}


def test_every_capacity_type_says_whether_a_lost_slice_returns() -> None:
    assert set(RETURNING) | {"queued"} == set(CAPACITY_CLASSES)
    assert {tag for tag, cls in CAPACITY_CLASSES.items() if not cls.lost_slice_returns} == {"queued"}


@pytest.mark.parametrize("tag", sorted(RETURNING))
def test_capacity_whose_slices_return_trains_elastically(tag: str) -> None:
    assert problems(prod(3, {"minSlices": 1}, RETURNING[tag])) == []


def test_queued_capacity_is_refused_with_its_reason() -> None:
    values = prod(3, {"minSlices": 1}, {"type": "queued"})
    values["kueue"] = {"enabled": True}
    values["ray"]["jobMode"] = "ephemeral"
    found = dict(problems(values))
    assert "ProvisioningRequest" in found["workload.elastic"]
    assert "on-demand, spot, reservation or flex-start" in found["workload.elastic"]


def test_a_single_host_slice_is_refused_naming_the_field() -> None:
    values = prod(3, {"minSlices": 1})
    values["slicePools"][TRAIN]["topology"] = "2x2x1"
    values["workload"]["model"] = {"vocabSize": 256, "layers": 2, "dModel": 64, "heads": 4}
    found = problems(values)
    assert [p for p, _ in found] == ["workload.elastic"]
    assert "single-host slice" in found[0][1] and "multi-host topology" in found[0][1]
