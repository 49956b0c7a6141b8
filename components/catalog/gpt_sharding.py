"""How the entrypoint's GPT (``tpuray.workloads.gpt.model``) is partitioned over a device mesh: every parameter, its
shape and the dimension each sharded axis splits. Pure data, read by the config (the per-chip HBM estimate and the
divisibility rules) and by ``tpuray.workloads.sharding`` (the partition specs and FSDP placements it applies), so
the estimate and what the runtimes hold are one table.

The axes (the mesh's names, outermost first): ``data`` replicates everything (and spans the slices of a multislice
job, over DCN); ``fsdp`` shards every parameter along a dimension that is a multiple of ``d_model`` (ZeRO-3,
https://arxiv.org/abs/1910.02054); ``tensor`` splits attention and the MLP as Megatron-LM does
(https://arxiv.org/abs/1909.08053 section 3): ``qkv`` and ``fc`` by output column, ``proj`` and ``out`` by input
row, so each block needs one reduction forward and one backward. A parameter both axes would split along the same
dimension (the column-parallel biases) is split by ``tensor`` only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AXES",
    "GPT_PARAMETERS",
    "GptDims",
    "ParameterRule",
    "Placement",
    "gpt_parameters",
    "parameter_rule",
]

AXES = ("data", "fsdp", "tensor")
"""The mesh's axis names, outermost first. ``fsdp`` is the name torch_xla's FSDPv2 requires
(torch_xla 2.9 ``experimental/spmd_fully_sharded_data_parallel.py``: "The mesh must have an axis named 'fsdp'")."""

Size = Literal["vocab", "seq", "d", "3d", "4d"]


@dataclass(frozen=True)
class GptDims:
    """The sizes a GPT's parameter shapes are written in."""

    vocab_size: int
    seq_len: int
    d_model: int
    layers: int

    def size(self, s: Size) -> int:
        d = self.d_model
        return {"vocab": self.vocab_size, "seq": self.seq_len, "d": d, "3d": 3 * d, "4d": 4 * d}[s]


@dataclass(frozen=True)
class Placement:
    """Which dimension of one parameter each axis splits (None: that axis replicates it)."""

    fsdp: int | None
    tensor: int | None


@dataclass(frozen=True)
class ParameterRule:
    """One parameter of the GPT (per block when ``per_block``): its name pattern, shape and split dimensions."""

    pattern: str
    """Full match of the name in ``GPT.named_parameters()``."""
    shape: tuple[Size, ...]
    fsdp_dim: int
    """The dimension FSDP splits: always a multiple of ``d_model``, so ``fsdp | dModel`` makes every shard equal."""
    tensor_dim: int | None
    per_block: bool

    def numel(self, dims: GptDims) -> int:
        return math.prod(dims.size(s) for s in self.shape)

    def placement(self, fsdp: int, tensor: int) -> Placement:
        """The dimensions ``fsdp`` and ``tensor`` ways of sharding split (an axis of size 1 splits nothing)."""
        t = self.tensor_dim if tensor > 1 else None
        f = self.fsdp_dim if fsdp > 1 and self.fsdp_dim != t else None
        return Placement(fsdp=f, tensor=t)


_B = r"blocks\.\d+\."
GPT_PARAMETERS: tuple[ParameterRule, ...] = (
    ParameterRule(r"tok\.weight", ("vocab", "d"), 1, None, per_block=False),
    ParameterRule(r"pos\.weight", ("seq", "d"), 1, None, per_block=False),
    ParameterRule(_B + r"ln1\.weight", ("d",), 0, None, per_block=True),
    ParameterRule(_B + r"ln1\.bias", ("d",), 0, None, per_block=True),
    ParameterRule(_B + r"qkv\.weight", ("3d", "d"), 1, 0, per_block=True),
    ParameterRule(_B + r"qkv\.bias", ("3d",), 0, 0, per_block=True),
    ParameterRule(_B + r"proj\.weight", ("d", "d"), 0, 1, per_block=True),
    ParameterRule(_B + r"proj\.bias", ("d",), 0, None, per_block=True),
    ParameterRule(_B + r"ln2\.weight", ("d",), 0, None, per_block=True),
    ParameterRule(_B + r"ln2\.bias", ("d",), 0, None, per_block=True),
    ParameterRule(_B + r"fc\.weight", ("4d", "d"), 1, 0, per_block=True),
    ParameterRule(_B + r"fc\.bias", ("4d",), 0, 0, per_block=True),
    ParameterRule(_B + r"out\.weight", ("d", "4d"), 0, 1, per_block=True),
    ParameterRule(_B + r"out\.bias", ("d",), 0, None, per_block=True),
    ParameterRule(r"ln_f\.weight", ("d",), 0, None, per_block=False),
    ParameterRule(r"ln_f\.bias", ("d",), 0, None, per_block=False),
)
"""Every parameter of the GPT, one row per tensor, each naming its own (a LayerNorm's weight and bias are two rows). The
output head is tied to ``tok.weight`` and has no row of its own."""


def gpt_parameters(dims: GptDims) -> int:
    """Every parameter of the GPT, summed over :data:`GPT_PARAMETERS` (the block rows once per layer): the one
    count the config's HBM rule and the workloads' FLOPs and summaries read."""
    return sum(r.numel(dims) * (dims.layers if r.per_block else 1) for r in GPT_PARAMETERS)


def parameter_rule(name: str) -> ParameterRule:
    """The row of parameter ``name``; a name no row matches is an error (a model this table does not describe)."""
    for rule in GPT_PARAMETERS:
        if re.fullmatch(rule.pattern, name):
            return rule
    raise KeyError(f"{name!r} is no parameter of tpuray's GPT; the sharding table knows {len(GPT_PARAMETERS)} kinds")
