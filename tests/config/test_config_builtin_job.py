"""What the stack's own training RayJob, the built-in GPT job, refuses when it starts is refused by config check
(and so by ``tpuray plan``) through the same functions, naming ``workload.parallelism``; a stack whose training job
is the user's own (``workload.entrypoint``) is not held to them, and its RayJob runs that command."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.paths import ROOT
from tests.support.stacks import minimal_values, problems_by_path, shipped_values, with_value
from tpuray.components.config import ConfigError, load_stack_file, parse_stack_config, stack_values
from tpuray.components.config import rules as config_rules
from tpuray.components.config.stack_yaml import safe_load
from tpuray.components.planning.stack_plan import plan_stack

TORCH_TPU = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml"
OWN = "python train.py --epochs 3"


def prod_fsdp4() -> dict[str, Any]:
    """The prod stack with fsdp: 4: its job trains on two reserved v5p 4x4x4 slices, 32 hosts."""
    return with_value(shipped_values("prod"), "workload.parallelism", {"fsdp": 4})


def single_host_slices() -> dict[str, Any]:
    """Two v5e 2x2 slices (one host each) sharded fsdp: 2."""
    pool = {"name": "v5e", "generation": "v5e", "topology": "2x2", "slices": 2, "zone": "us-east5-a"}
    return minimal_values(slicePools=[pool], workload={"parallelism": {"fsdp": 2}})


def torch_tpu() -> dict[str, Any]:
    """The TorchTPU fixture stack (two tpu7x 2x2x2 slices, 16 devices each) sharded fsdp: 4 x tensor: 2, which
    leaves a data axis beside tensor parallelism."""
    values = stack_values(safe_load(TORCH_TPU.read_text())["config"])
    return with_value(values, "workload.parallelism", {"fsdp": 4, "tensor": 2})


CASES = {"prod fsdp 4": prod_fsdp4, "several single-host slices": single_host_slices, "torch_tpu": torch_tpu}
STACKS = {"prod fsdp 4": "prod", "several single-host slices": "dev", "torch_tpu": "torch-tpu"}


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("prod fsdp 4", "2 x v5p:4x4x4 is 32 hosts: it runs PyTorch/XLA SPMD on one host"),
        ("several single-host slices", "2 x v5e:2x2 is 2 hosts"),
        ("torch_tpu", "tensor=2 leaves a data axis (4 replicas)"),
    ],
)
def test_a_sharding_the_built_in_job_refuses_at_its_start_is_refused_by_config_check(case: str, why: str) -> None:
    found = problems_by_path(CASES[case](), stack=STACKS[case])
    assert list(found) == ["workload.parallelism"], found
    assert why in found["workload.parallelism"] and "workload.entrypoint" in found["workload.parallelism"]


@pytest.mark.parametrize("case", list(CASES))
def test_a_stack_whose_training_job_is_the_users_own_is_not_held_to_the_built_in_jobs_rules(case: str) -> None:
    values = with_value(CASES[case](), "workload.entrypoint", OWN)
    cfg = parse_stack_config(values, stack=STACKS[case])
    job = plan_stack(cfg, STACKS[case]).job
    assert job.entrypoint == OWN  # the user's command as given, never the built-in job's


def test_config_check_calls_the_jobs_own_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the built-in job's functions decide, config check follows: with both accepting everything, the
    three stacks pass; with the sharding check refusing everything, a data parallel stack is refused."""

    def accept(*_: Any) -> None:
        return None

    def refuse(*_: Any) -> None:
        raise ConfigError([("workload.parallelism", "refused by the job")])

    monkeypatch.setattr(config_rules, "require_entrypoint_sharding", accept)
    for case, make in CASES.items():
        parse_stack_config(make(), stack=STACKS[case])
    monkeypatch.setattr(config_rules, "require_entrypoint_sharding", refuse)
    assert "refused by the job" in problems_by_path(shipped_values("dev"))["workload.parallelism"]


@pytest.mark.parametrize(
    ("parallelism", "why"),
    [
        ({"fsdp": 16}, None),  # FSDP2 over each slice's 16 devices, replicas across the two slices
        ({"fsdp": 8, "tensor": 2}, "tensor=2 leaves a data axis (2 replicas)"),  # the second slice's
    ],
)
def test_torch_tpu_shards_across_hosts_and_slices_with_fsdp2(parallelism: dict[str, int], why: str | None) -> None:
    values = with_value(torch_tpu(), "workload.parallelism", parallelism)
    if why is None:
        parse_stack_config(values, stack="torch-tpu")
    else:
        assert why in problems_by_path(values, stack="torch-tpu")["workload.parallelism"]


def test_the_shipped_stacks_pass() -> None:
    for name in ("dev", "prod", "prod-dws"):
        load_stack_file(ROOT / f"Pulumi.{name}.yaml")
    load_stack_file(TORCH_TPU, "torch-tpu")


@pytest.mark.parametrize(
    "bad",
    ["", " python train.py", "python train.py ", "python train.py\n", "python a.py\nrm -rf /", "python\ttrain.py"],
)
def test_an_entrypoint_is_one_line_of_printable_characters(bad: str) -> None:
    found = problems_by_path(with_value(minimal_values(), "workload.entrypoint", bad))
    assert list(found) == ["workload.entrypoint"], found
    assert "a command line of printable characters on one line" in found["workload.entrypoint"]
