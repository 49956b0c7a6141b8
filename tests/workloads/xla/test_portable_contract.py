"""The portable API's contract: one GPU-style train function, run on an emulated slice (``tpu_scaling_config`` +
``XlaChipConfig``) and on stock CPU Ray Train with as many workers (``ScalingConfig(num_workers=N)``, gloo), does
with what Ray Train hands it everything a script does besides training (:mod:`portable_contract`'s model rows, and
the prepare_model, loader, Ray Data, checkpoint and precision rows here); each row gives the same kind of result on
both. One slice: the multi-host ``v5p:2x2x2`` (8 chips on two hosts), where a row meets everything a one-host
slice has and a second host besides. (The one-host ``v5e:2x2`` of the guide's example runs a GPU-style script under
Ray Tune, checked chip by chip there: seats and env, shards, equal parameters (test_tune_on_emulated_slices.py).
The contract ran there too until its 75 s, the suite's third-longest run, bought no fact the multi-host run does
not check.) The emulated run also shows what a GPU-style script relies on without naming it: one worker per chip
with its seat's PJRT env (:func:`chip_seats.check_seats`), the loader's shards splitting the data over the chips,
and no program compiled per step once the first steps are done.

Suite time: every row runs inside ONE Ray Train run per backend (the row results are written per rank); the
emulated run holds one planned restart (``get_checkpoint()`` after a restart: the one row that needs a second
attempt; on two hosts, so the restarted workers are seated again across both). The stock run holds none: after a
restart stock Ray Train hands ``get_checkpoint()`` its latest checkpoint, the one its result names, and the row is
read from that in the driver (8 more CPU workers started for no other fact).
Each test below reads the shared results of one row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import portable_contract
from tests.support.chip_seats import ENV_PREFIXES, Seat, check_seats
from tests.support.portable_contract import MODEL_ROWS, check_no_sync, make_net, model_rows, run_rows
from tpuray.workloads import XlaChipConfig, tpu_scaling_config
from tpuray.workloads.sharding.prepare import FSDP_ON_TPU

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SHAPE = "v5p:2x2x2"
"""The emulated slice the contract runs on: two hosts of four chips."""
WORKERS = 8
"""Its chips: the workers of both runs."""
SAMPLES = 256  # 32 rows per chip: enough steps to count graphs after the warm-up
BATCH = 8
WARM_UP_STEPS = 2
"""Steps that may compile: the first update's graphs, and the second step's (its gradients exist from the first)."""

OTHER_ROWS = (
    "prepare_model.ddp_kwargs",
    "prepare_model.move_to_device_false",
    "prepare_model.fsdp",
    "reproducibility.enable_reproducibility",
    "device.get_device_before_prepare_model",
    "precision.bf16_autocast",
    "precision.fp16_autocast",
    "precision.grad_scaler",
    "loader.set_epoch",
    "loader.len",
    "loader.dataset",
    "loader.batch_size",
    "loader.iterate_twice",
    "loader.add_dist_sampler_false",
    "loader.move_to_device_false",
    "loader.without_sampler",
    "data.iter_torch_batches_default_device",
    "data.iter_torch_batches_cpu",
    "data.iter_batches",
    "data.graphs_per_step",
    "checkpoint.report_every_rank",
    "checkpoint.report_rank_0",
)
RESTART_ROWS = ("checkpoint.get_checkpoint_after_restart",)
ROWS = (*MODEL_ROWS, *OTHER_ROWS, *RESTART_ROWS)


def helper_device() -> Any:
    """A script's own helper that asks for the device before anything is prepared."""
    import ray.train.torch

    return ray.train.torch.get_device()


