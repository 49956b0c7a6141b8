"""Records the worker's environment where torch_tpu would initialise, then stops the run (see the package)."""

import json
import os
from pathlib import Path

PREFIXES = ("TORCH_TPU_", "TPU_", "MEGASCALE_", "RANK", "LOCAL_", "NODE_RANK", "WORLD_SIZE", "MASTER_", "NNODES")


class NoTpuHere(RuntimeError):
    """The stand-in stops where the real torch_tpu would start its runtime."""


def load() -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith(PREFIXES)}
    out = Path(os.environ["TPURAY_TEST_ENV_RECORD"])
    (out / f"rank-{env['RANK']}.json").write_text(json.dumps(env, sort_keys=True))
    raise NoTpuHere("torch_tpu stand-in: recorded the environment; a real torch_tpu would start its runtime here")
