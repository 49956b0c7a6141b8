"""Serving on the shared emulated cluster (``emulated_slices``: two single-host v5e 2x2 slices, a two-host v5p
2x2x2 slice, a v6e 1x1): two replicas of :func:`tpuray.workloads.serving.slice_app`, each owning one v5e slice,
through a lost host, a config-only update in place and a drained host. Where each replica's workers run is read
from the workers' own answers (their Ray node ids, slice labels, chips and XLA devices), never from what the
replica asked for."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tpuray.workloads import _ray_compat

if TYPE_CHECKING:
    from tpuray.workloads.emulation.cluster import EmulatedCluster

pytestmark = pytest.mark.slow

ROWS = [[float(i * 4 + j) / 10 for j in range(4)] for i in range(8)]
WAIT_S = 180.0
"""How long a step may take before the test stops waiting and says which (a hang guard, not a measurement)."""


def _close(got: list[list[float]], want: list[list[float]]) -> bool:
    return len(got) == len(want) and all(g == pytest.approx(w, abs=1e-5) for g, w in zip(got, want, strict=True))


def _reference(seed: int) -> list[list[float]]:
    import torch

    from tpuray.workloads.serving.example import tiny_model

    with torch.no_grad():
        out: list[list[float]] = tiny_model({"seed": seed})(torch.tensor(ROWS)).tolist()
    return out


def _app(head_node_id: str, seed: int) -> Any:
    from tpuray.workloads.serving import slice_app
    from tpuray.workloads.serving.example import tiny_model

    return slice_app(
        tiny_model,
        "v5e:2x2",
        num_replicas=2,
        user_config={"seed": seed},
        name="tiny",
        health_check_period_s=1.0,
        # the replicas route; pinned to the head so that losing a TPU host takes the workers of one replica only
        ray_actor_options={"label_selector": {"ray.io/node-id": head_node_id}},
    )


def _replicas(handle: Any, want: int = 2, tries: int = 40) -> dict[str, dict[str, Any]]:
    """Each replica's latest answer, by replica id, asking until ``want`` replicas have answered."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(tries):
        out = handle.remote(ROWS).result(timeout_s=WAIT_S)
        seen[out["replica"]] = out
        if len(seen) >= want:
            break
    return seen


def _slice_of(answer: dict[str, Any]) -> str:
    """The one slice a replica's workers run on; fails the test if they straddle slices."""
    names = {h["slice_name"] for h in answer["hosts"]}
    assert len(names) == 1, f"replica {answer['replica']}'s workers straddle slices {sorted(names)}"
    return str(names.pop())


