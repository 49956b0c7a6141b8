"""The rows of the portable-API contract: what a GPU-style Ray Train script does with what ``prepare_model``,
``prepare_data_loader`` and ``get_dataset_shard`` hand it, each row a function that returns a JSON-able summary of
its result (the same on every backend that keeps the contract) or raises.

:func:`run_rows` runs every row and records each one's summary or its error, so one failing row does not hide the
others; the test compares the summaries across ranks and backends. The same rows run on two spawned emulated chips
(``test_emulated_ddp.py``) and in the Ray Train contract run (``test_portable_contract.py``).
"""

from __future__ import annotations

import copy
import io
import pickle
import traceback
from collections.abc import Callable
from typing import Any

import torch

Row = Callable[[], Any]


def run_rows(rows: dict[str, Row]) -> dict[str, dict[str, Any]]:
    """``{name: {"ok": summary}}`` or ``{name: {"error": "Type: message", "where": last frame}}`` per row."""
    out: dict[str, dict[str, Any]] = {}
    for name, row in rows.items():
        try:
            out[name] = {"ok": row()}
        except Exception as e:  # a row's failure is its result
            frame = traceback.extract_tb(e.__traceback__)[-1]
            out[name] = {"error": f"{type(e).__name__}: {e}"[:600], "where": f"{frame.filename}:{frame.lineno}"}
    return out


def make_net() -> torch.nn.Module:
    """The contract's model: no buffers (DDP syncs buffers before each forward, a collective that an evaluation on
    one rank only would wait on forever, on GPUs too)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _values(m: torch.nn.Module) -> list[list[float]]:
    return [p.detach().cpu().reshape(-1).tolist() for p in m.parameters()]


def _grads(m: torch.nn.Module) -> list[list[float]]:
    return [p.grad.detach().cpu().reshape(-1).tolist() if p.grad is not None else [] for p in m.parameters()]


def model_rows(model: Any, device: torch.device, rank: int, barrier: Callable[[], None]) -> dict[str, Row]:
    """The rows on a prepared (DDP-wrapped) ``model`` whose parameters live on ``device``; ``barrier`` waits for
    every rank (``torch.distributed.barrier``)."""
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(rank)).to(device)

    def deepcopy() -> Any:
        twin = copy.deepcopy(model)
        with torch.no_grad():
            same = torch.equal(twin(x).cpu(), model(x).cpu())
            next(twin.parameters()).add_(1.0)  # the copy is its own model
        independent = _values(twin) != _values(model)
        on_device = all(p.device == device for p in twin.parameters())
        return {
            "same_type": type(twin) is type(model),
            "same_output": same,
            "independent": independent,
            "on_device": on_device,
        }

    def pickled() -> Any:
        twin = pickle.loads(pickle.dumps(model))
        return {"same_type": type(twin) is type(model), "same_values": _values(twin) == _values(model)}

    def torch_save_model() -> Any:
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        twin = torch.load(buf, weights_only=False)
        return {"same_type": type(twin) is type(model), "same_values": _values(twin) == _values(model)}

    def state_dict_keys() -> Any:
        return sorted(model.state_dict()) == sorted(f"module.{k}" for k in model.module.state_dict())

    def module_state_dict_on_cpu() -> Any:
        buf = io.BytesIO()
        torch.save(model.module.state_dict(), buf)
        buf.seek(0)
        state = torch.load(buf, map_location="cpu", weights_only=True)
        plain = make_net()
        plain.load_state_dict(state)
        return {
            "devices": sorted({v.device.type for v in state.values()}),
            "same_values": _values(plain) == _values(model.module),
        }

    def load_state_dict() -> Any:
        before = _values(model)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        result = model.load_state_dict(state)
        return {"restored": _values(model) == before, "missing": list(result.missing_keys)}

    def module() -> Any:
        return {"plain": not isinstance(model.module, type(model)), "type": type(model.module).__name__}

    def train_eval() -> Any:
        returned = model.eval()
        evaluating = not model.training and not model.module.training
        model.train()
        return {"eval_returns_model": returned is model, "eval": evaluating, "train_again": model.module.training}

    def no_sync() -> Any:
        model.zero_grad(set_to_none=True)
        with model.no_sync():
            model(x).sum().backward()
        local = _grads(model)
        model(x).sum().backward()
        accumulated = _grads(model)
        model.zero_grad(set_to_none=True)
        return {"local": local, "accumulated": accumulated}

    def named_parameters() -> Any:
        names = [n for n, _ in model.named_parameters()]
        return {
            "names_under_module": names == [f"module.{n}" for n, _ in model.module.named_parameters()],
            "on_device": all(p.device == device for _, p in model.named_parameters()),
        }

    def parameters_on_device() -> Any:
        return sorted({str(p.device) == str(device) for p in model.parameters()})

    def eval_on_one_rank() -> Any:
        out = None
        if rank == 0:
            model.eval()
            with torch.no_grad():
                out = model(x).shape[0]
            model.train()
        barrier()  # a collective rank 0's evaluation started would pair with this one, and fail or hang
        return {"rows": out if rank == 0 else 6}

    return {
        "model.deepcopy": deepcopy,
        "model.pickle": pickled,
        "model.torch_save": torch_save_model,
        "model.state_dict_keys": state_dict_keys,
        "model.module_state_dict_on_cpu": module_state_dict_on_cpu,
        "model.load_state_dict": load_state_dict,
        "model.module": module,
        "model.train_eval": train_eval,
        "model.no_sync": no_sync,
        "model.named_parameters": named_parameters,
        "model.parameters_on_device": parameters_on_device,
        "model.eval_on_one_rank": eval_on_one_rank,
    }


MODEL_ROWS = (
    "model.deepcopy",
    "model.pickle",
    "model.torch_save",
    "model.state_dict_keys",
    "model.module_state_dict_on_cpu",
    "model.load_state_dict",
    "model.module",
    "model.train_eval",
    "model.no_sync",
    "model.named_parameters",
    "model.parameters_on_device",
    "model.eval_on_one_rank",
)
"""The names :func:`model_rows` returns, in its order (for test ids, known before any row runs)."""


def check_no_sync(per_rank: list[Any]) -> None:
    """Inside ``no_sync()`` each rank keeps its own gradient; the next backward averages the accumulated sums."""
    local = [r["local"] for r in per_rank]
    accumulated = [r["accumulated"] for r in per_rank]
    assert local[0] != local[1], "no_sync() averaged the gradients"
    assert all(a == accumulated[0] for a in accumulated), "the backward after no_sync() did not average"
    for a, *ls in zip(accumulated[0], *local, strict=True):
        mean = [sum(v) / len(ls) for v in zip(*ls, strict=True)]
        assert all(abs(m * 2 - g) < 1e-4 for m, g in zip(mean, a, strict=True))  # twice the mean: two backwards
