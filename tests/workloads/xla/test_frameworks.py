"""The framework guards of :mod:`tpuray.workloads.xla.frameworks`, in this process (no cluster): the fused optimizer
refused on an XLA tensor only; Lightning through ``ray.train.lightning`` given the chip's accelerator on an XLA device
only, and ``prepare_trainer`` refusing what cannot run there (the run itself:
``test_lightning_on_emulated_slice.py``); each hook removed by ``uninstall``; and a guard on a module that is not yet
imported runs as it is first imported."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch_xla")

from tpuray.workloads.xla import frameworks


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # XLA on this machine's CPU, as on the emulated slice
    yield
    frameworks.uninstall()


def test_a_fused_optimizer_on_an_xla_tensor_is_refused_naming_the_alternative(clean: None) -> None:
    import torch
    import torch_xla

    on_chip = torch.nn.Parameter(torch.zeros(2, device=torch_xla.device()))
    init = torch.optim.AdamW.__init__
    frameworks._guard_fused_optimizers()
    for name in ("Adam", "AdamW", "SGD"):
        with pytest.raises(RuntimeError) as e:
            getattr(torch.optim, name)([{"params": iter([on_chip])}], lr=0.1, fused=True)
        assert str(e.value) == frameworks.FUSED_OPTIMIZER_REFUSAL.format(name=f"torch.optim.{name}")
    assert 'TrainingArguments(optim="adamw_torch")' in frameworks.FUSED_OPTIMIZER_REFUSAL
    torch.optim.AdamW([on_chip], lr=0.1)  # unfused on the chip, and fused on the host, as before
    fused = torch.optim.AdamW([{"params": iter([torch.nn.Parameter(torch.zeros(2))])}], lr=0.1, fused=True)
    assert fused.defaults["fused"] and len(fused.param_groups[0]["params"]) == 1  # the iterator reached it whole
    frameworks.uninstall()
    assert torch.optim.AdamW.__init__ is init


@pytest.fixture
def lightning_on_a_chip(clean: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Ray's ``ray.train.lightning`` as on a Ray Train worker of one chip (this process's XLA device, a world of
    one), set up as :func:`frameworks.install` sets it up; yields Ray's module."""
    pytest.importorskip("lightning")
    import ray.train
    import ray.train.torch
    import torch_xla

    utils = importlib.import_module(frameworks.LIGHTNING_UTILS)
    monkeypatch.setattr(ray.train.torch, "get_device", torch_xla.device)
    context = SimpleNamespace(
        get_world_size=lambda: 1, get_world_rank=lambda: 0, get_local_rank=lambda: 0, get_node_rank=lambda: 0
    )
    monkeypatch.setattr(ray.train, "get_context", lambda: context)
    frameworks._adapt_lightning(utils)
    yield utils


def _trainer(utils: ModuleType, **kwargs: Any) -> Any:
    import lightning.pytorch as pl

    kwargs.setdefault("strategy", utils.RayDDPStrategy())
    return pl.Trainer(devices="auto", plugins=[utils.RayLightningEnvironment()], logger=False, **kwargs)


def test_lightning_takes_the_chip_for_rays_strategy_on_an_xla_device(lightning_on_a_chip: ModuleType) -> None:
    from lightning.pytorch.accelerators import CPUAccelerator

    from tpuray.workloads.xla import lightning as lightning_xla

    utils = lightning_on_a_chip
    prepare = utils.prepare_trainer
    for flag in ("auto", "tpu"):
        trainer = _trainer(utils, accelerator=flag)
        assert type(trainer.accelerator).__name__ == "XlaChipAccelerator", flag
        assert [str(d) for d in trainer.strategy.parallel_devices] == ["xla:0"]
        assert prepare(trainer) is trainer
    on_cpu = _trainer(utils, accelerator="cpu")  # asked for by name: left to the script, and refused before fit
    assert isinstance(on_cpu.accelerator, CPUAccelerator)
    with pytest.raises(RuntimeError) as e:
        prepare(on_cpu)
    assert str(e.value) == lightning_xla.ACCELERATOR_REFUSAL.format(accelerator="CPUAccelerator", device="xla:0")
    assert "accelerator='auto'" in str(e.value)
    frameworks.uninstall()
    assert isinstance(_trainer(utils, accelerator="auto").accelerator, CPUAccelerator)  # Lightning's own choice
    assert utils.prepare_trainer is not prepare


def test_bf16_mixed_precision_autocasts_on_the_chip(lightning_on_a_chip: ModuleType) -> None:
    import torch
    import torch_xla

    trainer = _trainer(lightning_on_a_chip, accelerator="auto", precision="bf16-mixed")
    layer = torch.nn.Linear(4, 2).to(torch_xla.device())
    with trainer.precision_plugin.forward_context():
        out = layer(torch.ones(3, 4, device=torch_xla.device()))
    assert (trainer.precision_plugin.device, out.dtype) == ("xla", torch.bfloat16)


def test_rays_fsdp_strategy_on_an_xla_device_is_refused_naming_the_one_that_runs(
    lightning_on_a_chip: ModuleType,
) -> None:
    from tpuray.workloads.xla import lightning as lightning_xla

    utils = lightning_on_a_chip
    trainer = _trainer(utils, accelerator="auto", strategy=utils.RayFSDPStrategy())
    with pytest.raises(RuntimeError) as e:
        utils.prepare_trainer(trainer)
    assert str(e.value) == lightning_xla.STRATEGY_REFUSAL.format(strategy="RayFSDPStrategy", device="xla:0")


def test_off_the_chip_lightning_and_prepare_trainer_are_rays_own(
    lightning_on_a_chip: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray.train.torch
    import torch
    from lightning.pytorch.accelerators import CPUAccelerator

    utils = lightning_on_a_chip
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    trainer = _trainer(utils, accelerator="auto")
    assert isinstance(trainer.accelerator, CPUAccelerator)
    assert utils.prepare_trainer(trainer) is trainer
