"""A small GPT-style decoder language model (pre-LayerNorm, causal self-attention, GELU MLP, tied head).

Its parameter count is :attr:`tpuray.workloads.gpt.metrics.ModelShape.params`; the tests check they agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tpuray.workloads.gpt.metrics import ModelShape

__all__ = ["GPT", "next_token_loss"]


class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return out


class GPT(nn.Module):
    """Decoder LM over token ids ``[batch, seq]`` -> logits ``[batch, seq, vocab]``."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        self.tok = nn.Embedding(shape.vocab_size, shape.d_model)
        self.pos = nn.Embedding(shape.seq_len, shape.d_model)
        self.blocks = nn.ModuleList(_Block(shape.d_model, shape.heads) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        # GPT-2 style small init keeps the initial loss near ln(vocab), which the tests rely on.
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.ln_f(x) @ self.tok.weight.t()
        return logits

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy (nats) of ``tokens`` ``[batch, seq + 1]``."""
        return next_token_loss(self, tokens)


def next_token_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy (nats) of ``tokens`` ``[batch, seq + 1]`` through ``model``'s own forward: a
    :class:`GPT`, or a wrapper of one such as ``prepare_model``'s DDP, whose gradient hooks then run."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
