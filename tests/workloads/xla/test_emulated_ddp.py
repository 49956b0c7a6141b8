"""The emulated slice's DistributedDataParallel beside stock DDP over gloo on CPU, two processes each: every row of
the model contract (:mod:`portable_contract`) gives the same kind of result on both, and what the emulated wrapper
cannot do (DDP's reducer options) is refused at construction, by name."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.emulated_chips import emulated_chip, on_two_chips
from tests.support.portable_contract import MODEL_ROWS, check_no_sync, make_net, model_rows, run_rows

pytest.importorskip("ray")

# four spawned processes (two emulated chips, two gloo ranks), each importing torch and torch_xla
pytestmark = [pytest.mark.slow, pytest.mark.beside_clusters]


def _contract(rank: int, world: int, port: int, emulated: bool, out: Any) -> None:
    """One process of a two-process run: the model rows on ``prepare_model``'s wrapper over the emulated slice's
    group, or on stock DDP over gloo on CPU; puts (emulated, rank, rows, refusal)."""
    import importlib
    from contextlib import nullcontext

    import torch
    import torch.distributed as dist

    loop: Any = importlib.import_module("ray.train.v2.torch.train_loop_utils")  # what prepare_model calls
    if emulated:
        chip: Any = emulated_chip(rank, world, port)
    else:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        chip = nullcontext(torch.device("cpu"))
    with chip as dev:
        model = loop.DistributedDataParallel(make_net().to(dev))
        rows = run_rows(model_rows(model, dev, rank, dist.barrier))
        refusal = run_rows(
            {"static_graph": lambda: type(loop.DistributedDataParallel(make_net().to(dev), static_graph=True)).__name__}
        )
        dist.barrier()
    if not emulated:
        dist.destroy_process_group()
    out.put((emulated, rank, rows, refusal["static_graph"]))


@pytest.fixture(scope="module")
def runs() -> dict[bool, list[Any]]:
    """Both two-process runs at once: {emulated: [(rows, refusal) by rank]}."""
    results = sorted(on_two_chips(_contract, (True,), (False,)), key=lambda r: (r[0], r[1]))
    return {e: [(rows, refusal) for emulated, _, rows, refusal in results if emulated == e] for e in (True, False)}


@pytest.mark.parametrize("row", MODEL_ROWS)
def test_the_emulated_ddp_keeps_the_model_contract(runs: dict[bool, list[Any]], row: str) -> None:
    for emulated in (True, False):
        assert sorted(runs[emulated][0][0]) == sorted(MODEL_ROWS)
    per_backend = {e: [rows[row] for rows, _ in runs[e]] for e in (True, False)}
    for e, results in per_backend.items():
        for r in results:
            assert "ok" in r, (("emulated" if e else "stock gloo"), r)
    if row == "model.no_sync":
        for results in per_backend.values():
            check_no_sync([r["ok"] for r in results])
    else:
        assert per_backend[True] == per_backend[False]


def test_ddp_options_that_need_the_reducer_are_refused_by_name(runs: dict[bool, list[Any]]) -> None:
    for _, refusal in runs[False]:
        assert refusal == {"ok": "DistributedDataParallel"}  # stock DDP takes static_graph
    for _, refusal in runs[True]:
        assert refusal["error"].startswith("ValueError: prepare_model(parallel_strategy_kwargs={'static_graph': True})")
        assert "on TPUs (the xla process group) prepare_model builds plain DDP" in refusal["error"]
