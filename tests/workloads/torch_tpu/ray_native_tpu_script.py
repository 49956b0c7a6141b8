"""A training script written against Ray 2.60's own TorchTPU API, as Ray's documentation writes it: nothing of
tpuray in it (``test_torch_tpu_on_emulated_slice`` checks that this file names no tpuray module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train_fn(config: dict[str, Any]) -> None:
    import ray.train.torch
    import torch

    device = ray.train.torch.get_device()  # torch.device("tpu") under torch_tpu
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1).to(device))
    ray.train.report({"params": sum(p.numel() for p in model.parameters())})


def build_trainer(storage: Path, name: str, worker_env: dict[str, str]) -> Any:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # ray.train's names are Ray Train V2's classes at run time (Ray 2.60); mypy resolves them to V1's, hence the ignores

    return TorchTrainer(
        train_fn,
        scaling_config=ScalingConfig(  # type: ignore[call-arg]
            num_workers=8,
            use_tpu=True,
            topology="2x2x2",
            accelerator_type="TPU-V5P",
            resources_per_worker={"TPU": 1},
        ),
        run_config=RunConfig(  # type: ignore[call-arg]
            storage_path=str(storage),
            name=name,
            failure_config=FailureConfig(max_failures=0, controller_failure_limit=0),  # type: ignore[call-arg]
            # the test's stand-in for torch_tpu (it records the env where torch_tpu would start); not the script's
            worker_runtime_env={"env_vars": worker_env},
        ),
    )


def main(argv: list[str]) -> None:
    """``python ray_native_tpu_script.py STORAGE NAME WORKER_ENV_JSON``: the script as a submitted job runs it."""
    import json

    storage, name, worker_env = argv
    build_trainer(Path(storage), name, json.loads(worker_env)).fit()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
