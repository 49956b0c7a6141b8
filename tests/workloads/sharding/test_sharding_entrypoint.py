"""The built-in entrypoint trains sharded where it can (PyTorch/XLA SPMD on one host) and refuses the rest rather
than train it unsharded."""

from __future__ import annotations

import shlex

import pytest

from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import ConfigError, WorkloadConfig
from tpuray.components.config.workload import require_entrypoint_sharding as check_sharded
from tpuray.workloads.gpt import cli as train


def test_the_entrypoint_takes_parallelism_on_xla_and_refuses_it_on_torch_tpu() -> None:
    assert train.settings(train.build_parser().parse_args(["--fsdp", "2"])).workload.parallelism.fsdp == 2
    args = train.build_parser().parse_args(["--fsdp", "2", "--backend", "torch_tpu"])
    with pytest.raises(ConfigError, match=r"workload\.parallelism: fsdp=2 x tensor=1: the built-in entrypoint on"):
        train.settings(args)
    assert train.settings(train.build_parser().parse_args(["--fsdp", "1"])).workload.parallelism.degree == 1


@pytest.mark.parametrize(
    ("backend", "spec", "slices", "why"),
    [
        ("xla", "v5p:2x2x2", 1, "2 hosts: it runs sharded on one host"),
        ("xla", "v5e:2x2", 2, "2 hosts: it runs sharded on one host"),
        ("torch_tpu", "v5e:2x2", 1, "backend torch_tpu"),
        ("xla", "v6e:1x1", 1, "does not divide the slice's 1 chips"),
    ],
)
def test_a_sharded_job_it_cannot_run_is_refused_before_any_cluster_work(
    backend: str, spec: str, slices: int, why: str
) -> None:
    with pytest.raises(ConfigError, match=rf"workload\.parallelism: fsdp=2 x tensor=2: .*{why}"):
        check_sharded(backend, TpuSlice.parse(spec), slices, 2, 2)


def test_single_host_spmd_and_data_parallel_pass() -> None:
    check_sharded("xla", TpuSlice.parse("v5e:2x2"), 1, 2, 2)
    check_sharded("xla", TpuSlice.parse("v6e:2x4"), 1, 8, 1)
    check_sharded("torch_tpu", TpuSlice.parse("v5p:2x2x2"), 4, 1, 1)  # data parallel: the other path


def test_the_rayjob_entrypoint_carries_parallelism_to_the_trainer() -> None:
    from tpuray.components.planning.entrypoint import train_entrypoint

    workload = WorkloadConfig.model_validate({"parallelism": {"fsdp": 2, "tensor": 2}})

    class Pool:  # what train_entrypoint reads of a slice pool
        tpu_slice = TpuSlice.parse("v5e:2x2")
        slices = 1

    argv = shlex.split(train_entrypoint(workload, Pool(), "run", None))  # type: ignore[arg-type]
    s = train.settings(train.build_parser().parse_args(argv[3:]))
    assert (s.workload.parallelism.fsdp, s.workload.parallelism.tensor) == (2, 2)
