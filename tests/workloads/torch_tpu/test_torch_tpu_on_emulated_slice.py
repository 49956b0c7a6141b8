"""Ray 2.60's own TorchTPU path on the emulated v5p 2x2x2 slice (8 workers on two hosts), for a script with no
tpuray import, run two ways: by a driver that names tpuray's callback in ``RAY_TRAIN_CALLBACKS`` as the stack's
worker pods do (a driver on a worker), and as a job submitted through Ray's job API with no entrypoint resources,
whose driver Ray runs on the head, set up as the stack plans its head pod.

torch_tpu cannot start without a TPU, so a stand-in (``torch_tpu_stub``) registers the ``tpu`` device name and, where
Ray creates the ``tpu_dist`` group and torch_tpu would start its runtime (``_loader.load()``), records each worker's
environment and stops the run. What each rank got is checked here against the slice;
test_tpuray_env_matches_torch_tpu.py compares the same derivation with torch_tpu's own launcher.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tpuray.components.catalog.names import TORCH_TPU_ENV_CALLBACK
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.cluster import HeadNode

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

    from tests.workloads.torch_tpu.ray_native_tpu_script import build_trainer

    monkeypatch.setenv("RAY_TRAIN_CALLBACKS", TORCH_TPU_ENV_CALLBACK)  # what the stack sets on its worker pods
    record = tmp_path / "env"
    record.mkdir()
    trainer = build_trainer(tmp_path / "storage", "native", _stand_in_env(record))
    with pytest.raises(Exception) as err:  # where the stand-in stops it
        trainer.fit()
    assert "torch_tpu stand-in: recorded the environment" in str(err.value)
    check_rank_envs(record, SLICE)
    live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
    assert not live  # the failed start released the slice


def check_rank_envs(record: Path, tpu_slice: TpuSlice) -> None:
    """Every rank of a run on ``tpu_slice`` (a v5p 2x2x2) recorded the full TorchTPU env where torch_tpu starts."""
    assert tpu_slice == SLICE  # the figures below are this shape's
    envs = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in record.glob("rank-*.json")}
    assert sorted(envs) == list(range(SLICE.devices))  # every rank got as far as torch_tpu's start
    (listed,) = {e.get("TORCH_TPU_SLICEBUILDER_ADDRESSES") for e in envs.values()}  # the same on every rank
    assert listed, "torch_tpu would start with no TORCH_TPU_SLICEBUILDER_ADDRESSES: the callback did not run"
    addresses = listed.split(",")
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


def _stand_in_env(record: Path) -> dict[str, str]:
    """The Ray Train workers' env that puts the stand-in torch_tpu first and tells it where to record."""
    import os

    path = os.pathsep.join([str(HERE / "torch_tpu_stub"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"TPURAY_TEST_ENV_RECORD": str(record), "PYTHONPATH": path}


STACK = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml"


def v5p_torch_tpu_stack(tmp_path: Path) -> Path:
    """The TorchTPU test stack on one v5p 2x2x2 slice (8 workers on two hosts) instead of two tpu7x ones (32)."""
    text = STACK.read_text()
    for old, new in (
        ("zone: us-central1-c", "zone: us-central1-a"),  # a v5p zone (catalog/tpu_locations.py)
        ("generation: tpu7x", "generation: v5p"),
        ("slices: 2", "slices: 1"),
    ):
        assert old in text
        text = text.replace(old, new)
    out = tmp_path / "Pulumi.torch-tpu-v5p.yaml"
    out.write_text(text)
    return out


def planned_head(stack_file: Path) -> HeadNode:
    """The head of the stack's planned RayCluster, as an emulated head: its container's env and its CPUs."""
    from tpuray.components.config import load_stack_file
    from tpuray.components.planning.stack_plan import plan_stack

    manifests = plan_stack(load_stack_file(stack_file), "torch-tpu").manifests
    (cluster,) = [m for m in manifests if m["kind"] == "RayCluster"]
    head = cluster["spec"]["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    env = container.get("env", [])
    assert all("value" in e for e in env)  # nothing from a Secret, which a local cluster has not
    return HeadNode(env={e["name"]: e["value"] for e in env}, num_cpus=int(head["rayStartParams"]["num-cpus"]))


def test_a_job_submitted_without_entrypoint_resources_gets_the_env_on_the_planned_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ray job submit -- python script.py``, asking for nothing: Ray's job manager runs the driver on the head, so
    the head pod the stack plans must carry what Ray Train reads there."""
    import shlex
    import sys
    import time

    from ray.job_submission import JobStatus, JobSubmissionClient

    from tpuray.components.config import load_stack_file
    from tpuray.workloads.emulation.cluster import EmulatedCluster

    stack_file = v5p_torch_tpu_stack(tmp_path)
    pool = load_stack_file(stack_file).workload_pool()
    assert (pool.tpu_slice, pool.slices) == (SLICE, 1)
    head = planned_head(stack_file)
    # only the planned head gives the driver what it reads: nothing from this process, whose env the local
    # cluster's processes inherit (the job manager's switch that would let drivers leave the head included)
    for name in ("RAY_TRAIN_CALLBACKS", "RAY_TPU_RESOURCE_PER_CHIP", "RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES"):
        monkeypatch.delenv(name, raising=False)
    record = tmp_path / "env"
    record.mkdir()
    script = HERE / "ray_native_tpu_script.py"
    args = [sys.executable, str(script), str(tmp_path / "storage"), "submitted", json.dumps(_stand_in_env(record))]
    with EmulatedCluster(pool.tpu_slice, pool.slices, name_prefix="submitted", head=head) as cluster:
        client = JobSubmissionClient(cluster.dashboard_url)
        job = client.submit_job(entrypoint=shlex.join(args))  # no entrypoint_num_cpus, _resources, _memory
        done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
        while client.get_job_status(job) not in done:
            time.sleep(0.5)
        info, logs = client.get_job_info(job), client.get_job_logs(job)
        assert info.driver_node_id == cluster.head_node_id, logs  # where Ray put the driver: the head
    assert "torch_tpu stand-in: recorded the environment" in logs, logs
    check_rank_envs(record, SLICE)
