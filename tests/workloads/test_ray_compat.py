"""The Ray-private hooks in one place: installed and removed cleanly, and a missing hook named with the Ray version."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray")

from tests.support.emulated_chips import emulated_chip, on_chips, on_two_chips
from tpuray.workloads import _ray_compat
from tpuray.workloads.xla import portable


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # XLA on this machine's CPU, as on the emulated slice
    yield
    _ray_compat.uninstall_torch_device_manager()


def test_the_xla_manager_answers_ray_trains_device_lookups(clean: None) -> None:
    import importlib

    import ray.air._internal.device_manager as dm

    loop: Any = importlib.import_module("ray.train.torch.train_loop_utils")
    portable.install("CPU")
    manager = dm.get_torch_device_manager_by_context()  # what get_device()/prepare_model ask, on any worker
    assert type(manager).__name__ == "XlaDeviceManager"
    assert manager.get_devices()[0].type == "xla"
    portable.install("TPU")  # a TPU worker whose PyTorch/XLA found no TPU must not train on the host CPU
    with pytest.raises(RuntimeError, match="PJRT_DEVICE=TPU device but PyTorch/XLA runs on CPU"):
        dm.get_torch_device_manager_by_context().get_devices()
    portable.install("CPU")
    manager = dm.get_torch_device_manager_by_context()
    assert loop.get_torch_device_manager_by_device_type("xla") is manager  # what prepare_data_loader's wrapper asks
    assert type(loop.get_torch_device_manager_by_device_type("cpu")).__name__ == "CPUTorchDeviceManager"
    portable.install("CPU")  # installing twice does not stack wrappers
    assert loop.get_torch_device_manager_by_device_type("cpu").__class__.__name__ == "CPUTorchDeviceManager"
    _ray_compat.uninstall_torch_device_manager()
    assert dm._torch_device_manager is None
    with pytest.raises(RuntimeError, match="xla cannot be recognized"):
        loop.get_torch_device_manager_by_device_type("xla")


def test_the_graph_is_cut_once_per_batch(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's loader wrapper enters the stream context for the batch and again for each tensor in it."""
    import torch_xla

    syncs: list[int] = []
    monkeypatch.setattr(torch_xla, "sync", lambda *a, **k: syncs.append(1))
    portable.install("CPU")
    import ray.air._internal.device_manager as dm

    manager: Any = dm.get_torch_device_manager_by_context()
    with manager.get_stream_context(None):
        with manager.get_stream_context(None):
            pass
        with manager.get_stream_context(None):
            pass
    assert len(syncs) == 1
    with manager.get_stream_context(None):
        pass
    assert len(syncs) == 2


def test_a_missing_hook_is_named_with_the_ray_version(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    import ray.air._internal.device_manager as dm

    monkeypatch.delattr(dm, "_torch_device_manager")
    with pytest.raises(_ray_compat.RayHookMissing, match=rf"Ray {ray.__version__} has no .*_torch_device_manager"):
        portable.install("CPU")


def test_a_missing_autoscaling_coordinator_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator as coordinator

    monkeypatch.delattr(coordinator, "get_or_create_autoscaling_coordinator")
    with pytest.raises(_ray_compat.RayHookMissing, match="no get_or_create_autoscaling_coordinator"):
        _ray_compat.ready_train_autoscaling_coordinator()


def test_a_serve_deployment_takes_a_fixed_code_version() -> None:
    """What makes a user_config change reconfigure a serving replica in place; a Serve without the private option
    is named, not run with a random version on every deploy."""
    from ray import serve

    class Replica:
        pass

    deployment: Any = serve.deployment(Replica)
    assert _ray_compat.versioned_deployment(deployment, "v1").version == "v1"
    with pytest.raises(ValueError):
        deployment.options(version="v1")  # the public option is gone: hence the private one

    class NoInternal:
        def options(self, version: str) -> None: ...

    with pytest.raises(_ray_compat.RayHookMissing, match=r"no Deployment.options\(_internal=...\)"):
        _ray_compat.versioned_deployment(NoInternal(), "v1")


def test_an_untested_ray_version_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "__version__", "9.99.0")
    with pytest.warns(UserWarning, match="tested with Ray 2.60, this is Ray 9.99.0"):
        _ray_compat.require_hooks()


def _ddp_graphs(rank: int, world: int, port: int, out: Any) -> None:
    """The one chip of :func:`test_ddp_over_the_emulated_group_runs_two_graphs_per_step`: puts the graphs each of
    its six steps ran."""
    import ray.air._internal.device_manager as dm
    import torch
    import torch_xla.debug.metrics as met
    from torch.nn.parallel import DistributedDataParallel

    def graphs_run() -> int:
        return int((met.metric_data("ExecuteTime") or [0])[0])  # type: ignore[no-untyped-call]

    with emulated_chip(rank, world, port) as dev:
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(8, 1).to(dev), device_ids=[dev], output_device=dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        manager: Any = dm.get_torch_device_manager_by_context()
        ran = [graphs_run()]
        for _ in range(6):
            with manager.get_stream_context(None):  # what prepare_data_loader's wrapper enters per batch
                x = torch.randn(4, 8).to(dev)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            float(loss.detach())
            ran.append(graphs_run())
    out.put([b - a for a, b in itertools.pairwise(ran)])


