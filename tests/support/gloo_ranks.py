"""Scripts of N local processes in one gloo process group, one per emulated device, as the FSDP2 tests run them.

Each such script is a file beside its test, run by path in a fresh interpreter (a process group per run, and no
pytest in the ranks): :func:`run_script` runs it from the test with the repository on its path, :func:`spawn_ranks`
starts its ranks, and :func:`emit` is how rank 0 hands its results back. The ranks share stdout, where gloo's own
lines from the other ranks can land inside a result line, so results go to a file instead, one JSON line each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

RESULTS_ENV = "TPURAY_GLOO_RANKS_RESULTS"
"""The file rank 0 appends its JSON lines to."""


def run_script(script: Path, *argv: str, timeout_s: float) -> list[dict[str, Any]]:
    """Run ``script argv...`` and return the JSON lines its rank 0 emitted; a failed run fails with its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, RESULTS_ENV: str(results), "PYTHONPATH": path}  # the script imports tests.support
        cmd = [sys.executable, str(script), *argv]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        return [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []


def spawn_ranks(body: Callable[..., None], world: int, *args: Any) -> None:
    """``body(rank, world, *args)`` in each of ``world`` processes, inside one gloo process group on the loopback.
    ``body`` must be a module-level function (the ranks are spawned and import it)."""
    from torch.multiprocessing.spawn import spawn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(_rank, args=(world, port, body, args), nprocs=world, join=True)  # type: ignore[no-untyped-call]


def _rank(rank: int, world: int, port: int, body: Callable[..., None], args: tuple[Any, ...]) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # world processes share the machine's cores
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, world, *args)
    finally:
        dist.destroy_process_group()


def emit(result: dict[str, Any]) -> None:
    """Append one result line (call it on rank 0 only)."""
    with open(os.environ[RESULTS_ENV], "a") as f:
        f.write(json.dumps(result) + "\n")
