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
