"""TorchTPU: the per-device env derivation, the Ray Train callback that sets it, and the per-device scaling config
(torch_tpu and TPUs are not available here; test_tpuray_env_matches_torch_tpu.py checks the env against torch_tpu's
own code)."""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuray.components.catalog.names import (
    EMULATED_SLICE_ENV,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
)
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.probe import probe
from tpuray.workloads.placement.seats import PlacementError, Seat
from tpuray.workloads.placement.worker_env import DeviceSeat, host_major_seats, torch_tpu_env
from tpuray.workloads.torch_tpu import callback as torch_tpu
from tpuray.workloads.torch_tpu.callback import slice_envs

SPECS = ["v5e:2x2", "v5e:4x4", "v5p:2x2x2", "v6e:4x4", "v6e:2x4:ct6e-standard-4t", "tpu7x:2x2x1", "tpu7x:2x2x2"]


@pytest.mark.parametrize("spec", SPECS)
def test_one_address_per_device_host_major(spec: str) -> None:
    s = TpuSlice.parse(spec)
    hosts = [f"h{w}" for w in range(s.hosts)]
    env = torch_tpu_env(s, host_major_seats(s, hosts), port=8471)
    addresses = env["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    per_host = s.chips_per_host * (2 if s.generation == "tpu7x" else 1)
    assert len(addresses) == s.chips * (2 if s.generation == "tpu7x" else 1) == s.devices
    where = hosts if s.multi_host else ["localhost"]
    assert addresses == [f"{h}:{8471 + i}" for h in where for i in range(per_host)]
    assert env["TORCH_TPU_DEVICES_PER_HOST"] == str(per_host)
    assert env["NNODES"] == str(s.hosts)
    dims = ",".join(map(str, s.dims))
    assert env["TORCH_TPU_TOPOLOGY"] == (dims + ",2" if s.generation == "tpu7x" else dims)


@given(st.sampled_from(SPECS), st.randoms(use_true_random=False))
def test_address_of_each_rank_is_its_own_host_whatever_the_rank_order(spec: str, rnd: random.Random) -> None:
    s = TpuSlice.parse(spec)
    seats = host_major_seats(s, [f"10.0.0.{w}" for w in range(s.hosts)])
    rnd.shuffle(seats)  # Ray orders a slice's ranks by actor creation only
    addresses = torch_tpu_env(s, seats)["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    for rank, seat in enumerate(seats):
        host, port = addresses[rank].rsplit(":", 1)
        assert host == seat.host and int(port) == 8471 + seat.device
    assert len(set(addresses)) == len(addresses)


def test_seats_that_are_not_one_per_device_are_refused() -> None:
    s = TpuSlice.parse("tpu7x:2x2x2")
    seats = host_major_seats(s, ["a", "b"])
    with pytest.raises(ValueError, match="16 devices but 8 ranks"):
        torch_tpu_env(s, seats[::2])
    twice = [*seats[:-1], seats[0]]
    with pytest.raises(ValueError, match=r"missing \[\(1, 7\)\]"):
        torch_tpu_env(s, twice)
    with pytest.raises(ValueError, match="address of its own"):
        torch_tpu_env(s, [DeviceSeat("a", x.worker_id, x.device) for x in seats])


def _labels(s: TpuSlice, name: str, worker_id: int) -> dict[str, str]:
    return {
        RAY_POD_TYPE_LABEL: s.pod_type,
        RAY_TOPOLOGY_LABEL: s.topology,
        RAY_SLICE_NAME_LABEL: name,
        RAY_WORKER_ID_LABEL: str(worker_id),
    }


def _rank_seats(spec: str, slices: int, shuffle: int) -> list[Seat]:
    s = TpuSlice.parse(spec)
    out = []
    for k in range(slices):
        seats = host_major_seats(s, [f"10.{k}.0.{w}" for w in range(s.hosts)])
        random.Random(shuffle + k).shuffle(seats)
        name = f"slice-{k}"
        out += [Seat(0, k, name, x.worker_id, -1, x.host, labels=_labels(s, name, x.worker_id)) for x in seats]
    return [dataclasses.replace(x, actor_index=i) for i, x in enumerate(out)]


@pytest.mark.parametrize("spec", ["v5p:2x2x2", "tpu7x:2x2x2", "v6e:2x4:ct6e-standard-4t"])
def test_each_slice_of_a_multislice_run_gets_its_own_list(spec: str) -> None:
    seats = _rank_seats(spec, slices=2, shuffle=3)
    envs = slice_envs(seats)
    s = TpuSlice.parse(spec)
    for k in range(2):
        members = [i for i, x in enumerate(seats) if x.slice_name == f"slice-{k}"]
        assert len(members) == s.devices
        lists = {envs[i]["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for i in members}
        assert len(lists) == 1  # the same list on every rank of the slice
        addresses = lists.pop().split(",")
        assert all(a.startswith(f"10.{k}.") for a in addresses)
        on_host: dict[str, int] = {}
        for r, i in enumerate(members):  # entry r of the slice's list is that rank's own host, its next device
            device = on_host.setdefault(seats[i].address, 0)
            on_host[seats[i].address] += 1
            assert addresses[r] == f"{seats[i].address}:{8471 + device}"
        assert sorted(on_host.values()) == [s.devices_per_host] * s.hosts


def test_a_slice_with_a_worker_per_chip_on_tpu7x_is_refused_with_the_fix() -> None:
    seats = _rank_seats("tpu7x:2x2x2", 1, 0)[:8]
    with pytest.raises(PlacementError, match=r"one worker per device, 16 on a tpu7x:2x2x2 slice"):
        slice_envs(seats)


class _FakeGroup:
    """A Ray Train worker group whose workers report ``seats`` (``execute_single_async`` runs nothing remote; the
    tests make ``ray.get`` the identity), recording what the callback applies and whether it shut the group down."""

    def __init__(self, seats: list[Seat]) -> None:
        self.seats = seats
        self.applied: dict[int, dict[str, str]] = {}
        self.watchers: dict[int, bool] = {}
        self.cache_calls: dict[int, tuple[Any, ...]] = {}
        self.shut = False

    def __len__(self) -> int:
        return len(self.seats)

    def get_resources_per_worker(self) -> dict[str, float]:
        return {"TPU": 1}

    def execute_single_async(self, i: int, fn: Any, *args: Any) -> Any:
        if fn is probe:
            assert args == (i, "torch_tpu")
            return self.seats[i]
        if fn is torch_tpu._enable_cache:
            self.cache_calls[i] = args
            return None
        self.applied[i] = args[0]
        self.watchers[i] = args[1]
        return args[0]

    def shutdown(self) -> None:
        self.shut = True


def test_callback_sets_the_env_before_the_backend_and_keeps_what_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    seats = _rank_seats("v5p:2x2x2", 1, 5)
    monkeypatch.setattr(ray, "get", lambda refs: list(refs))
    group = _FakeGroup(seats)
    torch_tpu.TorchTpuEnvCallback().after_worker_group_start(group)
    applied = group.applied
    assert sorted(applied) == list(range(len(seats)))
    assert {e["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for e in applied.values()} == {
        slice_envs(seats)[0]["TORCH_TPU_SLICEBUILDER_ADDRESSES"]
    }
    # one drain watcher per host: its lowest rank
    hosts = {(s.slice_name, s.worker_id) for s in seats}
    watchers = [s for s in seats if group.watchers[s.actor_index]]
    assert sorted((s.slice_name, s.worker_id) for s in watchers) == sorted(hosts)
    for w in watchers:
        assert w.actor_index == min(
            s.actor_index for s in seats if (s.slice_name, s.worker_id) == (w.slice_name, w.worker_id)
        )


def test_callback_points_each_worker_at_the_compile_cache_before_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    seats = _rank_seats("v5p:2x2x2", 2, 7)  # two slices, ranks in an order that is not host-major
    monkeypatch.setattr(ray, "get", lambda refs: list(refs))
    group = _FakeGroup(seats)
    torch_tpu.TorchTpuEnvCallback().after_worker_group_start(group)
    shape = TpuSlice.parse("v5p:2x2x2")
    assert group.cache_calls == {i: (s.actor_index, shape, 2) for i, s in enumerate(seats)}


def test_the_worker_sets_the_tier3_root_under_the_stacks_key_and_keeps_a_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tpuray.components.catalog.compile_cache_key import CACHE_URL_ENV, WORKER_IMAGE_ENV
    from tpuray.workloads.api import compile_cache

    monkeypatch.setattr(compile_cache, "runtime_version", lambda backend: "torch_tpu-0.2.0+libtpu-0.0.50")
    monkeypatch.setattr(compile_cache, "_current", None)
    monkeypatch.setenv(CACHE_URL_ENV, "gs://ckpt/compile-cache/")
    monkeypatch.setenv(WORKER_IMAGE_ENV, "us-docker.pkg.dev/p/r/worker@sha256:" + "c" * 64)
    monkeypatch.delenv(compile_cache.TORCH_TPU_CACHE_ENV, raising=False)
    got = torch_tpu._enable_cache(3, TpuSlice.parse("v5p:2x2x2"), 2)
    want = "gs://ckpt/compile-cache/torch_tpu-torch_tpu-0.2.0+libtpu-0.0.50/v5p-16-2x2x2-x2/" + "c" * 16
    assert got == want and os.environ[compile_cache.TORCH_TPU_CACHE_ENV] == want
    monkeypatch.setenv(compile_cache.TORCH_TPU_CACHE_ENV, "gs://mine/cache")
    assert torch_tpu._enable_cache(0, TpuSlice.parse("v5p:2x2x2"), 2) == "gs://mine/cache"
    monkeypatch.delenv(CACHE_URL_ENV)
    assert torch_tpu._enable_cache(0, TpuSlice.parse("v5p:2x2x2"), 2) is None  # a stack with the cache off


def test_apply_keeps_a_variable_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TPU_TOPOLOGY", "pinned")
    monkeypatch.delenv("TORCH_TPU_BASE_PORT", raising=False)
    monkeypatch.delenv(EMULATED_SLICE_ENV, raising=False)
    standin = torch_tpu._apply({"TORCH_TPU_TOPOLOGY": "2,2,2", "TORCH_TPU_BASE_PORT": "8471"})
    assert (os.environ["TORCH_TPU_TOPOLOGY"], os.environ["TORCH_TPU_BASE_PORT"]) == ("pinned", "8471")
    assert standin is False  # a TPU host: never the stand-in


def test_apply_takes_what_depends_on_the_live_workers_from_the_live_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """After an elastic resize a replacement pod can carry a larger job's multislice env and another group's address
    list: the start drops the one (Ray writes the live group's after, across slices) and replaces the other."""
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "3")
    monkeypatch.setenv("MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.99:8080")
    monkeypatch.setenv("TORCH_TPU_SLICEBUILDER_ADDRESSES", "10.0.0.99:8476")
    monkeypatch.delenv(EMULATED_SLICE_ENV, raising=False)
    torch_tpu._apply({"TORCH_TPU_SLICEBUILDER_ADDRESSES": "10.0.0.1:8476,10.0.0.1:8477"})
    assert not [k for k in os.environ if k.startswith("MEGASCALE_")]
    assert os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"] == "10.0.0.1:8476,10.0.0.1:8477"


def test_callback_leaves_a_pytorch_xla_tpu_run_alone() -> None:
    """A stack's pods name the callback for every trainer: a PyTorch/XLA run on TPU workers (XlaChipConfig's process
    group) gets nothing from it, and no stand-in."""
    from types import SimpleNamespace

    from tpuray.workloads.xla import XlaChipConfig

    class Group:
        _train_run_context = SimpleNamespace(backend_config=XlaChipConfig())

        def get_resources_per_worker(self) -> dict[str, float]:
            return {"TPU": 1}

        def execute_single_async(self, *a: Any) -> Any:
            raise AssertionError("a PyTorch/XLA run: nothing to ask the workers")

    torch_tpu.TorchTpuEnvCallback().after_worker_group_start(Group())


def test_callback_leaves_runs_without_tpus_alone() -> None:
    class Group:
        def get_resources_per_worker(self) -> dict[str, float]:
            return {"CPU": 1}

        def execute_single_async(self, *a: Any) -> Any:
            raise AssertionError("no TPU: nothing to ask the workers")

    torch_tpu.TorchTpuEnvCallback().after_worker_group_start(Group())


def test_the_callback_path_the_stack_names_is_this_class() -> None:
    import importlib

    module, name = torch_tpu.CALLBACK_PATH.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) is torch_tpu.TorchTpuEnvCallback
    # Ray Train V2 accepts only RayTrainCallback subclasses from RAY_TRAIN_CALLBACKS
    from ray.train.v2._internal.callbacks.env_callback import _initialize_env_callbacks

    with pytest.MonkeyPatch.context() as m:
        m.setenv("RAY_TRAIN_CALLBACKS", torch_tpu.CALLBACK_PATH)
        (cb,) = _initialize_env_callbacks()
    assert isinstance(cb, torch_tpu.TorchTpuEnvCallback)


def test_per_device_scaling_on_tpu7x_needs_ray_counting_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuray.workloads.api.scaling import tpu_scaling_config

    monkeypatch.delenv("RAY_TPU_RESOURCE_PER_CHIP", raising=False)
    with pytest.raises(ValueError, match="RAY_TPU_RESOURCE_PER_CHIP=2"):
        tpu_scaling_config("tpu7x:2x2x2", backend="torch_tpu")
    monkeypatch.setenv("RAY_TPU_RESOURCE_PER_CHIP", "2")
    sc = tpu_scaling_config("tpu7x:2x2x2", num_slices=2, backend="torch_tpu")
    assert (sc.num_workers, sc.resources_per_worker) == (32, {"TPU": 1, "CPU": 1 / 8})
    monkeypatch.delenv("RAY_TPU_RESOURCE_PER_CHIP")
    v6e = tpu_scaling_config("v6e:4x4", backend="torch_tpu")  # one device per chip: as for xla
    assert (v6e.num_workers, v6e.resources_per_worker) == (16, {"TPU": 1, "CPU": 1 / 4})


def test_gpt_trainer_runs_ray_s_own_path_with_the_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.train import RunConfig

    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.gpt.metrics import ModelShape

    s = TpuSlice.parse("v6e:4x4")
    job = GptJob(ModelShape(64, 1, 16, 2, 8), 4, 1, 1e-3, 2, str(s))
    from tpuray.workloads.gpt.loop import train_gpt
    from tpuray.workloads.launch import trainer as launch_trainer

    monkeypatch.setenv("RAY_TRAIN_CALLBACKS", "")
    rc = RunConfig(name="r", storage_path="/tmp/x")
    trainer = launch_trainer(train_gpt, {"job": job}, s, 1, rc, backend="torch_tpu")
    assert trainer.scaling_config.num_workers == s.devices
    assert trainer.backend_config.backend == "tpu_dist"  # Ray's own choice for TPU workers (torch_trainer.py)
    # first, ahead of Ray's own callbacks (its backend's start among them), where the stack's pods name it
    first, *rest = trainer._create_default_callbacks()
    assert type(first) is torch_tpu.TorchTpuEnvCallback and not trainer.run_config.callbacks
    assert not [c for c in rest if type(c) is torch_tpu.TorchTpuEnvCallback]
    assert os.environ["RAY_TRAIN_CALLBACKS"] == ""  # nothing of the process changed: the next trainer is its own
    monkeypatch.setenv("RAY_TRAIN_CALLBACKS", torch_tpu.CALLBACK_PATH)  # named by the stack: not twice
    named = launch_trainer(train_gpt, {"job": job}, s, 1, rc, backend="torch_tpu")._create_default_callbacks()
    assert [type(c) for c in named].count(torch_tpu.TorchTpuEnvCallback) == 1


def test_each_runtime_refuses_the_other_and_a_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from tpuray.workloads.api.runtime import RuntimeMismatch, require_runtime

    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)  # other tests of this process may have imported it
    require_runtime("xla")  # this environment is the torch_xla one
    lacks = r"needs torch_tpu, which this environment lacks; install tpuray\[torch-tpu\]"
    with pytest.raises(RuntimeMismatch, match=lacks):
        require_runtime("torch_tpu")
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    with pytest.raises(RuntimeMismatch, match="torch_xla is already imported"):
        require_runtime("torch_tpu")
    monkeypatch.setitem(sys.modules, "torch_tpu", types.ModuleType("torch_tpu"))
    with pytest.raises(RuntimeMismatch, match="torch_tpu is already imported"):
        require_runtime("xla")


def test_train_refuses_torch_tpu_in_an_xla_image_before_ray_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    import ray

    from tpuray.workloads.gpt import cli as train

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started"))
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)  # other tests of this process may have imported it
    assert train.main(["--address", "auto", "--topology", "v5e:2x2", "--backend", "torch_tpu", "--steps", "1"]) == 2
    assert "needs torch_tpu, which this environment lacks" in capsys.readouterr().err


def test_a_failed_start_releases_the_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "get", lambda refs: list(refs))
    cb = torch_tpu.TorchTpuEnvCallback()
    ok = _FakeGroup(_rank_seats("v5e:2x2", 1, 0))
    with cb.on_worker_group_start():
        cb.after_worker_group_start(ok)
    assert not ok.shut  # a start that succeeds keeps its group
    failed = _FakeGroup(_rank_seats("v5e:2x2", 1, 0))
    with pytest.raises(RuntimeError, match="torch_tpu could not start"), cb.on_worker_group_start():
        cb.after_worker_group_start(failed)
        raise RuntimeError("torch_tpu could not start")  # as Ray's backend raises after the callback
    assert failed.shut  # Ray 2.60 would keep the slice reserved


