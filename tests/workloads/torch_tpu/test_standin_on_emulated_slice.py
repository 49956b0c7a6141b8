"""A script written against Ray 2.60's own TorchTPU API, with no tpuray import, trains FSDP2 under
``python -m tpuray.workloads.emulate`` on ``torch_tpu`` stacks, one process per emulated device, on TorchTPU's
stand-in: a v5e 2x2 and two v5e 2x4 slices. Its sharded step equals the unsharded one, each rank holds 1/N of the
parameters, the DCP checkpoint saved on one slice count restores on the other, and every rank saw the TorchTPU env
it would get on TPUs."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.torch_tpu_standin import NOTICE
from tpuray.workloads.placement.worker_env import DeviceSeat, torch_tpu_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ray_native_fsdp2_script.py"


def test_the_fsdp2_script_imports_nothing_of_tpuray() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "ray.train.torch" in imported and not {m for m in imported if m.split(".")[0] == "tpuray"}


STALE_MEGASCALE = {
    "MEGASCALE_NUM_SLICES": "3",
    "MEGASCALE_SLICE_ID": "2",
    "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.99:8080",
    "MEGASCALE_PORT": "8099",
}
"""A replacement pod's multislice env from a larger, older job."""


def _stack(tmp_path: Path, name: str, topology: str, slices: int) -> Path:
    """The dev stack on ``backend: torch_tpu``, with its pool reshaped."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    config = doc["config"]
    config["tpuray:workload"]["backend"] = "torch_tpu"
    config["tpuray:ray"] = {"image": "us-docker.pkg.dev/tpuray-dev-project/tpuray/worker:0.1.0-torch-tpu"}
    config["tpuray:slicePools"][0] |= {"topology": topology, "slices": slices}
    out = tmp_path / f"Pulumi.{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def _emulate(stack: Path, out: Path, tpu_slice: TpuSlice, slices: int, *restore: Path) -> str:
    out.mkdir()
    workers = tpu_slice.devices * slices
    script = [sys.executable, str(SCRIPT), str(out), tpu_slice.topology, tpu_slice.ray_accelerator_type, str(workers)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuray.workloads.emulate",
            "--stack-file",
            str(stack),
            "--",
            *script,
            *map(str, restore),
        ],
        # what the stack gives, nothing more, but for a pod's stale multislice env: a replacement pod can still say
        # three slices; every worker must hold the live group's, or none on one slice
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | STALE_MEGASCALE,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"emulating {slices} x {tpu_slice} " in proc.stderr and "torch_tpu) at" in proc.stderr
    return proc.stdout + proc.stderr


def _ranks(out: Path, world: int) -> list[dict[str, Any]]:
    got = {int(p.stem.split("-")[2]): json.loads(p.read_text()) for p in out.glob(f"rank-{world}-*.json")}
    assert sorted(got) == list(range(world)), "every rank trained"
    return [got[r] for r in range(world)]


def _check(ranks: list[dict[str, Any]], tpu_slice: TpuSlice, slices: int) -> None:
    world = tpu_slice.devices * slices
    per_slice = tpu_slice.devices
    # what TorchTPU would get on TPUs: each slice's env, from the one derivation (the emulated hosts share 127.0.0.1)
    seats = [DeviceSeat("127.0.0.1", 0, d) for d in range(per_slice)]
    slice_env = torch_tpu_env(tpu_slice, seats)
    coordinators = set()
    for rank, r in enumerate(ranks):
        assert r["world"] == world and r["device"] == "cpu"  # get_device(): the CPU on the stand-in
        assert r["step_diff"] < 1e-6, r  # the sharded step is the unsharded step
        assert r["held"] * world == r["total"], r  # 1/N of the parameters on each rank
        env = r["env"]
        assert {k: env.get(k) for k in slice_env} == slice_env, (rank, env)
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), str(world))
        if slices > 1:
            assert env["MEGASCALE_NUM_SLICES"] == str(slices) and env["MEGASCALE_SLICE_ID"] == str(rank // per_slice)
            coordinators.add(env["MEGASCALE_COORDINATOR_ADDRESS"])
            assert env["MEGASCALE_COORDINATOR_ADDRESS"] != STALE_MEGASCALE["MEGASCALE_COORDINATOR_ADDRESS"]
        else:
            assert not [k for k in env if k.startswith("MEGASCALE_")]
    assert len(coordinators) == (1 if slices > 1 else 0)  # one coordinator for the job


def test_a_ray_native_fsdp2_script_trains_on_one_and_two_slices_and_restores_across(tmp_path: Path) -> None:
    one, two = TpuSlice.parse("v5e:2x2"), TpuSlice.parse("v5e:2x4")
    said = _emulate(_stack(tmp_path, "one", "2x2", 1), tmp_path / "one", one, 1)
    assert said.count(NOTICE) == 1  # the stand-in says once what it is not
    _check(_ranks(tmp_path / "one", one.devices), one, 1)
    # the two-slice run starts from the one-slice run's checkpoint: 4 shards restored into 16
    _emulate(_stack(tmp_path, "two", "2x4", 2), tmp_path / "two", two, 2, tmp_path / "one" / "ckpt-4")
    ranks = _ranks(tmp_path / "two", 2 * two.devices)
    _check(ranks, two, 2)
    assert all(r["restore_diff"] == 0.0 for r in ranks)


def test_the_readmes_torch_tpu_script_trains_on_the_stand_in(tmp_path: Path) -> None:
    """The README's TorchTPU example, exactly, under the command the README gives."""
    import re

    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- emulate-torch-tpu-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md lost its TorchTPU example"
    script = tmp_path / "your_tpu_script.py"
    script.write_text(m.group(1))
    imports = set(re.findall(r"^(?:from|import) ([\w.]+)", m.group(1), re.M))
    assert imports and not {i for i in imports if i.split(".")[0] == "tpuray"}  # Ray's own API only
    emulate = [sys.executable, "-m", "tpuray.workloads.emulate", "--topology", "v5e:2x2", "--backend", "torch_tpu"]
    proc = subprocess.run(
        [*emulate, "--", sys.executable, str(script)],
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count(NOTICE) == 1
    result = ast.literal_eval([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert result["loss"] < 0.1 * result["first_loss"]
