"""The torch_tpu environment the tests run torch_tpu's own code in, and :func:`run_launch_env`, which runs
launch_env.py (torch_tpu's ``set_tpu_launch_env``, one process per host) there.

torch_tpu needs torch 2.11 or newer and the main venv holds torch 2.9 for torch_xla, so torch_tpu lives in a venv
of its own: ``TPURAY_TORCH_TPU_PYTHON`` names its python (.ci/run exports it), else ``<repo>/.venv-torch-tpu``.
Without it the tests skip, saying how to make it; in CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.paths import ROOT

HARNESS = Path(__file__).with_name("launch_env.py")
PYTHON_ENV = "TPURAY_TORCH_TPU_PYTHON"
PCI_DEVICE_ID = {"v5e": "0x0063", "v5p": "0x0062", "v6e": "0x006f", "tpu7x": "0x0076"}
"""The PCI device id torch_tpu knows each generation by (torch_tpu/_internal/utils/hardware.py,
``_PCI_DEVICE_ID_TO_NAME``: "TPU v5e", "TPU v5p", "TPU v6e", "TPU v7"): a case's ``pci_device_id``."""


def torch_tpu_python() -> Path:
    """The python of the torch_tpu venv, whether or not it exists."""
    named = os.environ.get(PYTHON_ENV)
    return Path(named) if named else ROOT / ".venv-torch-tpu" / "bin" / "python"


def require_torch_tpu_python() -> Path:
    """:func:`torch_tpu_python`, or a skip (a failure in CI) that says how to make it."""
    python = torch_tpu_python()
    if python.is_file():
        return python
    # the commands that make it are written once, in .ci/run: point there rather than copy them
    message = (
        f"no torch_tpu python at {python} ({PYTHON_ENV} names it; default <repo>/.venv-torch-tpu/bin/python): "
        "make it from the repository root with .ci/run's three .venv-torch-tpu commands"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def installed_versions(*distributions: str) -> dict[str, str]:
    """The versions of ``distributions`` in the torch_tpu venv (from their metadata: nothing is imported)."""
    code = "import importlib.metadata as m, json, sys; print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))"
    proc = subprocess.run(
        [str(require_torch_tpu_python()), "-c", code, *distributions], capture_output=True, text=True, check=True
    )
    versions: dict[str, str] = json.loads(proc.stdout)
    return versions


def run_launch_env(cases: Sequence[Mapping[str, object]]) -> list[dict[str, str | None]]:
    """torch_tpu's ``set_tpu_launch_env`` for each case (one host of a slice: see launch_env.py for the fields),
    each in its own process: per case the launch variables it set (``None`` when unset), or ``{"error": ...}``."""
    proc = subprocess.run(
        [str(require_torch_tpu_python()), str(HARNESS)], input=json.dumps(list(cases)), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"launch_env.py exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    results: list[dict[str, str | None]] = json.loads(proc.stdout)
    return results
