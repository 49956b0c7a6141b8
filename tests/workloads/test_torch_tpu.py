"""The TorchTPU backend's configuration and env (torch_tpu and TPUs are not available here)."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.topology import TpuSlice
from tpuray.workloads import torch_tpu
from tpuray.workloads.torch_tpu import TorchTpuConfig


def test_fill_env_keeps_what_is_already_set() -> None:
    s = TpuSlice.parse("v6e:4x4")
    env = {"TPU_WORKER_HOSTNAMES": ",".join(f"h{w}" for w in range(s.hosts)), "TORCH_TPU_TOPOLOGY": "preset"}
    filled = torch_tpu._fill_env(str(s), env)
    assert "TORCH_TPU_TOPOLOGY" not in filled
    assert filled["TORCH_TPU_SLICEBUILDER_ADDRESSES"].startswith("h0:")


def test_one_worker_per_chip_and_the_run_config_of_the_xla_backend() -> None:
    from ray.train import RunConfig

    from tpuray.workloads.gpt_loop import GptJob
    from tpuray.workloads.metrics import ModelShape

    s = TpuSlice.parse("v6e:4x4")
    job = GptJob(ModelShape(64, 1, 16, 2, 8), 4, 1, 1e-3, 2, str(s))
    rc = RunConfig(name="r", storage_path="/tmp/x")
    trainer = torch_tpu.torch_tpu_trainer(job, s, 1, rc)
    sc = trainer.scaling_config
    # one chip each, and a share of the host's CPU so that a Tune trial's actor fits beside the slice's workers
    expected = {"TPU": 1, "CPU": 1 / s.chips_per_host}
    assert (sc.num_workers, sc.resources_per_worker, sc.use_tpu) == (s.chips, expected, True)
    assert trainer.run_config is rc  # checkpoints and failures handled as for --backend xla


def test_backend_fills_env_before_ray_creates_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.train.torch.config import _TorchBackend

    calls: list[str] = []
    monkeypatch.setattr(_TorchBackend, "on_start", lambda self, wg, cfg: calls.append("process_group"))

    class FakeWorkerGroup:
        def execute(self, fn: Any, *args: Any) -> None:
            calls.append(f"{fn.__name__}{args}")

    s = TpuSlice.parse("v6e:2x2")
    cfg = TorchTpuConfig(slice_spec=str(s))
    assert cfg.backend == "tpu_dist"
    cfg.backend_cls().on_start(FakeWorkerGroup(), cfg)
    assert calls == [f"_fill_env{(str(s),)}", "process_group"]
