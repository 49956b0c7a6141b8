"""The worker env: chip_env against torch_xla's own configure_topology (run with the environment GKE + the
webhook provide), self-consistent process counts, TORCH_TPU_*, MEGASCALE_* and the emulated webhook env."""

from __future__ import annotations

import os
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.runtimes import runtime_ports
from tpuray.components.catalog.topology import GENERATIONS, TpuSlice, valid_topologies
from tpuray.workloads.placement.worker_env import (
    bounds_size,
    chip_env,
    emulated_host_env,
    hostnames_from_env,
    megascale_env,
    task_id,
)

tpu = pytest.importorskip("torch_xla._internal.tpu")

PJRT_KEYS = (
    "TPU_VISIBLE_CHIPS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    "TPU_PROCESS_ADDRESSES",
    "TPU_PROCESS_PORT",
    "CLOUD_TPU_TASK_ID",
)
COMMON_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16")


def _slices() -> list[TpuSlice]:
    out = []
    for g in GENERATIONS:
        topos = valid_topologies(g.name) if g.ndims == 2 else [t for t in COMMON_3D if t in valid_topologies(g.name)]
        for topo in topos:
            for machine in g.machine_types:
                try:
                    out.append(TpuSlice.parse(g.name, topo, machine))
                except ValueError:
                    continue  # this machine type does not serve this shape
    return out


SLICES = _slices()


def _hostnames(s: TpuSlice) -> list[str]:
    return [f"tpu-{s.generation}-{w}.svc" for w in range(s.hosts)] if s.multi_host else []


def torch_xla_env(s: TpuSlice, worker_id: int, chip: int, hostnames: list[str], base_port: int) -> dict[str, str]:
    """What torch_xla's configure_topology sets, given what a GKE TPU pod has (no metadata server)."""
    fake = {
        "TPU_SKIP_MDS_QUERY": "1",
        "TPU_ACCELERATOR_TYPE": s.pod_type,
        "TPU_HOST_BOUNDS": ",".join(map(str, s.host_bounds)),
        "TPU_CHIPS_PER_HOST_BOUNDS": ",".join(map(str, s.chips_per_host_bounds)),
        "TPU_WORKER_ID": str(worker_id),
        "TPU_WORKER_HOSTNAMES": ",".join(hostnames),
    }
    with mock.patch.dict(os.environ, fake, clear=True):
        tpu.configure_topology(chip, s.chips_per_host, base_port)
        env = {k: os.environ[k] for k in PJRT_KEYS}
    if s.spec.devices_per_chip == 2:
        # torch_xla 2.9 appends ",2" on tpu7x while starting one process per chip; a per-chip worker here owns
        # both devices of its chip and announces one process per chip (see worker_env.process_bounds)
        assert env["TPU_PROCESS_BOUNDS"].endswith(",2")
        env["TPU_PROCESS_BOUNDS"] = env["TPU_PROCESS_BOUNDS"].removesuffix(",2")
    return env


def test_catalog_covers_every_generation() -> None:
    assert {s.generation for s in SLICES} == {g.name for g in GENERATIONS}
    assert any(s.spec.devices_per_chip == 2 for s in SLICES)  # the tpu7x quirk is exercised


@pytest.mark.parametrize("s", SLICES, ids=str)
def test_matches_torch_xla_at_the_corners(s: TpuSlice) -> None:
    hostnames = _hostnames(s)
    for worker_id in sorted({0, s.hosts - 1}):
        for chip in sorted({0, s.chips_per_host - 1}):
            assert chip_env(s, worker_id, chip, hostnames) == torch_xla_env(s, worker_id, chip, hostnames, 8476)


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(st.sampled_from(SLICES), st.data(), st.integers(1024, 60000))
def test_matches_torch_xla_anywhere(s: TpuSlice, data: st.DataObject, base_port: int) -> None:
    worker_id = data.draw(st.integers(0, s.hosts - 1))
    chip = data.draw(st.integers(0, s.chips_per_host - 1))
    hostnames = _hostnames(s)
    assert chip_env(s, worker_id, chip, hostnames, base_port) == torch_xla_env(s, worker_id, chip, hostnames, base_port)


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
@given(st.sampled_from([s for s in SLICES if s.chips <= 256]))
def test_task_ids_and_ports_are_unique_per_slice(s: TpuSlice) -> None:
    hostnames = _hostnames(s)
    envs = [chip_env(s, w, c, hostnames) for w in range(s.hosts) for c in range(s.chips_per_host)]
    assert sorted(int(e["CLOUD_TPU_TASK_ID"]) for e in envs) == list(range(s.chips))
    endpoints = envs[0]["TPU_PROCESS_ADDRESSES"].split(",")
    assert len(endpoints) == len(set(endpoints)) == (s.chips if s.multi_host else s.chips_per_host)
    # the bounds announce exactly the processes the addresses list (tpu7x included)
    assert bounds_size(envs[0]["TPU_PROCESS_BOUNDS"]) == len(endpoints)
    for w in range(s.hosts):
        for c in range(s.chips_per_host):
            # a process's own endpoint is listed at its task id
            mine = endpoints[task_id(s, w, c)].rsplit(":", 1)[1] if s.multi_host else None
            assert mine is None or mine == chip_env(s, w, c, hostnames)["TPU_PROCESS_PORT"]


