"""What Hugging Face Transformers (through Accelerate) and PyTorch Lightning read on a per-chip worker, set to agree
with :class:`~tpuray.workloads.XlaChipConfig`'s setup. The backend calls :func:`install` on every worker once the
process group exists (after :func:`tpuray.workloads.xla.portable.install`), and :func:`uninstall` as the group ends.

- The torchrun variables stock Ray Train sets on every worker (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``,
  ``RANK``, ``WORLD_SIZE``, and ``ACCELERATE_TORCH_DEVICE``), by Ray's own function
  (:func:`tpuray.workloads._ray_compat.set_torch_distributed_env_vars`), which Ray's torch backend runs and this
  one, a backend of its own, would not.
  Lightning's ``LightningEnvironment`` takes a worker without ``LOCAL_RANK`` for a launcher and spawns processes
  (``lightning/fabric/plugins/environments/lightning.py``, ``creates_processes_externally``).
- ``PJRT_LOCAL_PROCESS_RANK``/``PJRT_LOCAL_PROCESS_COUNT``: the chip's index on its host and the chips per host, what
  torch_xla's own launcher sets per process (``torch_xla/_internal/pjrt.py``, ``initialize_multiprocess``). Without
  them every chip's ``xr.local_ordinal()`` is 0, so every process on a host is ``xm.is_master_ordinal()`` and
  writes what ``xm.save`` writes once per host (Transformers saves its optimizer and scheduler with it).
- On the emulated slice only (``PJRT_DEVICE=CPU``, the gloo-over-XLA group): Accelerate (hence the Transformers
  ``Trainer``) takes torch_xla's path whenever torch_xla imports (``accelerate/state.py``, ``_prepare_backend``):
  its world is ``xr.world_size()``/``xr.global_ordinal()`` and it averages gradients with ``xm.all_reduce``
  (``accelerate/accelerator.py``, ``optimizer.py``), gathers with ``xm.all_gather`` and waits with
  ``xm.rendezvous`` (built on ``all_gather``). XLA collectives do not cross CPU processes, and each process is a
  world of one there, so every chip would train alone on the whole dataset. :func:`install` gives torch_xla the
  chip world (its own ``_WORLD_SIZE``/``_ORDINAL`` caches, ``torch_xla/runtime.py``) and runs those two collectives
  on the job's process group, through gloo on CPU copies, as the emulated slice's DDP does. On TPUs torch_xla's own
  world is already the chips, and nothing of torch_xla is replaced.
- PyTorch Lightning through ``ray.train.lightning``: as ``ray.train.lightning`` is first imported, Lightning's
  accelerator choice, ``RayDDPStrategy``'s DDP wrapper, teardown and checkpoint saving, and ``prepare_trainer`` are
  set to agree with the chip (:mod:`tpuray.workloads.xla.lightning` says what and why).
- Torch's fused Adam/AdamW/SGD (``fused=True``; Transformers' default ``optim="adamw_torch_fused"`` with torch >=
  2.8, ``transformers/training_args.py``) has no XLA kernel, on TPUs too: torch refuses it by listing the devices
  that have one. It is refused as the optimizer is made, naming what to pass instead.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from tpuray.workloads.xla.patches import Patches

__all__ = ["FUSED_OPTIMIZER_REFUSAL", "install", "uninstall"]

FUSED_OPTIMIZER_REFUSAL = (
    "{name}(fused=True) is not supported on this worker's XLA chip: torch's fused optimizer kernels exist for "
    "CUDA, CPU and a few others, not XLA (XLA fuses the update into the step's graph itself); pass fused=False, "
    'or with Hugging Face Transformers TrainingArguments(optim="adamw_torch") (its default, "adamw_torch_fused" '
    "since torch 2.8, asks for the fused kernel)"
)

LIGHTNING_UTILS = "ray.train.lightning._lightning_utils"
"""Where Ray defines ``prepare_trainer`` (``ray.train.lightning`` re-exports it from there)."""

_FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")
_patches = Patches()


def install(rank: int, world_size: int, chip: int, chips_per_host: int, emulated: bool) -> None:
    """Set this worker's framework view of the job (see the module docstring). ``rank`` is the XLA rank (the
    process group's), ``chip`` the chip's index on its host."""
    from tpuray.workloads import _ray_compat

    _ray_compat.set_torch_distributed_env_vars()
    os.environ["PJRT_LOCAL_PROCESS_RANK"] = str(chip)
    os.environ["PJRT_LOCAL_PROCESS_COUNT"] = str(chips_per_host)
    if _patches:
        return
    _guard_fused_optimizers()
    _patches.after_import(LIGHTNING_UTILS, _adapt_lightning)
    if emulated and world_size > 1:
        _xla_world_over_process_group(rank, world_size)


def uninstall() -> None:
    _patches.restore()


def _adapt_lightning(utils: ModuleType) -> None:
    from tpuray.workloads.xla import lightning as lightning_xla

    lightning_xla.install(utils, _patches.replace)


def _guard_fused_optimizers() -> None:
    import torch

    for name in _FUSED_OPTIMIZERS:
        cls = getattr(torch.optim, name)
        init = cls.__init__

        def guarded(self: Any, params: Any, *args: Any, _init: Any = init, _name: str = name, **kwargs: Any) -> None:
            if kwargs.get("fused"):
                # param groups may be iterators: list them once, for the check and for the optimizer
                params = [dict(g, params=list(g["params"])) if isinstance(g, dict) else g for g in params]
                tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
                if any(t.device.type == "xla" for t in tensors):
                    raise RuntimeError(FUSED_OPTIMIZER_REFUSAL.format(name=f"torch.optim.{_name}"))
            _init(self, params, *args, **kwargs)

        _patches.replace(cls, "__init__", guarded)


_REDUCE_OPS = {"sum": "SUM", "mul": "PRODUCT", "min": "MIN", "max": "MAX", "and": "BAND", "or": "BOR"}
"""torch_xla's ``xm.REDUCE_*`` names and the ``torch.distributed.ReduceOp`` each is."""


