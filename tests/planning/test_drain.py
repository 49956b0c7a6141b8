"""The TPU worker's preStop hook: rendered on every TPU worker container with a grace period per capacity type,
and, run as Kubernetes would run it inside a Ray node, it really drains that node in Ray's GCS."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.slices import CAPACITIES, pool, ray_params, worker_group
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.capacity import Reservation, Spot, capacity_class
from tpuray.components.planning.drain import DRAIN_REASON, DrainPlan, drain_plan, drain_window, pre_stop_command
from tpuray.components.planning.kuberay import ray_cluster_spec


@pytest.mark.parametrize("capacity", sorted(CAPACITIES))
def test_every_tpu_worker_drains_within_its_capacity_types_grace_period(capacity: str) -> None:
    cfg = pool(TpuSlice.parse("v5p", "2x2x4"), capacity, 2)
    spec = ray_cluster_spec(ray_params(worker_group(cfg)))
    [group] = spec["workerGroupSpecs"]
    pod = group["template"]["spec"]
    plan = drain_plan(cfg.capacity)
    assert pod["terminationGracePeriodSeconds"] == plan.grace_seconds
    # the deadline Ray is told leaves the hook's start-up and the container's SIGTERM inside the grace period
    assert 0 < plan.deadline_seconds < plan.grace_seconds
    for c in pod["containers"]:
        command = c["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:2] == ["/bin/sh", "-c"]
        assert f"--reason {DRAIN_REASON}" in command[2]
        assert f"--deadline-remaining-seconds {plan.deadline_seconds}" in command[2]
    assert "lifecycle" not in spec["headGroupSpec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("period", [30, 120])
def test_spot_drains_inside_the_kubelets_shutdown_share(period: int) -> None:
    """After the notice the kubelet gives non-system pods the node's shutdown less the critical pods' share (15 of
    GKE's 30 s, 105 of the 120 s a spot pool asks for): the drain deadline leaves the hook's start-up inside it."""
    cap = Spot.model_validate({"type": "spot", "shutdownGracePeriod": period})
    spot, window = drain_plan(cap), drain_window(cap)
    assert window.node_shutdown is not None and window.node_shutdown.grace_seconds == period
    assert spot.deadline_seconds < window.node_shutdown.pods_seconds and spot.deadline_seconds < spot.grace_seconds
    assert window.declared == (period == 120) and (cap.node_shutdown is not None) == (period == 120)
    assert window.seconds == spot.deadline_seconds
    assert drain_plan(Reservation(type="reservation", name="r")).deadline_seconds > spot.deadline_seconds
    with pytest.raises(ValueError, match="capacity type 'preemptible'; valid choices: on-demand, spot"):
        capacity_class("preemptible")


def test_drain_reason_is_one_ray_drain_node_accepts() -> None:
    autoscaler_pb2 = _generated("autoscaler_pb2")
    # the CLI offers every enum value but UNSPECIFIED (ray/scripts/scripts.py drain_node --reason)
    assert autoscaler_pb2.DrainNodeReason.Value(DRAIN_REASON) != autoscaler_pb2.DRAIN_NODE_REASON_UNSPECIFIED


# ---- the hook against a real Ray node -------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_node() -> Iterator[tuple[str, dict[str, str]]]:
    """A one-node Ray cluster of this test's own (``ray start --block`` in its own session, killed by id), and
    the environment a pod's hook sees: ``ray`` and ``python`` on the PATH, RAY_ADDRESS pointing at it."""
    # Unix socket paths are short-limited: a short temp dir, not pytest's tmp_path.
    tmp = Path(tempfile.mkdtemp(prefix="trd", dir="/tmp"))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f'#!/bin/sh\nexec {sys.executable} -m ray.scripts.scripts "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    address = f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RAY_ADDRESS": address,
        "HOSTNAME": "tpu-worker-0",
        # token auth off, as on emulate()'s throw-away clusters: a user's own ~/.ray/auth_token (Ray 2.60 writes one
        # when it starts a local cluster with token auth) must not decide whether this node answers
        "RAY_AUTH_MODE": "disabled",
    }
    head = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            f"--port={address.rsplit(':', 1)[1]}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={tmp / 'ray'}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "ray-start.log").open("wb"),
        start_new_session=True,
    )
    try:
        _wait_for_nodes(address, alive=1, head=head, log=tmp / "ray-start.log")
        yield address, env
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the whole session: head, GCS and raylet (nothing to flush)
        head.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def _generated(module: str) -> Any:
    """A protobuf module of Ray (untyped)."""
    return importlib.import_module(f"ray.core.generated.{module}")