def _check_one_slice_each(cluster: EmulatedCluster, answers: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Replica id -> its slice, checked from the workers: one whole v5e slice each (one worker on that slice's
    host as the cluster knows it, holding all four chips, its SPMD program over four devices, each device holding
    its quarter of the output), and no slice shared."""
    v5e = [n for n in cluster.slice_names() if "v5litepod-4" in n]
    slices = {}
    for rid, a in answers.items():
        name = _slice_of(a)
        assert name in v5e, f"replica {rid} serves from {name}, not a v5e slice {v5e}"
        (host,) = a["hosts"]  # a single-host slice: one worker
        assert host["node_id"] == cluster.host_node_id(name, 0)
        assert sorted(host["chips"]) == [0, 1, 2, 3] and host["devices"] == 4
        whole = len(ROWS) * len(a["outputs"][0]) * 4  # float32 bytes of the whole output
        assert sorted(host["shard_bytes"].values()) == [whole // 4] * 4, host["shard_bytes"]
        slices[rid] = name
    assert len(set(slices.values())) == len(slices), f"two replicas share a slice: {slices}"
    return slices


def _pids(answers: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    return {rid: [h["pid"] for h in a["hosts"]] for rid, a in answers.items()}


class _Client(threading.Thread):
    """Sends the batch one request after another until stopped, retrying a failed request once, as docs/serving.md
    tells a client that must not lose one (a request in flight on a slice when its host goes fails: Serve's router
    retries a request only while it picks a replica, ray/serve/_private/router.py, Ray 2.60); keeps every answer,
    every first failure (``retried``) and every request that failed twice (``failures``)."""

    def __init__(self, handle: Any) -> None:
        super().__init__(daemon=True)
        self.handle, self.stop = handle, threading.Event()
        self.answers: list[dict[str, Any]] = []
        self.retried: list[str] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for attempt in range(2):
                try:
                    self.answers.append(self.handle.remote(ROWS).result(timeout_s=WAIT_S))
                    break
                except Exception as e:  # every failure is kept and shown by the test
                    (self.retried if attempt == 0 else self.failures).append(repr(e))


@pytest.fixture
def serve_on(emulated_slices: EmulatedCluster) -> Iterator[EmulatedCluster]:
    """Serve on the shared cluster, without an HTTP proxy; afterwards Serve is shut down and no placement group is
    left for the tests that come after."""
    import ray
    from ray import serve

    serve.start(proxy_location="Disabled")
    try:
        yield emulated_slices
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + 60
        while (live := _live_placement_groups(ray)) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not live, f"placement groups left on the shared cluster: {live}"


def _live_placement_groups(ray: Any) -> list[str]:
    return [pg["placement_group_id"] for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]


def test_two_replicas_own_two_slices_through_a_lost_host_a_config_update_and_a_drain(
    serve_on: EmulatedCluster,
) -> None:
    from ray import serve

    cluster = serve_on
    t0 = time.monotonic()
    handle = serve.run(_app(cluster.head_node_id, seed=0), name="tiny")
    answers = _replicas(handle)
    assert len(answers) == 2, f"two replicas should answer, got {sorted(answers)}"
    slices = _check_one_slice_each(cluster, answers)
    for a in answers.values():
        assert _close(a["outputs"], _reference(0)), a["outputs"]
    print(f"deployed and answered by both replicas: {time.monotonic() - t0:.1f} s")

    # one v5e host goes; the other replica keeps answering, and the lost replica comes back on the new host
    lost_replica, lost_slice = sorted(slices.items())[0]
    kept_replica = next(r for r in slices if r != lost_replica)
    client = _Client(handle)
    client.start()
    deadline = time.monotonic() + WAIT_S
    while not client.answers and time.monotonic() < deadline:  # the client is answered before the host goes
        time.sleep(0.05)
    assert client.answers, f"the client got no answer within {WAIT_S} s; failures: {client.failures}"
    t1 = time.monotonic()
    new_node = cluster.replace_host(cluster.host_node_id(lost_slice, 0))
    deadline = time.monotonic() + WAIT_S
    back: dict[str, Any] | None = None
    while back is None and time.monotonic() < deadline:
        back = next((a for a in list(client.answers) if a["hosts"][0]["node_id"] == new_node), None)
        time.sleep(0.2)
    client.stop.set()
    client.join(WAIT_S)
    print(
        f"lost host replaced and its replica back: {time.monotonic() - t1:.1f} s; "
        f"{len(client.answers)} answers, retried {client.retried}, failures {client.failures}"
    )
    assert back is not None, f"no replica came back on the replacement host; failures: {client.failures}"
    assert back["replica"] not in slices, "the replica on the lost slice should be a new one"
    assert _slice_of(back) == lost_slice
    assert not client.failures, "a request failed on its retry too"
    # at most the one request in flight on the lost slice (the client sends one at a time), and only as a lost slice
    assert len(client.retried) <= 1, client.retried
    assert all("ActorDied" in f or "SliceLost" in f for f in client.retried), client.retried
    assert any(a["replica"] == kept_replica for a in client.answers)

    # a config-only update: the deployment's code version is fixed, so Serve calls reconfigure on the running
    # replicas (ray/serve/_private/version.py, Ray 2.60), which reload the model on the workers they have
    before = _replicas(handle)
    assert set(before) == {kept_replica, back["replica"]}, sorted(before)
    t2 = time.monotonic()
    handle = serve.run(_app(cluster.head_node_id, seed=1), name="tiny")
    updated = _replicas(handle)
    print(f"config update in place: {time.monotonic() - t2:.1f} s")
    assert set(updated) == set(before), f"the update should keep the replicas {sorted(before)}, got {sorted(updated)}"
    assert _pids(updated) == _pids(before), "the update should keep the replicas' worker processes"
    for a in updated.values():
        assert a["config"] == {"seed": 1}
        assert _close(a["outputs"], _reference(1)), a["outputs"]
    _check_one_slice_each(cluster, updated)

    # a drained host (a TPU pod's preStop hook: `ray drain-node`, then the VM goes at its deadline): its replica
    # moves off while the host is still up, the other keeps answering, and a new one comes back on the new host
    drained_replica, drained_slice = sorted(_check_one_slice_each(cluster, updated).items())[0]
    other = next(r for r in updated if r != drained_replica)
    host = cluster.host_node_id(drained_slice, 0)
    # the preStop hook holds the pod until the deadline; here an actor holds the node, which Ray would otherwise end
    # once the drain left it idle
    keeper = _hold(host)
    client = _Client(handle)
    client.start()
    t3 = time.monotonic()
    _drain(host)
    moved = _wait_for(lambda: _answered_without(handle, drained_replica))
    # still draining, not gone: the GCS drops a node from its draining nodes when it dies
    # (src/ray/gcs/gcs_node_manager.cc, RemoveNode, Ray 2.60)
    alive_when_moved = host in _ray_compat.draining_nodes()
    del keeper
    new_node = cluster.replace_host(host)
    back = None
    deadline = time.monotonic() + WAIT_S
    while back is None and time.monotonic() < deadline:
        back = next((a for a in list(client.answers) if a["hosts"][0]["node_id"] == new_node), None)
        time.sleep(0.2)
    client.stop.set()
    client.join(WAIT_S)
    print(f"drained host left and its replica back: {time.monotonic() - t3:.1f} s; retried {client.retried}")
    assert moved, f"replica {drained_replica} still answers from the draining host {host}"
    assert alive_when_moved, "the replica should move off the drained host before the host goes"
    assert back is not None and back["replica"] != drained_replica and _slice_of(back) == drained_slice
    assert back["config"] == {"seed": 1} and _close(back["outputs"], _reference(1))
    assert not client.failures, "a request failed on its retry too"
    assert any(a["replica"] == other for a in client.answers)


def _drain(node_id: str) -> None:
    """``ray drain-node`` as the pods' preStop hook runs it (tpuray.components.planning.drain)."""
    import os
    import subprocess
    import sys

    import ray

    gcs = ray.get_runtime_context().gcs_address
    drain = [sys.executable, "-m", "ray.scripts.scripts", "drain-node", "--address", gcs, "--node-id", node_id]
    drain += ["--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "test: the TPU VM is going away"]
    drain += ["--deadline-remaining-seconds", "120"]
    done = subprocess.run(drain, capture_output=True, text=True, env=os.environ.copy(), timeout=WAIT_S)
    assert done.returncode == 0, done.stderr


def _answered_without(handle: Any, replica: str) -> bool:
    """Whether one request was answered by a replica other than ``replica``. A request in flight on the replica as it
    ends itself fails (the client's first try above may too): that says nothing yet, so it is False."""
    try:
        return replica not in _replicas(handle, want=1, tries=1)
    except Exception as e:  # only the ending replica's own failures are expected here
        if "ActorDied" in repr(e) or "SliceLost" in repr(e):
            return False
        raise


def _hold(node_id: str) -> Any:
    """An idle actor on ``node_id``, started."""
    ray = pytest.importorskip("ray")

    @ray.remote(num_cpus=0, label_selector={"ray.io/node-id": node_id})
    class Keeper:
        def ready(self) -> bool:
            return True

    keeper = Keeper.remote()  # type: ignore[attr-defined]
    ray.get(keeper.ready.remote(), timeout=WAIT_S)
    return keeper


def _wait_for(ready: Any, within_s: float = 60.0) -> bool:
    """Whether ``ready()`` came true (checked again and again) before ``within_s``: a hang guard, not a measure."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.2)
    return False