class _BackendGroup:
    """What Ray's ``_TorchBackend._setup_tpu_multislice`` calls on a worker group: it records each worker's env."""

    def __init__(self, n: int) -> None:
        self.n, self.envs = n, [dict[str, str]() for _ in range(n)]

    def __len__(self) -> int:
        return self.n

    def execute_single_async(self, i: int, fn: Any, tpu_env_vars: dict[str, str]) -> None:
        self.envs[i] = dict(tpu_env_vars)


@pytest.mark.parametrize("slices", [1, 2])
def test_across_slices_ray_names_the_port_torch_tpus_coordinator_listens_on(
    monkeypatch: pytest.MonkeyPatch, slices: int
) -> None:
    """Ray 2.60's own backend, run after the callback as Ray runs it, points every worker's
    MEGASCALE_COORDINATOR_ADDRESS at rank 0's host and MEGASCALE_PORT once torch_tpu has overwritten it (8080,
    torch_tpu_coordinator_port), not at Ray's 8081 (rank 0's MEGASCALE_DEBUG_PORT by then); the controller's own
    MEGASCALE_PORT is put back after the start, and a single slice is left as Ray has it."""
    import ray
    from ray.train.torch.config import _TorchBackend

    from tpuray.components.catalog.runtime_ports import torch_tpu_coordinator_port, torch_tpu_megascale_ports

    monkeypatch.setattr(ray, "get", lambda refs: list(refs) if refs is not None else None)
    monkeypatch.setenv("MEGASCALE_PORT", "1234")  # the controller's own value, e.g. one the TPU webhook injected
    seats = _rank_seats("tpu7x:2x2x2", slices, 7)
    cb = torch_tpu.TorchTpuEnvCallback()
    backend = _BackendGroup(len(seats))
    with cb.on_worker_group_start():
        cb.after_worker_group_start(_FakeGroup(seats))
        _TorchBackend()._setup_tpu_multislice(backend, "10.0.0.0", 2)  # type: ignore[arg-type]
    assert os.environ["MEGASCALE_PORT"] == "1234"
    addresses = {e["MEGASCALE_COORDINATOR_ADDRESS"] for e in backend.envs}
    if slices == 1:
        assert addresses == {"10.0.0.0:1234"}  # Ray's, from the controller's env: one slice needs no coordinator
        return
    coordinator = torch_tpu_coordinator_port()
    assert addresses == {f"10.0.0.0:{coordinator}"}
    assert coordinator == torch_tpu_megascale_ports(0)[0] == 8080  # rank 0's MEGASCALE_PORT after torch_tpu's overwrite
    assert {e["MEGASCALE_SLICE_ID"] for e in backend.envs} == {"0", "1"}
