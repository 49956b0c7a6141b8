"""workload.parallelism: FSDP and tensor degrees validated against the model and the slice, and the HBM rule per
chip on the sharded training state."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.stacks import minimal_values, problems_by_path
from tpuray.components.catalog.gpt_sharding import GptDims
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import parse_stack_config
from tpuray.components.config.workload import (
    TRAIN_BYTES_PER_PARAMETER,
    WorkloadConfig,
    training_state_bytes_per_device,
)

PROD_MODEL = {"dModel": 2048, "layers": 24, "heads": 16, "vocabSize": 32000}
"""1.28e9 parameters: 19.0 GiB of training state, more than a v5e chip's 16 GiB."""
V5E = {"name": "small", "generation": "v5e", "topology": "2x2", "zone": "us-east5-a"}


def _v5e_stack(**parallelism: int) -> dict[str, Any]:
    workload = {"model": PROD_MODEL, "seqLen": 2048, "parallelism": parallelism}
    return minimal_values(slicePools=[V5E], workload=workload, region="us-east5", zone="us-east5-a")


def test_a_model_that_needs_fsdp_to_fit_is_refused_without_it_and_accepted_with_it() -> None:
    found = problems_by_path(_v5e_stack())
    assert found["workload.model"].startswith("does not fit: needs 19.0 GiB per chip, a v5e chip has 16 GiB"), found
    assert "workload.parallelism.fsdp" in found["workload.model"]
    cfg = parse_stack_config(_v5e_stack(fsdp=4))
    per_chip = cfg.workload.training_state_bytes_per_chip(cfg.workload_pool().tpu_slice)
    assert per_chip * 4 == cfg.workload.training_state_bytes  # FSDP shards every parameter
    assert f"{per_chip / 2**30:.2f}" == "4.76"
    parse_stack_config(_v5e_stack(fsdp=2, tensor=2))  # 2-D: the replicated embeddings and norms still fit


def test_a_model_too_big_even_sharded_is_refused_with_the_per_chip_figure() -> None:
    # 480.1 GiB of state over the 4 chips of a v5p 2x2x1: 120.0 GiB each, more than 95
    values = minimal_values(
        slicePools=[{"name": "res", "generation": "v5p", "topology": "2x2x1"}],
        workload={"model": {"dModel": 8192, "layers": 40, "heads": 16}, "parallelism": {"fsdp": 4}},
    )
    message = problems_by_path(values)["workload.model"]
    assert message.startswith("does not fit: needs 120.0 GiB per chip, a v5p chip has 95 GiB"), message
    assert "fsdp=4 x tensor=1" in message


@pytest.mark.parametrize(
    ("parallelism", "field", "words"),
    [
        ({"tensor": 3}, "workload.parallelism.tensor", "does not divide model.heads=16"),
        ({"fsdp": 3}, "workload.parallelism.fsdp", "does not divide model.dModel=2048"),
        ({"fsdp": 8}, "workload.parallelism", "= 8 does not divide the 4 chips"),
        ({"fsdp": 2, "tensor": 4}, "workload.parallelism", "2 x 4 = 8 does not divide the 4 chips"),
        ({"fsdp": 0}, "workload.parallelism.fsdp", "greater than or equal to 1"),
    ],
)
def test_degrees_that_do_not_tile_the_model_or_the_slice_are_refused(
    parallelism: dict[str, int], field: str, words: str
) -> None:
    found = problems_by_path(_v5e_stack(**parallelism))
    assert words in found[field], found
    assert "valid" in found[field] or "greater" in found[field]


def test_torch_tpu_counts_the_two_devices_of_a_tpu7x_chip() -> None:
    s = TpuSlice.parse("tpu7x:2x2x1")
    w = WorkloadConfig.model_validate({"backend": "torch_tpu", "parallelism": {"fsdp": 8}})
    assert w.mesh_devices_per_chip(s) == 2 and s.devices == 8
    assert w.training_state_bytes_per_chip(s) == 2 * training_state_bytes_per_device(w.gpt_dims, 8, 1)
    xla = WorkloadConfig.model_validate({"parallelism": {"fsdp": 4}})
    assert xla.training_state_bytes_per_chip(s) == xla.training_state_bytes // 4


@settings(max_examples=80, deadline=None)
@given(
    vocab=st.integers(2, 100_000),
    seq=st.integers(2, 4096),
    layers=st.integers(1, 48),
    heads_log=st.integers(0, 5),
    head_dim=st.sampled_from([8, 16, 64, 128]),
    fsdp_log=st.integers(0, 6),
    tensor_log=st.integers(0, 5),
)
def test_the_per_device_share_divides_what_each_axis_splits(
    vocab: int, seq: int, layers: int, heads_log: int, head_dim: int, fsdp_log: int, tensor_log: int
) -> None:
    heads = 2**heads_log
    d = heads * head_dim
    fsdp, tensor = 2 ** min(fsdp_log, (d & -d).bit_length() - 1), 2 ** min(tensor_log, heads_log)
    w = WorkloadConfig.model_validate(
        {"seqLen": seq, "model": {"vocabSize": vocab, "layers": layers, "dModel": d, "heads": heads}}
    )
    dims = GptDims(vocab, seq, d, layers)
    total = w.model_parameters * TRAIN_BYTES_PER_PARAMETER
    assert training_state_bytes_per_device(dims) == total
    assert training_state_bytes_per_device(dims, fsdp, 1) * fsdp == total  # FSDP splits every parameter
    both = training_state_bytes_per_device(dims, fsdp, tensor)
    assert total // (fsdp * tensor) <= both <= total  # what an axis leaves whole stays replicated
    if tensor > 1:
        # tensor splits the four matrices of each block (12 d^2) and two biases (7 d), nothing else
        replicated = vocab * d + seq * d + layers * 6 * d + 2 * d
        assert training_state_bytes_per_device(dims, 1, tensor) == TRAIN_BYTES_PER_PARAMETER * (
            replicated + layers * (12 * d * d + 7 * d) // tensor
        )


def test_plan_prints_the_per_chip_state_and_headroom_of_every_pool() -> None:
    from types import SimpleNamespace
    from typing import cast

    from tpuray.components.review.plan import Plan, training_state_lines

    cfg = parse_stack_config(_v5e_stack(fsdp=4))
    pools = [SimpleNamespace(name=n, tpu_slice=TpuSlice.parse(s)) for n, s in (("small", "v5e:2x2"), ("x", "v5e:1x1"))]
    lines = training_state_lines(cast(Plan, SimpleNamespace(config=cfg, pools=pools)))
    assert lines == [
        "training state per chip (1,278,332,928 parameters, fsdp=4 x tensor=1):",
        "- small: 4.76 GiB of 16 GiB HBM, 11.24 GiB headroom before activations",
        "- x: fsdp x tensor = 4 does not tile a 1x1 slice",
    ]
