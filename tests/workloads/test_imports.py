"""tpuray.workloads must import without Pulumi (the worker image does not install it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]

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
    "runtimes",
    "frameworks",
    "lightning_xla",
    "patches",
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


def _image_stages() -> dict[str, str]:
    """workloads/Dockerfile's build stages by name (``FROM ... AS <stage>``); ``""`` holds what precedes them."""
    text = (REPO / "workloads" / "Dockerfile").read_text()
    head, *stages = re.split(r"^FROM ", text, flags=re.M)
    return {"": head, **{s.split("\n", 1)[0].split()[-1]: s for s in stages}}


@pytest.mark.parametrize(
    ("stage", "backend", "absent"),
    [
        ("worker-xla", {"torch-xla"}, {"torch-tpu", "libtpu"}),
        ("worker-torch-tpu", {"torch-tpu", "libtpu"}, {"torch-xla"}),
    ],
)
def test_worker_image_installs_no_pulumi(stage: str, backend: set[str], absent: set[str]) -> None:
    """Each image's requirements line, run against this pyproject: the workload stack and its backend, no Pulumi, not
    the other backend; the versions pinned on top (the labels' ARGs) are ones pyproject admits."""
    stages = _image_stages()
    body = stages[stage]
    m = re.search(r'RUN python -c "(import tomllib;.*?)" > /tmp/requirements.txt', body)
    assert m, f"the Dockerfile's {stage} no longer derives its requirements from pyproject"
    reqs = [
        Requirement(r)
        for r in subprocess.run(
            [sys.executable, "-c", m.group(1)], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
    ]
    names = {canonicalize_name(r.name) for r in reqs}
    assert not [n for n in names if "pulumi" in n]
    assert {"torch", "ray", "numpy", "pydantic", "pyyaml"} | backend <= names
    assert not names & absent
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", stages[""] + body, flags=re.M))
    pins = [("ray", "RAY_VERSION"), *re.findall(r'"([\w-]+)(?:\[\w+\])?==\$\{(\w+)\}"', body)]
    assert len(pins) >= 3, pins
    for name, arg in pins:
        for r in reqs:
            if canonicalize_name(r.name) == canonicalize_name(name):
                assert r.specifier.contains(args[arg]), f"{stage}: {arg}={args[arg]} is outside {r}"
    assert "--no-deps ." in body
