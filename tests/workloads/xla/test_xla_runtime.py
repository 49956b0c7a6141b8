"""PyTorch/XLA's runtime collectives on the emulated slice's gloo path, without a process group: the all-reduce is
stood in for by one that sums as two workers holding the same values would."""

from __future__ import annotations

import pytest
import torch

from tpuray.workloads import ChipInfo
from tpuray.workloads.xla.runtime import XlaRuntime


def _runtime() -> XlaRuntime:
    info = ChipInfo(
        rank=0, world_size=2, chip=0, worker_id=0, slice_index=0, num_slices=1, slice_name="s", collective="gloo"
    )
    return XlaRuntime(info)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_mean_over_chips_leaves_the_callers_tensor_alone(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """A float64 CPU tensor is the one ``.to(float64).cpu()`` returns as is; gloo sums in place."""

    def all_reduce(t: torch.Tensor) -> None:
        t.mul_(2)

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    values = torch.tensor([1.0, 3.0], dtype=getattr(torch, dtype))
    got = _runtime().mean(values)
    assert got.tolist() == [1.0, 3.0] and got.dtype == torch.float64
    assert values.tolist() == [1.0, 3.0]
