"""The training job's queued pool holds one slice: Kueue asks one ProvisioningRequest for all of a job's slices,
and GKE is only documented to fill one multi-host TPU slice per request (``rules.queued_job_slices_rules``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.config import ConfigError, parse_stack_config

ROOT = Path(__file__).resolve().parents[2]


def prod_dws() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "Pulumi.prod-dws.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items()}


def with_slices(values: dict[str, Any], pool: int, slices: int) -> dict[str, Any]:
    out = copy.deepcopy(values)
    out["slicePools"][pool]["slices"] = slices
    return out


def problems(values: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_stack_config(values, stack="prod-dws")
    except ConfigError as e:
        return [(p, m) for p, m in e.problems]
    return []


def test_prod_dws_trains_on_one_queued_slice() -> None:
    config = parse_stack_config(prod_dws(), stack="prod-dws")
    (pool,) = [p for p in config.slice_pools if p.name == config.workload.slice_pool]
    assert pool.capacity.queued_provisioning and pool.slices == 1


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=2, max_value=8))
def test_a_multi_slice_queued_training_pool_is_refused_naming_the_field(slices: int) -> None:
    found = problems(with_slices(prod_dws(), 1, slices))
    assert [p for p, _ in found] == ["slicePools[1].slices"]
    (message,) = [m for _, m in found]
    assert f"all its {slices} slices ({slices * 4} hosts in one pod set)" in message
    assert "set slices: 1" in message and "flex-start" in message


@pytest.mark.parametrize("capacity", [{"type": "flex-start", "maxRunDuration": "7d"}])
def test_several_slices_without_a_provisioning_request_are_not_this_rules_business(capacity: dict[str, Any]) -> None:
    values = with_slices(prod_dws(), 1, 2)
    values["slicePools"][1]["capacity"] = capacity
    assert not [p for p, _ in problems(values) if p == "slicePools[1].slices"]


def test_a_queued_pool_the_job_does_not_run_on_may_hold_several_slices() -> None:
    """Only the training job's pool: other RayJobs reach a queued pool with the slices they ask for."""
    values = with_slices(prod_dws(), 1, 2)
    values["workload"]["slicePool"] = "v5p-train"
    assert not [p for p, _ in problems(values) if p == "slicePools[1].slices"]