def contract_train(config: dict[str, Any]) -> None:
    """Every row, on every rank; the first attempt ends in a planned failure, the second reads its checkpoint."""
    import os
    import tempfile

    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch.amp.grad_scaler import GradScaler
    from torch.utils.data import DataLoader, TensorDataset

    out = Path(config["out"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()

    def seat() -> dict[str, Any]:
        """Where Ray put this worker (Ray Train's node rank goes by IP, which every emulated host shares: the host is
        its Ray node and its labels)."""
        runtime = ray.get_runtime_context()
        tpus = runtime.get_accelerator_ids().get("TPU", [])
        return {
            "dist_rank": dist.get_rank(),
            "ray_chip": int(tpus[0]) if tpus else None,
            "node": runtime.get_node_id(),
            "labels": {str(k): str(v) for k, v in runtime.get_node_labels().items()},
            "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
        }

    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        rows = run_rows({"checkpoint.get_checkpoint_after_restart": lambda: read_checkpoint(ckpt)})
        (out / f"restart-{rank}.json").write_text(json.dumps({"rows": rows, "seat": seat()}))
        ray.train.report({"attempt": 2})
        return

    device = helper_device()
    on_xla = device.type == "xla"

    def graphs(metric: str = "ExecuteTime") -> int:
        """How many XLA graphs this process ran so far (``CompileTime``: compiled)."""
        import torch_xla.debug.metrics as met

        return int((met.metric_data(metric) or [0])[0])  # type: ignore[no-untyped-call]

    def reproducibility() -> Any:
        ray.train.torch.enable_reproducibility(seed=3)
        return {"deterministic": torch.are_deterministic_algorithms_enabled()}

    rows = run_rows({"reproducibility.enable_reproducibility": reproducibility})
    torch.use_deterministic_algorithms(False)
    model: Any = ray.train.torch.prepare_model(make_net())
    rows |= run_rows(
        {"device.get_device_before_prepare_model": lambda: all(p.device == device for p in model.parameters())}
    )
    rows |= run_rows(model_rows(model, device, rank, dist.barrier))

    def ddp_kwargs() -> Any:
        net: Any = make_net()
        net.register_parameter("unused", torch.nn.Parameter(torch.zeros(2)))  # no forward reaches it
        m = ray.train.torch.prepare_model(
            net, parallel_strategy_kwargs={"find_unused_parameters": True, "broadcast_buffers": False}
        )
        m(torch.ones(2, 4).to(device)).sum().backward()
        return {
            "find_unused_parameters": m.find_unused_parameters,
            "broadcast_buffers": m.broadcast_buffers,
            "trained": net[0].weight.grad is not None,
        }

    def move_to_device_false() -> Any:
        net = make_net().to(device)
        m = ray.train.torch.prepare_model(net, move_to_device=False)
        return {"wrapped": m.module is net, "on_device": all(p.device == device for p in m.parameters())}

    def bf16() -> Any:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            y = model(torch.ones(2, 4).to(device))
        return str(y.dtype)

    def fp16() -> Any:
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            y = model(torch.ones(2, 4).to(device))
        return str(y.dtype)

    rows |= run_rows(
        {
            "prepare_model.ddp_kwargs": ddp_kwargs,
            "prepare_model.move_to_device_false": move_to_device_false,
            "prepare_model.fsdp": lambda: type(ray.train.torch.prepare_model(make_net(), parallel_strategy="fsdp")),
            "precision.bf16_autocast": bf16,
            "precision.fp16_autocast": fp16,
            "precision.grad_scaler": lambda: type(GradScaler("cuda")).__name__,
        }
    )

    g = torch.Generator().manual_seed(7)
    data = TensorDataset(torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g))
    loader: Any = ray.train.torch.prepare_data_loader(DataLoader(data, batch_size=BATCH, shuffle=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(xb: Any, yb: Any) -> None:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        float(loss.detach())

    def iterate_twice() -> Any:
        epochs = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            batches = [(xb, yb) for xb, yb in loader]
            epochs.append([len(batches), all(xb.device == device for xb, _ in batches)])
        return epochs

    seen: list[float] = []  # the rows of the loader's epoch this rank trained on
    compiled: dict[str, list[int]] = {"loader": [], "ray_data": []}  # on the chips: compiled so far, after each step

    def loader_graphs() -> Any:
        counts = []
        for xb, yb in loader:
            seen.extend(xb[:, 0].cpu().tolist())
            before = graphs() if on_xla else 0
            step(xb, yb)
            if on_xla:
                counts.append(graphs() - before)
                compiled["loader"].append(graphs("CompileTime"))
        return counts if on_xla else None

    def plain_loader(**kwargs: Any) -> Any:
        m = ray.train.torch.prepare_data_loader(DataLoader(data, batch_size=BATCH), **kwargs)
        xb, _ = next(iter(m))
        if kwargs.get("move_to_device") is False:
            return {"batches": len(m), "on_host": xb.device.type == "cpu"}
        return {"batches": len(m), "on_device": xb.device == device}

    def without_sampler() -> Any:
        m = ray.train.torch.prepare_data_loader(DataLoader(data, batch_size=None))
        xb, _ = next(iter(m))
        return {"batches": len(m), "shape": list(xb.shape), "on_device": xb.device == device}

    loader_counts = loader_graphs()
    rows |= run_rows(
        {
            "loader.set_epoch": lambda: [type(loader.sampler).__name__, loader.sampler.set_epoch(3)],
            "loader.len": lambda: len(loader),
            "loader.dataset": lambda: loader.dataset is data,
            "loader.batch_size": lambda: loader.batch_size,
            "loader.iterate_twice": iterate_twice,
            "loader.add_dist_sampler_false": lambda: plain_loader(add_dist_sampler=False),
            "loader.move_to_device_false": lambda: plain_loader(move_to_device=False),
            "loader.without_sampler": without_sampler,
        }
    )

    shard = ray.train.get_dataset_shard("train")

    def torch_batches(**kwargs: Any) -> Any:
        got = [
            (b["x"].device == (device if not kwargs else torch.device("cpu")), len(b["x"]))
            for b in shard.iter_torch_batches(batch_size=BATCH, **kwargs)
        ]
        return {"on_expected_device": all(d for d, _ in got), "rows": sum(n for _, n in got)}

    def ray_data_graphs() -> Any:
        if not on_xla:
            return None
        counts = []
        for b in shard.iter_torch_batches(batch_size=BATCH):
            before = graphs()
            step(b["x"], b["y"])
            counts.append(graphs() - before)
            compiled["ray_data"].append(graphs("CompileTime"))
        return {"ray_data": counts[1:], "loader": loader_counts[WARM_UP_STEPS:]}  # after the first updates' compiles

    rows |= run_rows(
        {
            "data.iter_torch_batches_default_device": torch_batches,
            "data.iter_torch_batches_cpu": lambda: torch_batches(device="cpu"),
            "data.iter_batches": lambda: sorted({type(b["x"]).__name__ for b in shard.iter_batches(batch_size=BATCH)}),
            "data.graphs_per_step": ray_data_graphs,
        }
    )

    def report_every_rank() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / f"rank-{rank}.json").write_text(json.dumps({"rank": rank}))
            ray.train.report({"report": 1}, checkpoint=ray.train.Checkpoint.from_directory(tmp))
        return True

    def report_rank_0() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if rank == 0:
                torch.save(model.module.state_dict(), Path(tmp) / "model.pt")
                saved = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report({"report": 2}, checkpoint=saved)
        return True

    rows |= run_rows({"checkpoint.report_every_rank": report_every_rank, "checkpoint.report_rank_0": report_rank_0})
    params = [p.detach().cpu().reshape(-1).tolist() for p in model.module.parameters()]
    doc = {"rows": rows, "params": params, "world": world, "seat": seat(), "seen": seen, "compiled": compiled}
    (out / f"rows-{rank}.json").write_text(json.dumps(doc, default=str))
    if config["restart"]:
        # Ray Train V2 hands the controller one report per worker per poll (a queue of one, ray/train/v2/_internal/
        # execution/worker_group/worker.py, poll_status), and a poll that also carries the error can end the attempt
        # before the checkpoint's report is registered (CI saw the restart read report 1's checkpoint): this report
        # without a checkpoint waits, in the queue's put, until that one was taken
        ray.train.report({"report": 3})
        raise RuntimeError("planned restart: the next attempt reads get_checkpoint()")


def read_checkpoint(ckpt: Any) -> dict[str, Any]:
    """What a checkpoint of the contract holds, once loaded into a plain model: its files and state keys."""
    import os

    import torch

    with ckpt.as_directory() as d:
        files = sorted(os.listdir(d))
        state = torch.load(Path(d) / "model.pt", map_location="cpu", weights_only=True)
    plain = make_net()
    plain.load_state_dict(state)
    return {"files": files, "keys": sorted(state)}


@pytest.fixture(scope="module", autouse=True)
def by_value() -> None:
    for module in (sys.modules[__name__], portable_contract):
        ray.cloudpickle.register_pickle_by_value(module)  # Ray workers cannot import these test modules


def _fit(tmp: Path, emulated: bool) -> dict[str, Any]:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    workers, restart = WORKERS, emulated
    out = tmp / ("emulated" if emulated else "stock")
    out.mkdir()
    import numpy as np

    def features(r: dict[str, Any]) -> dict[str, Any]:
        return {"x": np.full(4, r["id"] / SAMPLES, dtype=np.float32), "y": np.full(1, 0.5, dtype=np.float32)}

    # One block per worker: Ray Data's default splits 256 rows into dozens of read tasks, each wanting a worker
    # process of its own on a cold cluster (the first run's first batch waited 18 s for them here, 5 s this way)
    g = ray.data.range(SAMPLES, override_num_blocks=workers).map(features)
    result = TorchTrainer(
        contract_train,
        train_loop_config={"out": str(out), "restart": restart},
        # the only lines that differ between the runs
        scaling_config=tpu_scaling_config(SHAPE) if emulated else ScalingConfig(num_workers=workers),
        torch_config=XlaChipConfig() if emulated else None,
        datasets={"train": g},
        run_config=RunConfig(
            storage_path=str(tmp / "storage"), name=out.name, failure_config=FailureConfig(1 if restart else 0)
        ),
    ).fit()
    ranks = [json.loads((out / f"rows-{r}.json").read_text()) for r in range(workers)]
    if not emulated:  # what get_checkpoint() hands every rank after a stock restart
        (row,) = RESTART_ROWS
        after = json.loads(json.dumps(run_rows({row: lambda: read_checkpoint(result.checkpoint)})))
        for r in ranks:
            r["rows"] |= after
    if restart:
        restarts = [json.loads((out / f"restart-{r}.json").read_text()) for r in range(workers)]
        for r, again in zip(ranks, restarts, strict=True):
            r["rows"] |= again["rows"]
            r["restart_seat"] = again["seat"]
    return {"result": result, "ranks": ranks}


@pytest.fixture(scope="module")
def runs(emulated_slices: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two runs, emulated and stock."""
    tmp = tmp_path_factory.mktemp("contract")
    return {"emulated": _fit(tmp, True), "stock": _fit(tmp, False)}


def _row(runs: dict[str, dict[str, Any]], backend: str, row: str) -> list[dict[str, Any]]:
    return [r["rows"][row] for r in runs[backend]["ranks"]]


REFUSED_ON_CHIPS = {
    "precision.fp16_autocast": "float16 autocast (TPUs compute in bfloat16) is not supported on this worker's XLA chip "
    '(PJRT_DEVICE=CPU): torch.autocast("xla", dtype=torch.bfloat16)',
    "precision.grad_scaler": "GradScaler (fp16 loss scaling) is not supported on this worker's XLA chip "
    "(PJRT_DEVICE=CPU): drop it: bfloat16 needs no loss scaling",
}
"""What tpuray refuses on the chips, by name and with the TPU alternative (stock CPU Ray Train runs them)."""


COMPARED_ROWS = [r for r in ROWS if r not in ("model.no_sync", "data.graphs_per_step", *REFUSED_ON_CHIPS)]
"""The rows whose results must be equal on both runs (the others have tests of their own below)."""


@pytest.mark.parametrize("row", COMPARED_ROWS)
def test_a_row_gives_the_same_result_on_the_emulated_slice_as_on_stock_ray_train(
    runs: dict[str, dict[str, Any]], row: str
) -> None:
    for backend in runs:
        assert sorted(runs[backend]["ranks"][0]["rows"]) == sorted(ROWS)
    emulated, stock = _row(runs, "emulated", row), _row(runs, "stock", row)
    if row == "prepare_model.fsdp":
        # refused on both, before any torch call: by Ray itself on a CPU worker, and on the chips by tpuray, naming
        # what shards a model on TPUs instead (Ray's own refusal there would say only "GPU-enabled training")
        for r in stock:
            assert r["error"].startswith("RuntimeError: FSDP is only available with GPU-enabled training"), r
        for r in emulated:
            assert r["error"].startswith(f"ValueError: {FSDP_ON_TPU[:60]}") and "fsdp_v2" in r["error"], r
        return
    assert all("ok" in r for r in stock), stock
    assert all("ok" in r for r in emulated), emulated
    assert emulated == stock


def _check_seats(seats: list[dict[str, Any]]) -> None:
    """One worker per chip of the slice, with its seat's PJRT env, and each host's chips on one Ray node."""
    from tpuray.components.catalog.topology import TpuSlice

    s = TpuSlice.parse(SHAPE)
    check_seats(s, [Seat(x["dist_rank"], x["ray_chip"], x["labels"], x["env"]) for x in seats])
    by_node: dict[str, list[tuple[str, str]]] = {}
    for x in seats:
        by_node.setdefault(x["node"], []).append((x["env"]["TPU_WORKER_ID"], x["env"]["TPU_VISIBLE_CHIPS"]))
    chips = [str(c) for c in range(s.chips_per_host)]
    assert sorted(sorted(on_host) for on_host in by_node.values()) == [
        [(str(host), c) for c in chips] for host in range(s.hosts)
    ]


def test_the_emulated_slices_workers_are_its_chips_host_by_host(runs: dict[str, dict[str, Any]]) -> None:
    ranks = runs["emulated"]["ranks"]
    assert [r["world"] for r in ranks] == [len(ranks)] * len(ranks) == [WORKERS] * WORKERS
    _check_seats([r["seat"] for r in ranks])
    _check_seats([r["restart_seat"] for r in ranks])  # the restarted workers are seated again, across both hosts


def test_the_loader_shards_the_data_over_the_workers(runs: dict[str, dict[str, Any]]) -> None:
    for backend, run in runs.items():
        seen = [v for r in run["ranks"] for v in r["seen"]]
        assert len(seen) == len(set(seen)) == SAMPLES, backend  # every row once, on one worker


def test_nothing_compiles_per_step_after_the_first_steps(runs: dict[str, dict[str, Any]]) -> None:
    for r in runs["emulated"]["ranks"]:
        loader, ray_data = r["compiled"]["loader"], r["compiled"]["ray_data"]  # after each step of each epoch
        assert len(loader) >= WARM_UP_STEPS + 2 and loader[WARM_UP_STEPS - 1] == loader[-1], r["compiled"]
        assert len(ray_data) >= 2 and ray_data[0] == ray_data[-1], r["compiled"]  # its batches: the loader's shapes


@pytest.mark.parametrize("row", sorted(REFUSED_ON_CHIPS))
def test_float16_is_refused_on_the_chips_with_the_bfloat16_alternative(
    runs: dict[str, dict[str, Any]], row: str
) -> None:
    assert all("ok" in r for r in _row(runs, "stock", row)), _row(runs, "stock", row)
    for r in _row(runs, "emulated", row):
        assert r["error"].startswith(f"RuntimeError: {REFUSED_ON_CHIPS[row]}"), r


def test_no_sync_keeps_each_ranks_gradient_and_the_next_backward_averages(runs: dict[str, dict[str, Any]]) -> None:
    for backend in runs:
        results = _row(runs, backend, "model.no_sync")
        assert all("ok" in r for r in results), results
        check_no_sync([r["ok"] for r in results])


def test_ray_data_runs_the_graphs_per_step_the_loader_does(runs: dict[str, dict[str, Any]]) -> None:
    for r in _row(runs, "stock", "data.graphs_per_step"):
        assert r == {"ok": None}  # no XLA graphs on CPU workers
    for r in _row(runs, "emulated", "data.graphs_per_step"):
        counts = r["ok"]
        assert counts["ray_data"] and set(counts["ray_data"]) == set(counts["loader"]) == {2}, counts


def test_the_chips_trained_in_sync_and_their_checkpoint_loads_on_cpu(runs: dict[str, dict[str, Any]]) -> None:
    import torch

    for backend, run in runs.items():
        params = [r["params"] for r in run["ranks"]]
        assert all(p == params[0] for p in params), backend
        result = run["result"]
        assert result.error is None, backend
        every_rank, rank_0 = (c for c, _ in result.best_checkpoints[:2])
        with every_rank.as_directory() as d:
            assert sorted(p.name for p in Path(d).iterdir()) == sorted(f"rank-{r}.json" for r in range(len(params)))
        with rank_0.as_directory() as d:
            state = torch.load(Path(d) / "model.pt", map_location="cpu", weights_only=True)
        plain = make_net()
        plain.load_state_dict(state)
        assert [p.detach().reshape(-1).tolist() for p in plain.parameters()] == params[0], backend
