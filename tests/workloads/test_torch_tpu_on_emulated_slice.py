"""Ray 2.60's own TorchTPU path on the emulated v5p 2x2x2 slice (8 workers on two hosts), for a script with no
tpuray import, on a cluster that names tpuray's callback in ``RAY_TRAIN_CALLBACKS`` as the stack's worker pods do.

torch_tpu cannot start without a TPU, so a stand-in (``torch_tpu_stub``) registers the ``tpu`` device name and, where
Ray creates the ``tpu_dist`` group and torch_tpu would start its runtime (``_loader.load()``), records each worker's
environment and stops the run. What each rank got is checked here against the slice; tests/torch_tpu_env compares
the same derivation with torch_tpu's own launcher.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpuray.components.catalog.names import TORCH_TPU_ENV_CALLBACK
from tpuray.components.catalog.topology import TpuSlice

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SLICE = TpuSlice.parse("v5p:2x2x2")


def test_the_script_imports_nothing_of_tpuray() -> None:
    import ast

    tree = ast.parse((HERE / "ray_native_tpu_script.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported and not {m for m in imported if m.split(".")[0] == "tpuray"}


def test_each_rank_gets_the_slice_env_just_before_torch_tpu_starts(
    emulated_slices: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from tests.workloads.ray_native_tpu_script import build_trainer

    monkeypatch.setenv("RAY_TRAIN_CALLBACKS", TORCH_TPU_ENV_CALLBACK)  # what the stack sets on its worker pods
    record = tmp_path / "env"
    record.mkdir()
    import os

    path = os.pathsep.join([str(HERE / "torch_tpu_stub"), *filter(None, [os.environ.get("PYTHONPATH")])])
    trainer = build_trainer(tmp_path / "storage", "native", {"TPURAY_TEST_ENV_RECORD": str(record), "PYTHONPATH": path})
    with pytest.raises(Exception) as err:  # where the stand-in stops it
        trainer.fit()
    assert "torch_tpu stand-in: recorded the environment" in str(err.value)
    envs = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in record.glob("rank-*.json")}
    assert sorted(envs) == list(range(SLICE.devices))  # every rank got as far as torch_tpu's start
    lists = {e["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for e in envs.values()}
    assert len(lists) == 1  # the same list on every rank
    addresses = lists.pop().split(",")
    assert len(addresses) == SLICE.devices and len(set(addresses)) == SLICE.devices
    # Ray numbers LOCAL_RANK per node IP, one per host on GKE; the emulated hosts share 127.0.0.1, so the device
    # of a rank is counted here per host, in rank order, as the callback counts it
    on_host: dict[str, int] = {}
    for rank in sorted(envs):
        env = envs[rank]
        hosts = env["TPU_WORKER_HOSTNAMES"].split(",")
        assert len(hosts) == SLICE.hosts
        own = hosts[int(env["TPU_WORKER_ID"])]
        device = on_host.setdefault(own, 0)
        on_host[own] += 1
        assert addresses[rank] == f"{own}:{8471 + device}"  # on the rank's own host
        assert env["TORCH_TPU_TOPOLOGY"] == "2,2,2"
        assert env["TORCH_TPU_DEVICES_PER_HOST"] == "4" and env["NNODES"] == "2"
        assert env["WORLD_SIZE"] == str(SLICE.devices) and env["RANK"] == str(rank)
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert not live  # the failed start released the slice
