"""A framework's train function run twice through Ray Train on the shared emulated slice (tests/workloads/xla's
Lightning and Transformers runs): Ray Train as a GPU script calls it, with only the TPU configs changed."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tpuray.workloads import XlaChipConfig, tpu_scaling_config

WORKERS = 4  # the v5e 2x2 slice's chips


def fit_on_v5e_2x2(train_fn: Callable[[dict[str, Any]], None], name: str, tmp: Path) -> dict[str, Any]:
    """Ray Train's result and each rank's records of its ``first`` and ``resume`` fits, which ``train_fn`` writes to
    ``<out>/<fit>-<rank>.json``."""
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    # Ray workers cannot import the test modules
    pytest.importorskip("ray").cloudpickle.register_pickle_by_value(sys.modules[train_fn.__module__])
    result = TorchTrainer(
        train_fn,
        train_loop_config={"out": str(tmp)},
        # the only lines a GPU script changes
        scaling_config=tpu_scaling_config("v5e:2x2"),
        torch_config=XlaChipConfig(),
        run_config=RunConfig(storage_path=str(tmp / "storage"), name=name),
    ).fit()
    ranks = {t: [json.loads((tmp / f"{t}-{r}.json").read_text()) for r in range(WORKERS)] for t in ("first", "resume")}
    return {"result": result, "ranks": ranks}
