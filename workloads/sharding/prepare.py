"""What ``prepare_model(parallel_strategy=...)`` may ask of a TPU worker: Ray's ``"fsdp"`` is refused there, by a
message naming what shards a model on TPUs instead."""

from __future__ import annotations

__all__ = ["FSDP_ON_TPU", "check_parallel_strategy"]

FSDP_ON_TPU = (
    "prepare_model(parallel_strategy='fsdp') on a TPU worker: Ray Train's FSDP wraps the model in FSDP1 for CUDA "
    "(Ray 2.60 ray/train/v2/torch/train_loop_utils.py raises 'FSDP is only available with GPU-enabled training' "
    "without one, and wraps nothing on one worker), which does not run on TPU chips. Shard with PyTorch/XLA SPMD "
    "instead: tpuray.workloads.sharding.spmd_mesh, then fsdp_v2(model) (torch_xla's FSDPv2; Hugging Face's "
    "xla_fsdp_v2 through tpuray.workloads.sharding.hf.XlaFsdpV2Trainer), one worker per host "
    "(spmd_scaling_config); or, on TorchTPU, torch.distributed.fsdp.fully_shard (FSDP2; "
    "tpuray.workloads.sharding.fsdp2). Keep prepare_model for DDP (parallel_strategy='ddp') or "
    "parallel_strategy=None. See docs/sharding.md"
)


def check_parallel_strategy(strategy: str | None) -> None:
    """Raise ``ValueError`` for a ``parallel_strategy`` a TPU worker cannot run (``"fsdp"``)."""
    if strategy == "fsdp":
        raise ValueError(FSDP_ON_TPU)
