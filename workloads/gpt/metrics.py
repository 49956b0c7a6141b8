"""Model FLOPs, throughput and MFU: pure arithmetic, no torch.

FLOP counts follow the PaLM paper (appendix B): a training step costs ``6 * N`` FLOPs per token for the
``N`` weights that take part in a matrix multiply (forward 2N, backward 4N), plus ``12 * layers * d_model *
seq_len`` per token for the attention scores and their weighted sum. Embedding look-ups and position
embeddings are not matmuls and are left out; the tied output projection (``vocab x d_model``) is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuray.components.catalog.gpt_sharding import GptDims, gpt_parameters
from tpuray.components.catalog.topology import TpuSlice

__all__ = ["ModelShape", "Throughput", "mfu", "speed_metrics", "throughput"]


@dataclass(frozen=True)
class ModelShape:
    """The sizes of the GPT-style decoder (see :mod:`tpuray.workloads.gpt.model`)."""

    vocab_size: int
    layers: int
    d_model: int
    heads: int
    seq_len: int

    @property
    def params(self) -> int:
        """Every parameter of the model (token and position embeddings, blocks, final LayerNorm; head tied), from
        the one table of its tensors (:func:`~tpuray.components.catalog.gpt_sharding.gpt_parameters`)."""
        return gpt_parameters(GptDims(self.vocab_size, self.seq_len, self.d_model, self.layers))

    @property
    def matmul_params(self) -> int:
        """Weights used in matrix multiplies: the blocks' projection matrices and the tied output head."""
        d = self.d_model
        return self.layers * 12 * d * d + self.vocab_size * d

    @property
    def train_flops_per_token(self) -> int:
        """FLOPs of one training step (forward + backward) per token."""
        return 6 * self.matmul_params + 12 * self.layers * self.d_model * self.seq_len


@dataclass(frozen=True)
class Throughput:
    """Throughput of one measured stretch of training."""

    step_time_s: float
    """Mean wall time per optimizer step, seconds."""
    tokens_per_s: float
    """Tokens per second over all chips."""
    tokens_per_s_per_chip: float
    model_tflops_per_s: float
    """Achieved model TFLOP/s over all chips (10^12 FLOP/s)."""
    mfu: float
    """Model FLOPs utilisation: achieved / peak, a fraction in [0, 1] on real hardware."""


def throughput(
    shape: ModelShape, tpu_slice: TpuSlice, chips: int, batch_per_chip: float, step_time_s: float
) -> Throughput:
    """Throughput of ``chips`` chips of ``tpu_slice``'s generation, each doing ``batch_per_chip`` sequences a step
    (a fraction where an elastic job's global batch is split unevenly over fewer chips)."""
    if step_time_s <= 0 or chips <= 0:
        raise ValueError(f"need a positive step time and chip count, got {step_time_s} s and {chips} chips")
    tokens = chips * batch_per_chip * shape.seq_len / step_time_s
    flops = tokens * shape.train_flops_per_token
    return Throughput(
        step_time_s=step_time_s,
        tokens_per_s=tokens,
        tokens_per_s_per_chip=tokens / chips,
        model_tflops_per_s=flops / 1e12,
        mfu=mfu(flops, tpu_slice, chips),
    )


def mfu(flops_per_s: float, tpu_slice: TpuSlice, chips: int) -> float:
    """Achieved FLOP/s over the peak dense bf16 FLOP/s of ``chips`` chips (the catalog's per-chip peak)."""
    return flops_per_s / (chips * tpu_slice.spec.peak_bf16_tflops_per_chip * 1e12)


def speed_metrics(
    shape: ModelShape, tpu_slice: TpuSlice, chips: int, batch_per_chip: float, step_time_s: float, real_chips: bool
) -> dict[str, float]:
    """What a GPT job reports of its speed (``step_time_s``, ``tokens_per_s`` over all chips) and, on real chips
    only, ``mfu``: XLA on a host CPU measured against a TPU's peak would be a number that means nothing."""
    t = throughput(shape, tpu_slice, chips, batch_per_chip, step_time_s)
    out = {"step_time_s": step_time_s, "tokens_per_s": t.tokens_per_s}
    return out | {"mfu": t.mfu} if real_chips else out