def test_rejects_out_of_range_places() -> None:
    s = TpuSlice.parse("v5e", "4x4")
    hosts = _hostnames(s)
    with pytest.raises(ValueError, match="worker_id"):
        chip_env(s, s.hosts, 0, hosts)
    with pytest.raises(ValueError, match="chip"):
        chip_env(s, 0, s.chips_per_host, hosts)
    with pytest.raises(ValueError, match="hostnames"):
        chip_env(s, 0, 0, hosts[:-1])


def test_hostnames_from_env() -> None:
    assert hostnames_from_env({"TPU_WORKER_HOSTNAMES": "a, b,c"}) == ["a", "b", "c"]
    assert hostnames_from_env({}) == []


def test_megascale_only_across_slices() -> None:
    assert megascale_env("h0", 1, 0) == {}
    env = megascale_env("h0", 3, 2, chip=1, port=9999)
    assert env["MEGASCALE_NUM_SLICES"] == "3" and env["MEGASCALE_SLICE_ID"] == "2"
    # the coordinator is chip 0's process of host 0, named with its port; this process binds a port of its own
    assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "h0:9999" and env["MEGASCALE_PORT"] == "10000"


def test_megascale_port_is_one_per_process_of_a_host() -> None:
    """Each process binds MEGASCALE_PORT, so the processes of one host cannot share it (Ray 2.60 gives each
    TorchTPU worker 8081 + LOCAL_RANK; the webhook each v7x container 8081 + container)."""
    s = TpuSlice.parse("v5litepod:2x4")  # one 8-chip host
    ports = [int(megascale_env("h0", 2, 1, chip=c)["MEGASCALE_PORT"]) for c in range(s.chips_per_host)]
    assert ports == list(range(8081, 8089))
    (megascale,) = [r for r in runtime_ports(s, "xla") if r.name == "tpu-megascale"]
    assert set(ports) == set(megascale.ports)


def test_emulated_host_env_is_what_the_webhook_injects() -> None:
    s = TpuSlice.parse("v5p:2x2x2")
    env = emulated_host_env(s, "sl", 1)
    assert (env["TPU_NAME"], env["TPU_WORKER_ID"]) == ("sl", "1")
    assert hostnames_from_env(env) == ["sl-0.local", "sl-1.local"]
    assert env["PJRT_DEVICE"] == "CPU"
    assert "TPU_WORKER_HOSTNAMES" not in emulated_host_env(TpuSlice.parse("v5e:2x2"), "one", 0)


def test_emulated_chips_get_xla_flags_xla_reads_and_the_users_come_last() -> None:
    from tpuray.workloads.emulation.cluster import host_node_spec
    from tpuray.workloads.placement.worker_env import EMULATED_XLA_FLAGS

    # XLA ignores what follows a token that is not a flag: every token must be one of its --xla_ flags
    assert all(t.startswith("--xla_") and "=" in t for t in EMULATED_XLA_FLAGS.split())
    s = TpuSlice.parse("v5e:2x2")
    assert host_node_spec(s, "sl", 0).env["XLA_FLAGS"] == EMULATED_XLA_FLAGS
    mine = "--xla_backend_optimization_level=3 --xla_dump_to=/tmp/hlo"
    assert host_node_spec(s, "sl", 0, mine).env["XLA_FLAGS"] == f"{EMULATED_XLA_FLAGS} {mine}"
    assert host_node_spec(s, "sl", 0, EMULATED_XLA_FLAGS).env["XLA_FLAGS"] == EMULATED_XLA_FLAGS  # not twice


def test_base_port_names_its_valid_range() -> None:
    s = TpuSlice.parse("v5e:2x2")
    with pytest.raises(ValueError, match=r"base_port 65532: must be 1\.\.65531"):
        chip_env(s, 0, 0, [], base_port=65532)
    assert chip_env(s, 0, 3, [], base_port=65531)["TPU_PROCESS_PORT"] == "65534"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_an_emulated_clusters_metrics_interval_is_a_positive_number_of_seconds(bad: float) -> None:
    from tpuray.workloads.emulation.cluster import EmulatedCluster

    with pytest.raises(ValueError, match=r"metrics_interval_s: a number of seconds > 0"):
        EmulatedCluster(TpuSlice.parse("v5e:2x2"), metrics_interval_s=bad)  # refused before any Ray process starts