# one XLA process: its own, since the autograd engine sizes its device queues once per process, and an engine a CPU
# backward started first (another test's, in the same pytest worker) has none for the XLA device
@pytest.mark.slow
@pytest.mark.beside_clusters
def test_ddp_over_the_emulated_group_runs_two_graphs_per_step() -> None:
    """A plain loop on the emulated slice's process group: DDP's gloo copy of the gradients runs the step's whole
    pending graph (forward, backward, loss), so the loss the loop reads costs no graph of its own; with the update
    (run at the next batch) that is two graphs per step, as on the ``optimizer_step`` path."""
    (per_step,) = on_chips(1, _ddp_graphs, ())
    assert per_step[-3:] == [2, 2, 2], per_step


def _compiles_per_path(rank: int, world: int, port: int, portable_path: bool, out: Any) -> None:
    """One chip of an emulated 2-chip run: 6 steps of the same model, through ``prepare_model``'s DDP
    wrapper (no XLA call in the loop) or ``optimizer_step``'s gradient average and ``torch_xla.sync()``; puts
    (which path, compiles after each step, parameters after training)."""
    import importlib

    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    from tpuray.workloads.xla import portable

    with emulated_chip(rank, world, port) as dev:
        # optimizer_step has no initial sync: its chips start from one seed. The portable path's start from
        # different ones, and only prepare_model's wrapper (what Ray Train V2 calls) syncs them.
        torch.manual_seed(rank if portable_path else 0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
        model: torch.nn.Module = net
        if portable_path:
            loop: Any = importlib.import_module("ray.train.v2.torch.train_loop_utils")
            model = loop.DistributedDataParallel(net, device_ids=[dev], output_device=dev)
        # AdamW: its first step also creates its state, so the first update's graph differs from the later ones.
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        compiles = []
        for step in range(6):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * rank + step)).to(dev)
            loss = model(x).pow(2).mean()
            loss.backward()
            if portable_path:
                opt.step()
            else:
                portable.gloo_average([p for g in opt.param_groups for p in g["params"]], world)
                opt.step()
            opt.zero_grad(set_to_none=True)
            if not portable_path:
                torch_xla.sync()
            float(loss.detach())
            compiles.append(int((met.metric_data("CompileTime") or [0])[0]))  # type: ignore[no-untyped-call]
        out.put((portable_path, compiles, [p.detach().cpu().tolist() for p in net.parameters()]))


# four XLA processes (two runs of two emulated chips), no Ray cluster: too heavy for the fast loop (-m 'not slow')
@pytest.mark.slow
def test_the_portable_path_compiles_the_graphs_optimizer_step_does() -> None:
    """Two emulated chips, each seeing different data, train the same model both ways. DDP's reducer (its
    bucket, laid out on the XLA device, and its layout broadcast) compiled 1 to 6 more graphs here than
    ``optimizer_step``, and a loop without an XLA call, whose graph Ray's loader does not cut before the last
    batch, one more. ``prepare_model``'s wrapper must compile the same graphs at the same steps, none after the
    first update's, and keep the chips in sync."""
    results = on_two_chips(_compiles_per_path, (False,), (True,))
    compiles: dict[bool, list[list[int]]] = {False: [], True: []}
    params: dict[bool, list[Any]] = {False: [], True: []}
    for portable_path, n, state in results:
        compiles[portable_path].append(n)
        params[portable_path].append(state)
    assert sorted(compiles[True]) == sorted(compiles[False]), compiles  # per chip, after each step
    assert all(c[1] == c[-1] for c in compiles[True]), compiles  # no graph compiled after the second step
    assert params[True][0] == params[True][1]  # both chips, though each started and trained differently
    assert params[False][0] == params[False][1]


def _accumulate(rank: int, world: int, port: int, out: Any) -> None:
    """One chip of two: a backward inside ``no_sync()`` then one outside it, through ``prepare_model``'s wrapper;
    puts (rank, gradient after the first, gradient after the second, whether a comm hook was refused)."""
    import importlib

    import torch

    with emulated_chip(rank, world, port) as dev:
        loop: Any = importlib.import_module("ray.train.v2.torch.train_loop_utils")
        model = loop.DistributedDataParallel(torch.nn.Linear(2, 1, bias=False).to(dev), device_ids=[dev])
        weight = model.module.weight
        with model.no_sync():  # gradient accumulation: this backward must not average
            model(torch.full((3, 2), float(rank + 1)).to(dev)).sum().backward()
        local = weight.grad.cpu().tolist()
        model(torch.full((1, 2), 10.0 * (rank + 1)).to(dev)).sum().backward()
        averaged = weight.grad.cpu().tolist()
        try:
            model.register_comm_hook(None, lambda state, bucket: bucket)
            refused = False
        except NotImplementedError:
            refused = True
        out.put((rank, local, averaged, refused))


# two XLA processes (two emulated chips), no Ray cluster: too heavy for the fast loop (-m 'not slow')
@pytest.mark.slow
def test_no_sync_accumulates_and_the_next_backward_averages_the_sum() -> None:
    """DDP's gradient accumulation on the emulated slice's wrapper: inside ``no_sync()`` each chip keeps its own
    gradient; the next backward averages the accumulated sums over the chips. DDP's reducer hooks are refused by
    name, not silently ignored."""
    results = sorted(on_two_chips(_accumulate, ()))
    # d(sum(w . x))/dw is the batch's sum of x: 3 rows of (r + 1), then one row of 10 (r + 1)
    assert [local for _, local, _, _ in results] == [[[3.0, 3.0]], [[6.0, 6.0]]]
    mean = ((3.0 + 10.0) + (6.0 + 20.0)) / 2
    assert [avg for _, _, avg, _ in results] == [[[mean, mean]], [[mean, mean]]]
    assert all(refused for *_, refused in results)
