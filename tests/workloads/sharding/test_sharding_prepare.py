"""Ray Train's prepare_model(parallel_strategy="fsdp") on a TPU worker is refused at prepare_model time, naming
what shards a model on TPUs instead; DDP and no strategy pass through to Ray."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray")

from torch import nn

from tpuray.workloads.sharding.prepare import FSDP_ON_TPU
from tpuray.workloads.xla import portable

OWNERS = ("ray.train.torch", "ray.train.v2.torch.train_loop_utils", "ray.train.torch.train_loop_utils")


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    portable.install("CPU")
    yield
    portable.uninstall()


@pytest.mark.parametrize("owner", OWNERS)
def test_fsdp_is_refused_at_prepare_model_time_naming_the_replacement(installed: None, owner: str) -> None:
    prepare: Any = importlib.import_module(owner).prepare_model
    for args, kwargs in (((), {"parallel_strategy": "fsdp"}), ((True, "fsdp"), {})):
        with pytest.raises(ValueError, match="parallel_strategy='fsdp'") as e:
            prepare(nn.Linear(2, 2), *args, **kwargs)
        assert "fsdp_v2" in str(e.value) and "fully_shard" in str(e.value) and "docs/sharding.md" in str(e.value)


def test_other_strategies_reach_ray_and_uninstall_restores_ray_s_own(installed: None) -> None:
    import ray.train.torch

    guarded = ray.train.torch.prepare_model
    with pytest.raises(Exception) as e:  # Ray's own body runs: outside a Ray Train worker it has no context
        guarded(nn.Linear(2, 2), parallel_strategy="ddp")
    assert "parallel_strategy='fsdp'" not in str(e.value)
    portable.install("CPU")  # installing twice does not stack guards
    assert ray.train.torch.prepare_model is guarded
    portable.uninstall()
    assert getattr(ray.train.torch.prepare_model, "__wrapped__", None) is None
    portable.install("CPU")


def test_the_message_names_ray_s_own_refusal() -> None:
    assert "FSDP is only available with GPU-enabled training" in FSDP_ON_TPU
