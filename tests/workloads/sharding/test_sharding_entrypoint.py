"""The built-in entrypoint trains sharded where it can (PyTorch/XLA SPMD on one host; TorchTPU's FSDP2 and tensor
parallelism inside each slice) and refuses the rest rather than train it unsharded."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.stacks import minimal_values
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import ConfigError, WorkloadConfig, parse_stack_config
from tpuray.components.config.workload import require_entrypoint_sharding as check_sharded
from tpuray.workloads.gpt import cli as train


def test_the_entrypoint_takes_parallelism_on_both_runtimes() -> None:
    for backend in ("xla", "torch_tpu"):
        args = train.build_parser().parse_args(["--fsdp", "2", "--backend", backend])
        assert train.settings(args).workload.parallelism.fsdp == 2
    assert train.settings(train.build_parser().parse_args(["--fsdp", "1"])).workload.parallelism.degree == 1


@pytest.mark.parametrize(
    ("backend", "spec", "slices", "why"),
    [
        ("xla", "v5p:2x2x2", 1, "2 hosts: it runs PyTorch/XLA SPMD on one host"),
        ("xla", "v5e:2x2", 2, "2 hosts: it runs PyTorch/XLA SPMD on one host"),
        ("torch_tpu", "v5e:2x2", 2, r"tensor=2 leaves a data axis \(2 replicas\)"),
        ("torch_tpu", "v5e:2x4", 1, r"tensor=2 leaves a data axis \(2 replicas\)"),
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
    check_sharded("torch_tpu", TpuSlice.parse("v5p:2x2x2"), 2, 8, 1)  # FSDP2 across the two hosts, DP across slices
    check_sharded("torch_tpu", TpuSlice.parse("v5e:2x2"), 1, 2, 2)  # FSDP2 x tensor over the whole slice


def test_the_rayjob_entrypoint_carries_parallelism_to_the_trainer() -> None:
    from tpuray.components.planning.entrypoint import train_entrypoint

    workload = WorkloadConfig.model_validate({"parallelism": {"fsdp": 2, "tensor": 2}})

    class Pool:  # what train_entrypoint reads of a slice pool
        tpu_slice = TpuSlice.parse("v5e:2x2")
        slices = 1

    argv = shlex.split(train_entrypoint(workload, Pool(), "run", None))  # type: ignore[arg-type]
    s = train.settings(train.build_parser().parse_args(argv[3:]))
    assert (s.workload.parallelism.fsdp, s.workload.parallelism.tensor) == (2, 2)


SHAPES = ["v5e:1x1", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5p:2x2x1", "v5p:2x2x2", "v6e:2x2", "v6e:4x4"]


@settings(max_examples=120, deadline=None)
@given(
    shape=st.sampled_from(SHAPES),
    slices=st.integers(1, 3),
    backend=st.sampled_from(["xla", "torch_tpu"]),
    fsdp=st.sampled_from([1, 2, 4, 8]),
    tensor=st.sampled_from([1, 2, 4]),
)
def test_config_check_refuses_a_parallelism_exactly_when_the_job_would_at_its_start(
    shape: str, slices: int, backend: str, fsdp: int, tensor: int
) -> None:
    """Config check against the job itself: the built-in job's CLI, given the entrypoint the stack's RayJob runs,
    checks its settings and then its sharding before any cluster work (``cli.run``); config check refuses
    ``workload.parallelism`` for exactly the stacks it refuses."""
    from tpuray.components.planning.entrypoint import train_entrypoint

    tpu_slice = TpuSlice.parse(shape)
    workload = {"backend": backend, "parallelism": {"fsdp": fsdp, "tensor": tensor}}
    pool = {"name": "p", "generation": tpu_slice.generation, "topology": tpu_slice.topology, "slices": slices}
    values = minimal_values(slicePools=[pool], workload=workload)
    try:
        parse_stack_config(values, stack="dev")
        config_refuses = False
    except ConfigError as e:
        config_refuses = any(p.path == "workload.parallelism" for p in e.problems)

    class Pool:  # what train_entrypoint reads of a slice pool
        pass

    Pool.tpu_slice, Pool.slices = tpu_slice, slices  # type: ignore[attr-defined]
    argv = shlex.split(train_entrypoint(WorkloadConfig.model_validate(workload), Pool(), "run", None))  # type: ignore[arg-type]
    args = train.build_parser().parse_args(argv[3:])
    try:
        w = train.settings(args).workload
        check_sharded(w.backend, TpuSlice.parse(args.topology), args.num_slices or 1, fsdp, tensor)
        job_refuses = False
    except ConfigError:
        job_refuses = True
    assert config_refuses == job_refuses
