"""tpuray.workloads must import without Pulumi (the worker image does not install it)."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "worker_env",
    "placement",
    "metrics",
    "data",
    "backend",
    "emulation",
    "emulate",
    "torch_tpu",
    "gpt_loop",
    "train",
    "model",
    "drain",
    "goodput",
    "training_metrics",
    "device_plugin",
    "portable",
    "tuning",
    "_ray_compat",
    "compile_cache",
]


def test_workloads_import_without_pulumi() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pulumi' or name.startswith(('pulumi.', 'pulumi_')):\n"
        "            raise ImportError('pulumi is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        + "".join(f"import tpuray.workloads.{m}\n" for m in MODULES)
        + "assert not any(k.startswith('pulumi') for k in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_every_module_is_listed() -> None:
    import tpuray.workloads as w

    found = {p.stem for p in __import__("pathlib").Path(w.__file__).parent.glob("*.py")} - {"__init__"}
    assert found == set(MODULES)


def test_worker_image_installs_no_pulumi() -> None:
    """The Dockerfile's requirements line, run against this pyproject: the workload stack, no Pulumi."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    docker = (repo / "workloads" / "Dockerfile").read_text()
    m = re.search(r'RUN python -c "(import tomllib;.*?)" > /tmp/requirements.txt', docker)
    assert m, "the Dockerfile no longer derives its requirements from pyproject"
    reqs = subprocess.run(
        [sys.executable, "-c", m.group(1)], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [r for r in reqs if "pulumi" in r]
    names = {re.split(r"[<>=\[]", r)[0] for r in reqs}
    assert {"torch", "torch_xla", "ray", "numpy", "pydantic", "pyyaml"} <= names
    assert "--no-deps ." in docker
