"""The framework guards of :mod:`tpuray.workloads.frameworks`, in this process (no cluster): the fused optimizer
refused on an XLA tensor only, Lightning's ``prepare_trainer`` refused on an XLA device only, each hook removed by
``uninstall``, and a guard on a module that is not yet imported runs as it is first imported."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch_xla")

from tpuray.workloads import frameworks


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


def _fake_lightning_utils() -> ModuleType:
    utils = ModuleType("fake_lightning_utils")
    utils.prepare_trainer = lambda trainer: ("prepared", trainer)  # type: ignore[attr-defined]
    return utils


def test_lightning_prepare_trainer_is_refused_on_an_xla_device_only(clean: None) -> None:
    import torch

    utils = _fake_lightning_utils()
    original = utils.prepare_trainer
    frameworks._guard_lightning(utils)
    with pytest.raises(RuntimeError) as e:
        utils.prepare_trainer(SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("xla:0"))))
    assert str(e.value).startswith("ray.train.lightning.prepare_trainer: PyTorch Lightning ")
    assert "cannot train on this worker's XLA chip (xla:0)" in str(e.value)
    on_cpu: Any = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    assert utils.prepare_trainer(on_cpu) == ("prepared", on_cpu)
    frameworks.uninstall()
    assert utils.prepare_trainer is original


def test_a_guard_runs_as_its_module_is_first_imported(
    clean: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tpuray_fake_framework.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    frameworks._after_import("tpuray_fake_framework", lambda m: seen.append(m.VALUE))
    assert seen == []  # nothing is imported ahead of use
    module: Any = importlib.import_module("tpuray_fake_framework")
    try:
        assert seen == [1] and module.VALUE == 1
        frameworks._after_import("tpuray_fake_framework", lambda m: seen.append(m.VALUE + 1))  # already imported
        assert seen == [1, 2]
    finally:
        sys.modules.pop("tpuray_fake_framework", None)
