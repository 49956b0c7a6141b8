"""The measured figures the guides point at, in one file (``docs/figures.json``) that the benches write.

Each bench prints its JSON line as before; with ``--record`` it also replaces its own entry in the file: the line
itself, the date, the command and the machine it ran on (cores, memory, load average at the start: the figures of
a shared or busy machine are not those of a quiet one). Entries no bench writes (timed runs of a test or of README
command 1) carry ``"written_by": "hand"`` and say where they come from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

FIGURES = Path(__file__).resolve().parents[1] / "docs" / "figures.json"
_LOAD_AT_START = os.getloadavg()  # benches import this module first thing


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"also write the result as this bench's entry of {FIGURES.parent.name}/{FIGURES.name}",
    )


def machine() -> dict[str, Any]:
    """What the figures depend on: cores, memory, CPU model, Python, and how busy the machine was."""
    mem_gib: float | None = None
    model = platform.processor() or platform.machine()
    try:
        meminfo = Path("/proc/meminfo").read_text()
        kib = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")))
        mem_gib = round(kib / 2**20, 1)
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), model
        )
    except (OSError, StopIteration, ValueError):
        pass  # not Linux: the fields stay what platform gives (None for memory)
    return {
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu_model": model,
        "system": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in _LOAD_AT_START],
    }


def record(name: str, result: dict[str, Any], path: Path = FIGURES, argv: list[str] | None = None) -> None:
    """Replace entry ``name`` of the figures file with ``result``, dated, with the command and the machine.

    ``argv`` is the bench's command line (``sys.argv`` by default: the script, then its arguments)."""
    figures: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    script, *args = sys.argv if argv is None else argv
    command = ["python", f"bench/{Path(script).name}", *args]
    figures[name] = {
        "written_by": "bench",
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "command": " ".join(command),
        "machine": machine(),
        "result": result,
    }
    path.write_text(json.dumps(dict(sorted(figures.items())), indent=2) + "\n")


def emit(name: str, result: dict[str, Any], *, record_it: bool) -> None:
    """Print the bench's JSON line; with ``record_it``, also write it to the figures file."""
    print(json.dumps(result))
    if record_it:
        record(name, result)
