"""The persistent compile cache on one process: one directory per key, the writer writes it, a reader never does,
and a second run of the same key finds what the first wrote (on PJRT CPU it cannot reload it: only TPUs can).

Each run is a fresh Python process: PyTorch/XLA takes the cache only before it computes anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch_xla")

# three fresh PyTorch/XLA processes: tens of CPU seconds on the suite's two cores, and no Ray cluster
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RUN = """
import json, sys
import torch, torch_xla
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.api import compile_cache
use = compile_cache.enable_xla(int(sys.argv[1]), TpuSlice.parse(sys.argv[2]), 1, sys.argv[3])
x = torch.arange(8.0, device=torch_xla.device()) * 3 + 1
torch_xla.sync()
float(x.sum())
print(json.dumps(compile_cache.cache_report()))
"""


def run(rank: int, shape: str, root: Path) -> dict[str, Any]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "TPURAY_WORKER_IMAGE": "us-docker.pkg.dev/p/r/worker:1"}
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(rank), shape, str(root)], env=env, capture_output=True, text=True, check=True
    )
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def test_the_second_run_of_a_key_finds_what_the_first_wrote_and_readers_write_nothing(tmp_path: Path) -> None:
    first = run(0, "v5e:2x2", tmp_path)
    assert first["writer"] and first["warm"] is False and first["files_before"] == 0
    assert first["files_written"] > 0  # the compiled program, in the key's directory
    assert first["key"].startswith("xla-torch_xla-") and "/v5litepod-4-2x2-x1/tag-" in first["key"]
    assert Path(first["directory"]) == tmp_path / first["key"]
    second = run(0, "v5e:2x2", tmp_path)
    assert second["key"] == first["key"] and second["warm"] is True
    assert second["files_before"] == first["files_after"]
    # PJRT CPU finds the entry but cannot deserialize it; on TPUs this counts as a hit
    assert second["reload_failures"] + second["hits"] >= 1
    other = run(1, "v5e:2x4", tmp_path)  # another shape: its own directory; rank 1 only reads
    assert other["key"] != first["key"] and not other["writer"]
    assert other["files_before"] == 0 and other["files_after"] == 0
    assert not [p for p in (tmp_path / other["key"]).rglob("*") if p.is_file()]
