"""The sharded job's mesh: axes, the slices on the outer data axis, and the rank layout torch_tpu's builder makes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import zipfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.torch_tpu_venv import torch_tpu_python
from tpuray.workloads.sharding.mesh import MeshError, MeshPlan, dcn_mesh_shape, mesh_plan, rank_layout

WHEEL_ENV = "TPURAY_TORCH_TPU_WHEEL"
"""A downloaded torch_tpu 0.2.0 wheel (``pip download --no-deps torch-tpu==0.2.0``), read where the torch_tpu venv
(tests/support/torch_tpu_venv.py) is missing. torch_tpu's mesh builder is numpy-only
(``_internal/distributed/device_utils.py`` imports collections, itertools, math, numpy), so the test loads that one
file; torch_tpu itself does not install beside torch_xla."""
DEVICE_UTILS = "torch_tpu/_internal/distributed/device_utils.py"


def _device_utils_source() -> bytes | None:
    """device_utils.py from the torch_tpu venv that .ci/run makes, else from the wheel :data:`WHEEL_ENV` names."""
    python = torch_tpu_python()
    if python.is_file():
        # find_spec of a top-level package reads the path only: torch_tpu is not imported
        code = "import importlib.util as u; print(u.find_spec('torch_tpu').submodule_search_locations[0])"
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
        found = Path(proc.stdout.strip()).parent / DEVICE_UTILS
        if proc.returncode == 0 and found.is_file():
            return found.read_bytes()
    wheel = os.environ.get(WHEEL_ENV)
    if wheel and Path(wheel).is_file():
        with zipfile.ZipFile(wheel) as z:
            return z.read(DEVICE_UTILS)
    return None


@cache
def _torch_tpu_device_utils() -> ModuleType | None:
    source = _device_utils_source()
    if source is None:
        return None
    spec = importlib.util.spec_from_loader("torch_tpu_device_utils", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, DEVICE_UTILS, "exec"), module.__dict__)
    return module


def test_the_data_axis_takes_the_rest_and_the_slices_split_it() -> None:
    plan = mesh_plan(devices_per_slice=16, num_slices=2, fsdp=4, tensor=2)
    assert plan == MeshPlan(shape=(4, 4, 2), dcn_shape=(2, 1, 1))
    assert plan.ici_shape == (2, 4, 2) and plan.devices == 32 and plan.axis_names == ("data", "fsdp", "tensor")
    layout = np.array(rank_layout(plan))
    assert sorted(layout[:2].ravel()) == list(range(16))  # slice 0's devices fill the first half of the data axis
    assert sorted(layout[2:].ravel()) == list(range(16, 32))
    # every FSDP and tensor group sits in one slice: only the data axis crosses DCN
    assert all(len({int(r) // 16 for r in layout[a].ravel()}) == 1 for a in range(4))


def test_a_mesh_the_devices_cannot_form_is_refused_naming_the_field() -> None:
    with pytest.raises(MeshError, match=r"workload\.parallelism: fsdp x tensor = 4 x 4 does not divide the 8"):
        mesh_plan(8, fsdp=4, tensor=4)
    with pytest.raises(MeshError, match="num_slices=2: the outermost axis"):
        dcn_mesh_shape((1, 1, 1), 2)
    with pytest.raises(MeshError, match=r"workload\.parallelism\.fsdp=0"):
        mesh_plan(8, fsdp=0)


@settings(max_examples=60, deadline=None)
@given(
    per_slice_log=st.integers(0, 6),
    slices=st.sampled_from([1, 2, 3, 4]),
    f_log=st.integers(0, 6),
    t_log=st.integers(0, 6),
)
def test_the_layout_puts_every_device_once_in_slice_blocks(
    per_slice_log: int, slices: int, f_log: int, t_log: int
) -> None:
    per_slice = 2**per_slice_log
    fsdp = 2 ** min(f_log, per_slice_log)
    tensor = 2 ** min(t_log, per_slice_log - fsdp.bit_length() + 1)
    plan = mesh_plan(per_slice, slices, fsdp, tensor)
    layout = np.array(rank_layout(plan))
    assert layout.shape == plan.shape and sorted(layout.ravel()) == list(range(per_slice * slices))
    for s in range(slices):  # the block of slice s is its devices in order, reshaped to the ICI shape
        block = layout[s * plan.ici_shape[0] : (s + 1) * plan.ici_shape[0]]
        assert block.ravel().tolist() == list(range(s * per_slice, (s + 1) * per_slice))


@pytest.mark.skipif(
    _torch_tpu_device_utils() is None and os.environ.get("CI") != "true",  # in CI the torch_tpu venv is made
    reason=f"no torch_tpu venv (.ci/run's .venv-torch-tpu commands) and no {WHEEL_ENV} naming a torch_tpu 0.2.0 wheel",
)
@pytest.mark.parametrize(
    ("per_slice", "slices", "fsdp", "tensor"), [(8, 1, 4, 2), (16, 2, 4, 1), (8, 4, 2, 2), (4, 2, 1, 4)]
)
def test_the_layout_is_torch_tpus_own_on_devices_without_a_torus(
    per_slice: int, slices: int, fsdp: int, tensor: int
) -> None:
    utils = _torch_tpu_device_utils()
    assert utils is not None
    plan = mesh_plan(per_slice, slices, fsdp, tensor)

    class Dev:  # the attributes torch_tpu's builder reads (its _DeviceStub), on the CPU platform
        def __init__(self, i: int) -> None:
            self.id, self.slice_index, self.process_index = i, i // per_slice, i
            self.device_kind, self.platform, self.coords, self.core_on_chip = "cpu", "cpu", (0, 0, 0), 0

    devices: list[Any] = [Dev(i) for i in range(per_slice * slices)]
    if slices == 1:
        theirs = utils.create_device_mesh(plan.shape, devices=devices)
    else:
        theirs = utils.create_hybrid_device_mesh(plan.ici_shape, plan.dcn_shape, devices=devices)
    assert np.vectorize(lambda d: d.id)(theirs).tolist() == rank_layout(plan)
