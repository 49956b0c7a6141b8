"""tpuray.workloads must import without Pulumi (the worker image does not install it)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]

WORKLOADS = REPO / "workloads"


def _modules() -> list[str]:
    """Every module of tpuray.workloads, wings included, by its dotted name under the package."""
    return sorted(
        ".".join(p.relative_to(WORKLOADS).with_suffix("").parts).removesuffix(".__init__") or "__init__"
        for p in WORKLOADS.rglob("*.py")
    )


@pytest.fixture(scope="module")
def fresh_process() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One fresh interpreter with Pulumi blocked (importing torch, torch_xla and Ray costs seconds a process): it
    imports the sharding wing first and records any torch_xla module that brought in (the TorchTPU image has none),
    imports every workload module and asserts no Pulumi module got loaded, then runs ``python -m
    tpuray.workloads.train --help`` as ``-m`` does (:func:`runpy.run_module` as ``__main__``). Returns the process
    and, from its stdout, the exit code and output of the ``--help`` run."""
    modules = [m for m in _modules() if m != "__init__"]
    assert {"train", "emulate", "xla.backend", "torch_tpu.callback", "gpt.loop"} <= set(modules)
    code = (
        "import contextlib, io, json, runpy, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pulumi' or name.startswith(('pulumi.', 'pulumi_')):\n"
        "            raise ImportError('pulumi is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import tpuray.workloads.sharding, tpuray.workloads.sharding.fsdp2\n"
        "xla_for_sharding = sorted(k for k in sys.modules if k.startswith('torch_xla'))\n"
        + "".join(f"import tpuray.workloads.{m}\n" for m in modules)
        + "assert not any(k.startswith('pulumi') for k in sys.modules)\n"
        # then `python -m tpuray.workloads.train --help`, as -m runs it (runpy warns that the module is imported)
        "out = io.StringIO()\n"
        "sys.argv = ['train', '--help']\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        runpy.run_module('tpuray.workloads.train', run_name='__main__', alter_sys=True)\n"
        "        exit_code = 0\n"
        "    except SystemExit as e:\n"
        "        exit_code = e.code\n"
        "print(json.dumps({'exit': exit_code, 'stdout': out.getvalue(), 'xla': xla_for_sharding}), flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"exit": ')]
    help_run: dict[str, Any] = json.loads(lines[0]) if lines else {"exit": None, "stdout": ""}
    return proc, help_run


@pytest.mark.slow  # the fixture's fresh interpreter imports torch, torch_xla and Ray
@pytest.mark.beside_clusters
def test_workloads_import_without_pulumi(fresh_process: tuple[subprocess.CompletedProcess[str], Any]) -> None:
    proc, _ = fresh_process
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow  # the fixture's fresh interpreter imports torch, torch_xla and Ray
@pytest.mark.beside_clusters
def test_the_sharding_wing_imports_without_torch_xla(
    fresh_process: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """TorchTPU's FSDP2 path lives in the sharding wing beside PyTorch/XLA's SPMD: the torch_tpu image, which has no
    torch_xla, imports it."""
    proc, run = fresh_process
    assert run.get("xla") == [], proc.stderr[-2000:]


def test_the_top_level_holds_at_most_six_modules_and_every_wing_says_what_it_exports() -> None:
    top = {p.stem for p in WORKLOADS.glob("*.py")} - {"__init__", "_ray_compat"}
    assert len(top) <= 6, sorted(top)
    wings = [d for d in WORKLOADS.iterdir() if d.is_dir() and any(d.glob("*.py"))]
    assert len(wings) >= 6
    for wing in wings:
        init = wing / "__init__.py"
        assert init.is_file(), f"{wing.name}/ has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()) <= 12, f"{wing.name}/__init__.py: a short docstring saying what it holds"


@pytest.mark.slow  # the fixture's fresh interpreter imports torch, torch_xla and Ray
@pytest.mark.beside_clusters
def test_the_paths_deployed_stacks_name_still_work(
    fresh_process: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """A live RayJob runs ``python -m tpuray.workloads.train``, and every Ray pod of a TorchTPU stack names
    ``tpuray.workloads.torch_tpu.TorchTpuEnvCallback`` in ``RAY_TRAIN_CALLBACKS``: old manifests must keep running
    on new images."""
    import importlib

    from tpuray.components.catalog.names import TORCH_TPU_ENV_CALLBACK
    from tpuray.components.config.loaders import load_stack_file
    from tpuray.components.planning.entrypoint import train_entrypoint
    from tpuray.workloads.torch_tpu.callback import TorchTpuEnvCallback

    module, _, name = TORCH_TPU_ENV_CALLBACK.rpartition(".")
    assert module == "tpuray.workloads.torch_tpu"
    assert getattr(importlib.import_module(module), name) is TorchTpuEnvCallback
    cfg = load_stack_file(REPO / "Pulumi.dev.yaml")
    entrypoint = train_entrypoint(cfg.workload, cfg.workload_pool(), "run", None)
    assert "python -m tpuray.workloads.train " in entrypoint, entrypoint
    proc, help_run = fresh_process  # ``python -m tpuray.workloads.train --help``, run in the fixture's process
    assert help_run["exit"] == 0 and "--steps" in help_run["stdout"], proc.stderr[-2000:]


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
