"""The Ray-private hooks in one place: installed and removed cleanly, and a missing hook named with the Ray version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray")

from tpuray.workloads import _ray_compat, portable


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # XLA on this machine's CPU, as on the emulated slice
    yield
    _ray_compat.uninstall_torch_device_manager()


def test_the_xla_manager_answers_ray_trains_device_lookups(clean: None) -> None:
    import importlib

    import ray.air._internal.device_manager as dm

    loop: Any = importlib.import_module("ray.train.torch.train_loop_utils")
    portable.install("CPU")
    manager = dm.get_torch_device_manager_by_context()  # what get_device()/prepare_model ask, on any worker
    assert type(manager).__name__ == "XlaDeviceManager"
    assert manager.get_devices()[0].type == "xla"
    portable.install("TPU")  # a TPU worker whose PyTorch/XLA found no TPU must not train on the host CPU
    with pytest.raises(RuntimeError, match="PJRT_DEVICE=TPU device but PyTorch/XLA runs on CPU"):
        dm.get_torch_device_manager_by_context().get_devices()
    portable.install("CPU")
    manager = dm.get_torch_device_manager_by_context()
    assert loop.get_torch_device_manager_by_device_type("xla") is manager  # what prepare_data_loader's wrapper asks
    assert type(loop.get_torch_device_manager_by_device_type("cpu")).__name__ == "CPUTorchDeviceManager"
    portable.install("CPU")  # installing twice does not stack wrappers
    assert loop.get_torch_device_manager_by_device_type("cpu").__class__.__name__ == "CPUTorchDeviceManager"
    _ray_compat.uninstall_torch_device_manager()
    assert dm._torch_device_manager is None
    with pytest.raises(RuntimeError, match="xla cannot be recognized"):
        loop.get_torch_device_manager_by_device_type("xla")


def test_the_graph_is_cut_once_per_batch(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's loader wrapper enters the stream context for the batch and again for each tensor in it."""
    import torch_xla

    syncs: list[int] = []
    monkeypatch.setattr(torch_xla, "sync", lambda *a, **k: syncs.append(1))
    portable.install("CPU")
    import ray.air._internal.device_manager as dm

    manager: Any = dm.get_torch_device_manager_by_context()
    with manager.get_stream_context(None):
        with manager.get_stream_context(None):
            pass
        with manager.get_stream_context(None):
            pass
    assert len(syncs) == 1
    with manager.get_stream_context(None):
        pass
    assert len(syncs) == 2


def test_a_missing_hook_is_named_with_the_ray_version(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    import ray.air._internal.device_manager as dm

    monkeypatch.delattr(dm, "_torch_device_manager")
    with pytest.raises(_ray_compat.RayHookMissing, match=rf"Ray {ray.__version__} has no .*_torch_device_manager"):
        portable.install("CPU")


def test_an_untested_ray_version_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "__version__", "9.99.0")
    with pytest.warns(UserWarning, match="tested with Ray 2.60, this is Ray 9.99.0"):
        _ray_compat.require_hooks()
