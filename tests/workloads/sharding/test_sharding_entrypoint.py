"""The built-in entrypoint trains data parallel: it refuses a sharded workload rather than train it unsharded."""

from __future__ import annotations

import pytest

from tpuray.components.config import ConfigError
from tpuray.workloads.gpt import cli as train


def test_the_entrypoint_refuses_parallelism_it_does_not_run() -> None:
    args = train.build_parser().parse_args(["--fsdp", "2"])
    with pytest.raises(ConfigError, match=r"workload\.parallelism: fsdp=2 x tensor=1: the built-in entrypoint"):
        train.settings(args)
    assert train.settings(train.build_parser().parse_args(["--fsdp", "1"])).workload.parallelism.degree == 1
