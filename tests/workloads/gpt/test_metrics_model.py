"""Model FLOPs/MFU arithmetic and the GPT it describes."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.topology import GENERATIONS, TpuSlice, generation
from tpuray.workloads.gpt.metrics import ModelShape, mfu, speed_metrics, throughput
from tpuray.workloads.gpt.model import GPT

shapes = st.builds(
    lambda v, layers, heads, hd, s: ModelShape(v, layers, heads * hd, heads, s),
    st.integers(2, 300),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(2, 16),
    st.integers(2, 40),
)


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(shapes)
def test_parameter_count_matches_the_torch_model(shape: ModelShape) -> None:
    model = GPT(shape)
    assert sum(p.numel() for p in model.parameters()) == shape.params


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(shapes)
def test_matmul_params_match_the_linear_layers_and_tied_head(shape: ModelShape) -> None:
    model = GPT(shape)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert shape.matmul_params == linear + model.tok.weight.numel()
    assert shape.train_flops_per_token == 6 * shape.matmul_params + 12 * shape.layers * shape.d_model * shape.seq_len


def test_forward_shapes_and_initial_loss_near_uniform() -> None:
    shape = ModelShape(vocab_size=97, layers=2, d_model=32, heads=4, seq_len=16)
    torch.manual_seed(0)
    tokens = torch.randint(0, shape.vocab_size, (3, shape.seq_len + 1))
    model = GPT(shape)
    assert model(tokens[:, :-1]).shape == (3, shape.seq_len, shape.vocab_size)
    assert model.loss(tokens).item() == pytest.approx(math.log(shape.vocab_size), rel=0.05)


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(st.sampled_from([g.name for g in GENERATIONS]), st.integers(1, 64), st.floats(1e-4, 10.0))
def test_mfu_uses_the_catalog_peak(gen: str, chips: int, seconds: float) -> None:
    s = TpuSlice.parse(gen, "2x2" if generation(gen).ndims == 2 else "2x2x1")
    shape = ModelShape(256, 2, 64, 4, 64)
    t = throughput(shape, s, chips, 8, seconds)
    assert t.tokens_per_s == pytest.approx(chips * 8 * 64 / seconds)
    assert t.tokens_per_s_per_chip * chips == pytest.approx(t.tokens_per_s)
    assert t.model_tflops_per_s == pytest.approx(t.tokens_per_s * shape.train_flops_per_token / 1e12)
    assert t.mfu == pytest.approx(t.model_tflops_per_s / (chips * s.spec.peak_bf16_tflops_per_chip))
    assert mfu(2 * t.model_tflops_per_s * 1e12, s, chips) == pytest.approx(2 * t.mfu)
    half = throughput(shape, s, chips, 8, 2 * seconds)
    assert half.mfu == pytest.approx(t.mfu / 2)


def test_throughput_rejects_nonsense() -> None:
    s = TpuSlice.parse("v5e", "2x2")
    with pytest.raises(ValueError):
        throughput(ModelShape(8, 1, 8, 1, 4), s, 4, 1, 0.0)


def test_a_job_reports_mfu_only_from_real_chips() -> None:
    """Both GPT loops (data-parallel and SPMD) report their speed through speed_metrics: MFU against a v5p's peak
    only where the chips are real, never from an emulated chip's host CPU."""
    s, shape = TpuSlice.parse("v5p", "2x2x1"), ModelShape(256, 2, 64, 4, 64)
    speed = {"step_time_s": 0.5, "tokens_per_s": 4 * 8 * 64 / 0.5}
    real = speed_metrics(shape, s, 4, 8, 0.5, real_chips=True)
    assert real == speed | {"mfu": throughput(shape, s, 4, 8, 0.5).mfu}
    assert 0 < real["mfu"] < 1
    assert speed_metrics(shape, s, 4, 8, 0.5, real_chips=False) == speed
