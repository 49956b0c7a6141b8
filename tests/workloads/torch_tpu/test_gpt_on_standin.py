"""The built-in GPT job on TorchTPU's stand-in, on the shared emulated cluster's v5e 2x2 slice (4 devices): data
parallel and sharded (FSDP2 x tensor parallelism over the slice) train the same losses on the same data, the
sharded run reports its mesh and what one device holds, and after a worker is SIGKILLed it resumes from its DCP
checkpoint to the losses of the run that was never broken."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.workload import training_state_bytes_per_device
from tpuray.workloads.signals.drain import CheckpointSignal

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SLICE = TpuSlice.parse("v5e:2x2")
FSDP, TENSOR = 2, 2
STEPS, EVERY, KILL_AT = 8, 4, 6


class KillRankOne(CheckpointSignal):
    """The loop's out-of-turn signal, with a SIGKILL of rank 1's process at step :data:`KILL_AT` of a run that did
    not resume (its first attempt): a worker lost after the step-:data:`EVERY` checkpoint."""

    first_attempt = False

    def __call__(self, step: int) -> bool:
        import torch.distributed as dist

        if step == KILL_AT and dist.get_rank() == 1 and self.first_attempt:
            ray.train.get_all_reported_checkpoints()  # returns once Ray Train holds the step-EVERY checkpoint
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(step)


def train_killed(config: dict[str, Any]) -> None:
    from tpuray.workloads.gpt import fsdp2_loop

    KillRankOne.first_attempt = ray.train.get_checkpoint() is None  # at the start: later it is the last report
    vars(fsdp2_loop)["CheckpointSignal"] = KillRankOne  # this worker process's loop only
    fsdp2_loop.train_gpt_fsdp2(config)


def _fit(train_fn: Any, config: dict[str, Any], tmp_path: Path, name: str, failures: int = 0) -> Any:
    from ray.train import FailureConfig, RunConfig

    from tpuray.workloads.launch import trainer

    rc = RunConfig(name=name, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=failures))
    result = trainer(train_fn, config, SLICE, 1, rc, backend="torch_tpu").fit()
    assert result.error is None, result.error
    return result


def test_the_gpt_job_trains_data_parallel_and_sharded_alike_and_resumes_sharded_after_a_sigkill(
    emulated_slices: None, tmp_path: Path
) -> None:
    from tpuray.workloads.gpt.cli import _summary
    from tpuray.workloads.gpt.fsdp2_loop import train_gpt_fsdp2
    from tpuray.workloads.gpt.loop import GptJob, train_gpt
    from tpuray.workloads.gpt.metrics import ModelShape

    shape = ModelShape(vocab_size=64, layers=1, d_model=16, heads=4, seq_len=8)
    job = GptJob(shape, STEPS, 2, 1e-2, EVERY, str(SLICE), bf16=False, log_every=EVERY, cpu_threads=1)
    sharded = {"job": job, "fsdp": FSDP, "tensor": TENSOR, "num_slices": 1}

    plain = _fit(train_gpt, {"job": job}, tmp_path, "dp").metrics
    assert plain["param_spread"] < 1e-12
    result = _fit(train_gpt_fsdp2, sharded, tmp_path, "sharded")
    summary = _summary(result, job, SLICE, 1, "torch_tpu", True, 1.0)
    assert summary["backend"] == "torch_tpu" and summary["params_identical"] is True
    assert summary["mesh"] == {"data": 1, "fsdp": FSDP, "tensor": TENSOR}
    share = training_state_bytes_per_device(GptDims(vocab_size=64, seq_len=8, d_model=16, layers=1), FSDP, TENSOR)
    assert summary["bytes_per_device"] == {"parameters": share // 4, "optimizer": share // 2}
    losses = result.metrics["losses"]
    # the same data, the same AdamW: sharding changes where the numbers live, not the training
    assert losses == pytest.approx(plain["losses"], rel=1e-4) and losses[-1] < losses[0]

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import the tests
    killed = _fit(train_killed, sharded, tmp_path, "killed", failures=1).metrics
    assert killed["resumes"] == [EVERY]  # from the DCP checkpoint before the SIGKILL
    assert killed["losses"] == pytest.approx(losses, rel=1e-5)  # as if never broken
