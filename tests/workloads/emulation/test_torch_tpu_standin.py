"""TorchTPU's stand-in in a worker process of its own (it renames torch's out-of-tree device for good, so never in
the suite's): ``tpu_dist`` over gloo, Ray's TPU device manager answering with the CPU, a literal ``tpu`` device
refused with the stand-in's words, a real torch_tpu never shadowed; and its mesh against torch_tpu's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.torch_tpu_venv import require_torch_tpu_python
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.standin_mesh import ChipSeat, chip_coords, layout
from tpuray.workloads.emulation.torch_tpu_standin import NO_TPU_DEVICE

pytestmark = [pytest.mark.slow, pytest.mark.beside_clusters]

STUB = ROOT / "tests" / "workloads" / "torch_tpu" / "torch_tpu_stub"

WORKER = """
import json, os, torch
from tpuray.workloads.emulation import torch_tpu_standin
out = {"installed": torch_tpu_standin.install()}
errors = []
for use in (lambda: torch.ones(2).to("tpu"), lambda: torch.nn.Linear(2, 2).to(torch.device("tpu")),
            lambda: torch.ones(2, device="tpu"), lambda: torch.zeros(1).to(device="tpu:0")):
    try:
        use()
        errors.append(None)
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
out["errors"] = errors
if out["installed"]:
    from ray.air._internal.device_manager.tpu import TPUTorchDeviceManager
    out["devices"] = [str(d) for d in TPUTorchDeviceManager().get_devices()]
    TPUTorchDeviceManager.register_custom_torch_dist_backend()  # what Ray calls before init_process_group
    import torch.distributed as dist
    dist.init_process_group("tpu_dist", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=0, world_size=1)
    t = torch.ones(3)
    dist.all_reduce(t)
    out["backend"], out["sum"] = dist.get_backend(), t.tolist()
    out["mesh"] = torch.tpu.distributed.topology_aware_mesh.__module__
print(json.dumps(out))
"""


def _run(extra_path: str = "") -> dict[str, object]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PORT": str(port)}
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_the_stand_in_runs_tpu_dist_on_gloo_and_refuses_a_literal_tpu_device() -> None:
    out = _run()
    assert out["installed"] is True
    assert out["devices"] == ["cpu"]  # ray.train.torch.get_device() on an emulated TorchTPU worker
    assert out["backend"] == "tpu_dist" and out["sum"] == [1.0, 1.0, 1.0]
    assert out["mesh"] == "tpuray.workloads.emulation.standin_mesh"
    assert out["errors"] == [f"RuntimeError: {NO_TPU_DEVICE}"] * 4  # the stand-in's words, not torch's


def test_a_real_torch_tpu_on_the_path_is_never_shadowed() -> None:
    out = _run(str(STUB))  # a torch_tpu package importable: the stand-in stays out of the way
    assert out["installed"] is False
    errors = out["errors"]
    assert isinstance(errors, list) and errors and all(e and NO_TPU_DEVICE not in e for e in errors)


# torch_tpu 0.2.0's own layout of the same chips (its device_utils, numpy only), in its environment: every case in
# one interpreter
REAL = """
import dataclasses, json, sys
import numpy as np
from torch_tpu._internal.distributed import device_utils as mu
@dataclasses.dataclass(frozen=True)
class D:
    id: int
    coords: tuple
    core_on_chip: int
    device_kind: str
    platform: str
    process_index: int
    slice_index: int
out = []
for case in json.loads(sys.stdin.read()):
    devices = [D(i, tuple(c), 0, case["kind"], "tpu", h, s) for i, (c, h, s) in enumerate(case["chips"])]
    shape, dcn = tuple(case["shape"]), tuple(case["dcn"])
    if max(dcn) > 1:
        mesh = mu.create_hybrid_device_mesh(tuple(m // d for m, d in zip(shape, dcn)), dcn, devices=devices)
    else:
        mesh = mu.create_device_mesh(shape, devices=devices)
    out.append(np.vectorize(lambda d: d.id)(mesh).tolist())
print(json.dumps(out))
"""

KINDS = {"v5e": "TPU v5 lite", "v5p": "TPU v5"}
CASES = [
    ("v5e:2x2", 1, (4,), (1,)),
    ("v5e:2x2", 1, (2, 2), (1, 1)),
    ("v5e:2x4", 1, (8,), (1,)),
    ("v5e:2x4", 1, (4, 2), (1, 1)),
    ("v5p:2x2x2", 1, (8,), (1,)),
    ("v5p:2x2x2", 1, (2, 4), (1, 1)),
    ("v5e:2x4", 2, (16,), (2,)),
    ("v5e:2x4", 2, (4, 4), (2, 1)),
]


def _seats(spec: str, slices: int) -> list[ChipSeat]:
    """Ranks as Ray gives them on a slice (host-major, devices in order), here in reverse, so that a layout cannot
    pass by echoing rank order."""
    s = TpuSlice.parse(spec)
    return [
        ChipSeat(spec, sid, h, d) for sid in range(slices) for h in range(s.hosts) for d in range(s.devices_per_host)
    ][::-1]


def test_the_stand_ins_mesh_is_torch_tpus_layout() -> None:
    python = str(require_torch_tpu_python())
    cases = []
    for spec, slices, shape, dcn in CASES:
        s = TpuSlice.parse(spec)
        chips = [[chip_coords(s, x.host, x.device), x.host, x.slice_id] for x in _seats(spec, slices)]
        cases.append({"kind": KINDS[s.generation], "chips": chips, "shape": list(shape), "dcn": list(dcn)})
    proc = subprocess.run([python, "-c", REAL], input=json.dumps(cases), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    for (spec, slices, shape, dcn), want in zip(CASES, real, strict=True):
        # the real one names devices by id, and a device's id here is its rank's index
        got = layout(_seats(spec, slices), shape, dcn if slices > 1 else None).tolist()
        assert got == want, (spec, slices, shape)
