"""The TorchTPU backend's configuration and env (torch_tpu and TPUs are not available here)."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.topology import TpuSlice
from tpuray.workloads import torch_tpu
from tpuray.workloads.torch_tpu import TorchTpuConfig, scaling_config_kwargs, torch_tpu_env


@pytest.mark.parametrize("spec", ["v5e:2x2", "v6e:4x4", "v4:2x2x2", "tpu7x:2x2x4", "v5e:2x4:ct5lp-hightpu-4t"])
def test_env_from_slice_and_webhook_hostnames(spec: str) -> None:
    s = TpuSlice.parse(spec)
    hosts = [f"h{w}" for w in range(s.hosts)] if s.multi_host else []
    env = torch_tpu_env(s, hosts, port=1234)
    assert env["TORCH_TPU_TOPOLOGY"] == "x".join(map(str, s.dims))
    addrs = env["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    assert addrs == ([f"{h}:1234" for h in hosts] if s.multi_host else ["localhost:1234"])


def test_env_needs_every_host() -> None:
    with pytest.raises(ValueError, match="hostnames"):
        torch_tpu_env(TpuSlice.parse("v6e:4x4"), ["only-one"])


def test_fill_env_keeps_what_is_already_set() -> None:
    s = TpuSlice.parse("v6e:4x4")
    env = {"TPU_WORKER_HOSTNAMES": ",".join(f"h{w}" for w in range(s.hosts)), "TORCH_TPU_TOPOLOGY": "preset"}
    filled = torch_tpu._fill_env(str(s), env)
    assert "TORCH_TPU_TOPOLOGY" not in filled
    assert filled["TORCH_TPU_SLICEBUILDER_ADDRESSES"].startswith("h0:")


@pytest.mark.parametrize("spec,n", [("v6e:4x4", 1), ("v5p:2x2x4", 2), ("v5e:2x2", 1)])
def test_ray_train_accepts_the_scaling_config(spec: str, n: int) -> None:
    from ray.train import ScalingConfig

    s = TpuSlice.parse(spec)
    kwargs = scaling_config_kwargs(s, n)
    cfg = ScalingConfig(**kwargs)  # Ray validates use_tpu/topology/accelerator_type here
    assert cfg.num_workers == s.hosts * n
    assert (cfg.use_tpu, cfg.topology) == (True, s.topology)  # type: ignore[attr-defined]
    assert cfg.accelerator_type == s.ray_accelerator_type
    assert kwargs["resources_per_worker"]["TPU"] == s.chips_per_host


def test_backend_fills_env_before_ray_creates_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.train.torch.config import _TorchBackend

    calls: list[str] = []
    monkeypatch.setattr(_TorchBackend, "on_start", lambda self, wg, cfg: calls.append("process_group"))

    class FakeWorkerGroup:
        def execute(self, fn: Any, *args: Any) -> None:
            calls.append(f"{fn.__name__}{args}")

    s = TpuSlice.parse("v6e:2x2")
    cfg = TorchTpuConfig(s)
    assert cfg.backend == "tpu_dist"
    cfg.backend_cls().on_start(FakeWorkerGroup(), cfg)
    assert calls == [f"_fill_env{(str(s),)}", "process_group"]