def _xla_world_over_process_group(rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    # torch_xla's own caches of the world (runtime.py reads them first): the chips, not this process alone
    _patches.replace(xr, "_WORLD_SIZE", world_size)
    _patches.replace(xr, "_ORDINAL", rank)

    def host_copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        if any(t.device.type == "xla" for t in tensors):
            torch_xla.sync()  # the step's pending graph runs whole, once, before its tensors are read
        return [t.detach().cpu() for t in tensors]

    def all_reduce(
        reduce_type: str, inputs: Any, scale: float = 1.0, groups: Any = None, pin_layout: bool = True
    ) -> Any:
        if groups:
            raise NotImplementedError(
                "xm.all_reduce(groups=...) on the emulated slice: only the whole job's group is emulated"
            )
        op = getattr(dist.ReduceOp, _REDUCE_OPS[reduce_type])
        single = isinstance(inputs, torch.Tensor)
        tensors = [inputs] if single else list(inputs)
        outs = [inputs.clone()] if single else tensors  # a tensor in: a new one out; a list: in place
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            idx = [i for i, t in enumerate(tensors) if t.dtype == dtype]
            flat = torch.cat([h.reshape(-1) for h in host_copies([tensors[i] for i in idx])])
            dist.all_reduce(flat, op=op)
            if scale != 1.0:
                flat = flat * scale
            parts = flat.split([tensors[i].numel() for i in idx])  # type: ignore[no-untyped-call]
            with torch.no_grad():
                for i, part in zip(idx, parts, strict=True):
                    outs[i].copy_(part.view_as(tensors[i]).to(tensors[i].device))
        return outs[0] if single else inputs

    def all_gather(
        value: torch.Tensor, dim: int = 0, groups: Any = None, output: Any = None, pin_layout: bool = True
    ) -> torch.Tensor:
        if groups:
            raise NotImplementedError(
                "xm.all_gather(groups=...) on the emulated slice: only the whole job's group is emulated"
            )
        (local,) = host_copies([value])
        parts = [torch.empty_like(local) for _ in range(world_size)]
        dist.all_gather(parts, local)
        gathered = torch.cat([p if p.dim() else p.reshape(1) for p in parts], dim=dim).to(value.device)
        if output is not None:
            with torch.no_grad():
                output.copy_(gathered)
            return output  # type: ignore[no-any-return]
        return gathered

    _patches.replace(xm, "all_reduce", all_reduce)
    _patches.replace(xm, "all_gather", all_gather)
