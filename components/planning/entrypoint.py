"""The training entrypoint the stack's RayJob runs: the contract between the stack config and the train CLI.

Pure Python; imports no Pulumi. The workload settings cross as data: one ``--workload`` JSON value, the
:class:`WorkloadConfig` by alias as the stack file spells it, which the trainer validates with the same model (its
other flags override it). Only the slice the job runs on and where its checkpoints go are flags of their own. A test
parses the result with ``tpuray.workloads.train``'s own argument parser.
"""

from __future__ import annotations

import shlex

from tpuray.components.config import SlicePoolConfig, WorkloadConfig
from tpuray.components.config.workload import BUILTIN_ENTRYPOINT

__all__ = ["train_entrypoint"]


def train_entrypoint(workload: WorkloadConfig, pool: SlicePoolConfig, run_name: str, checkpoint_dir: str | None) -> str:
    """``python -m tpuray.workloads.train`` on ``pool``'s slice shape: data parallel over its slices, or sharded as
    ``workload.parallelism`` asks (the trainer runs that on one host and refuses what it cannot run, and config
    check refuses the same first); or the user's own command, ``workload.entrypoint``, as given."""
    if workload.entrypoint is not None:
        return workload.entrypoint
    args = [
        *shlex.split(BUILTIN_ENTRYPOINT),
        "--topology",
        str(pool.tpu_slice),
        "--num-slices",
        str(pool.slices),
    ]
    # data parallel (the default) is left out, so a stack that says nothing of parallelism keeps the entrypoint,
    # and its live RayJob, byte for byte
    unsharded = workload.parallelism == type(workload.parallelism)()
    dumped = workload.model_dump_json(by_alias=True, exclude_none=True, exclude={"parallelism"} if unsharded else None)
    args += ["--workload", dumped]
    if checkpoint_dir is not None:
        args += ["--checkpoint-dir", checkpoint_dir]
    args += ["--run-name", run_name]
    return shlex.join(args)
