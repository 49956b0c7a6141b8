"""The entrypoint's model-size flags: what the RayJob passes from the stack reaches the job, validated."""

from __future__ import annotations

import pytest

from tpuray.components.config import ConfigError, WorkloadConfig
from tpuray.workloads import train


def test_model_flags_override_the_stack_model() -> None:
    args = train.build_parser().parse_args(["--layers", "3", "--d-model", "96", "--heads", "6", "--vocab-size", "500"])
    m = train._model_size(args, WorkloadConfig())
    assert (m.layers, m.d_model, m.heads, m.vocab_size) == (3, 96, 6, 500)


def test_model_defaults_come_from_the_stack() -> None:
    w = WorkloadConfig.model_validate({"model": {"layers": 5}})
    assert train._model_size(train.build_parser().parse_args([]), w).layers == 5


def test_bad_model_flags_name_the_flag() -> None:
    args = train.build_parser().parse_args(["--heads", "5"])
    with pytest.raises(ConfigError) as err:
        train._model_size(args, WorkloadConfig())
    assert err.value.problems == [("--heads", "5 does not divide dModel=64")]
    args = train.build_parser().parse_args(["--d-model", "4"])
    with pytest.raises(ConfigError) as err:
        train._model_size(args, WorkloadConfig())
    assert err.value.problems[0][0] == "--d-model"
