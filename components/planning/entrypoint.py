"""The training entrypoint the stack's RayJob runs: the contract between the stack config and the train CLI.

Pure Python; imports no Pulumi. A test parses the result with ``tpuray.workloads.train``'s own argument parser.
"""

from __future__ import annotations

import shlex

from tpuray.components.config import SlicePoolConfig, WorkloadConfig

__all__ = ["train_entrypoint"]


def train_entrypoint(workload: WorkloadConfig, pool: SlicePoolConfig, run_name: str, checkpoint_dir: str | None) -> str:
    """``python -m tpuray.workloads.train`` on ``pool``'s slice shape, data-parallel over its slices.

    Only flags that ``tpuray.workloads.train.build_parser`` accepts (a test parses the result with it).
    """
    flags: list[tuple[str, object | None]] = [
        ("--topology", str(pool.tpu_slice)),
        ("--num-slices", pool.slices),
        ("--steps", workload.steps),
        ("--batch-size-per-chip", workload.batch_size_per_chip),
        ("--seq-len", workload.seq_len),
        ("--learning-rate", workload.learning_rate),
        ("--vocab-size", workload.model.vocab_size),
        ("--layers", workload.model.layers),
        ("--d-model", workload.model.d_model),
        ("--heads", workload.model.heads),
        ("--backend", workload.backend),
        ("--dataset", workload.dataset),
        ("--checkpoint-every", workload.checkpoint_every),
        ("--checkpoint-dir", checkpoint_dir),
        ("--run-name", run_name),
    ]
    args = ["python", "-m", "tpuray.workloads.train"]
    for flag, value in flags:
        if value is not None:
            args += [flag, str(value)]
    return shlex.join(args)