def _nodes(address: str) -> list[Any]:
    """Every node the GCS knows, as ``GcsNodeInfo`` (Ray's GCS client; the state API needs the dashboard)."""
    raylet: Any = importlib.import_module("ray._raylet")
    return list(raylet.GcsClient(address=address).get_all_node_info(timeout=10).values())


def _wait_for_nodes(
    address: str, alive: int, head: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    """A readiness guard (Ray's start-up), not a speed bound; a head that exited is said at once, with its log."""
    for _ in range(120):
        if head is not None and head.poll() is not None:
            said = log.read_text(errors="replace")[-2000:] if log else ""
            raise AssertionError(f"ray start exited with {head.returncode}:\n{said}")
        try:
            if sum(1 for n in _nodes(address) if n.state == 0) >= alive:  # 0: ALIVE
                return
        except Exception:
            pass
        time.sleep(1)
    raise AssertionError(f"no live Ray node at {address}")


@pytest.mark.slow
def test_the_hook_drains_its_ray_node_for_preemption(ray_node: tuple[str, dict[str, str]]) -> None:
    common_pb2 = _generated("common_pb2")
    address, env = ray_node
    hook = pre_stop_command(DrainPlan(grace_seconds=10, deadline_seconds=2))
    done = subprocess.run(["/bin/sh", "-c", hook], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    [node] = _nodes(address)
    # The GCS records why the node went away: drained by its owner for preemption, with the pod's message.
    reason = node.death_info.reason
    assert common_pb2.NodeDeathInfo.Reason.Name(reason) == "AUTOSCALER_DRAIN_PREEMPTED", done.stderr
    assert node.death_info.reason_message == "pod tpu-worker-0 is terminating"


def test_a_hook_that_cannot_reach_ray_ends_without_blocking_shutdown(tmp_path: Path) -> None:
    """The node lookup fails, as with a raylet already gone: the hook ends at once, never draining and never
    sleeping out its deadline (stand-ins for ``ray`` and ``sleep`` record any call)."""
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1"}
    env.pop("HOSTNAME", None)
    hook = pre_stop_command(DrainPlan(grace_seconds=10, deadline_seconds=600))
    calls = tmp_path / "calls"
    stand_ins = {"python": "exit 1", "ray": f'echo "ray $*" >> {calls}', "sleep": f'echo "sleep $*" >> {calls}'}
    for name, body in stand_ins.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    done = subprocess.run(["/bin/sh", "-c", hook], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert not calls.exists(), calls.read_text()
    # and where the lookup works, the same stand-ins see the drain and then the wait for its deadline
    (tmp_path / "python").write_text("#!/bin/sh\necho abc123\n")
    done = subprocess.run(["/bin/sh", "-c", hook], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    said = calls.read_text().splitlines()
    assert said[0].startswith("ray drain-node --node-id abc123 ") and said[1:] == ["sleep 600"], said


@pytest.mark.parametrize("capacity", sorted(CAPACITIES))
def test_workers_of_time_limited_vms_are_told_their_lifetime(capacity: str) -> None:
    """Flex-start (and queued with maxRunDuration) VMs go away after maxRunDuration: the workers get it in
    TPURAY_MAX_RUN_SECONDS, so the training side can checkpoint before then; other workers get nothing."""
    from tpuray.components.catalog.names import MAX_RUN_ENV

    cfg = pool(TpuSlice.parse("v6e", "4x4"), capacity, 1)
    [group] = ray_cluster_spec(ray_params(worker_group(cfg)))["workerGroupSpecs"]
    env = {e["name"]: e["value"] for c in group["template"]["spec"]["containers"] for e in c.get("env", [])}
    limit = getattr(cfg.capacity, "max_run_duration", None)
    assert env.get(MAX_RUN_ENV) == (None if limit is None else str(limit))
    assert (MAX_RUN_ENV in env) == (capacity == "flex-start")  # the catalog's queued pool sets no maxRunDuration
