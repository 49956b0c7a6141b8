"""Sharded checkpoints of a PyTorch/XLA SPMD run, written into and read from a directory such as the one a Ray Train
worker hands ``ray.train.report`` (``Checkpoint.from_directory``) or gets back from ``get_checkpoint()``.

``torch.distributed.checkpoint`` with torch_xla's SPMD planners (torch_xla 2.9
``experimental/distributed_checkpoint/planners.py``): every process writes only the shards its devices hold and
restores into tensors already sharded on the device, in place, so no process ever holds the whole model. Across
hosts the planners coordinate through the default process group (Ray Train's gloo group: one rank per host), each
host writing its own ``__<rank>_0.distcp`` file into the same checkpoint directory. torch_xla is imported only when
a function runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["STEP_FILE", "load_sharded", "save_planner", "save_sharded"]

STEP_FILE = "step.json"
"""Beside the DCP files: the training step the checkpoint was taken after (a Ray Train checkpoint's own metadata
is the driver's, not the worker's)."""


def save_planner() -> Any:
    """torch_xla's ``SPMDSavePlanner`` writing each shard of a partially replicated tensor once per host.

    Under a mesh with more than one axis, a tensor split along one axis only (an embedding under ``fsdp x tensor``,
    a bias, a LayerNorm weight, their AdamW moments) has several replicas of each shard on one host. The planner's
    local plan has a write item per replica, and ``dedup_tensors`` (torch_xla 2.9
    ``experimental/distributed_checkpoint/_helpers.py``), meant to drop copies held by other hosts, compares
    items by ``MetadataIndex``, whose shard number is left out of equality (torch 2.9
    ``distributed/checkpoint/metadata.py``): it removes every copy, and the tensor is missing from the checkpoint
    (measured: a GPT saved ``fsdp=2 x tensor=2`` kept its 4 weight matrices and lost the other 12 parameters).
    Keeping the first item of each (tensor, offset) in the local plan leaves one copy for the dedup to keep."""
    import dataclasses

    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    class _OneCopyPerHost(SPMDSavePlanner):
        def create_local_plan(self) -> Any:
            plan = super().create_local_plan()
            seen: set[tuple[str, Any]] = set()
            items = []
            for item in plan.items:
                key = (item.index.fqn, item.index.offset)
                if key not in seen:
                    seen.add(key)
                    items.append(item)
            return dataclasses.replace(plan, items=items)

    return _OneCopyPerHost()  # type: ignore[no-untyped-call]


def save_sharded(directory: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Write ``model``'s and ``optimizer``'s state, as sharded on the devices, and ``step`` into ``directory``."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save

    torch_xla.sync()  # the planner reads each device's finished buffers (its local shards)
    xm.wait_device_ops()
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    save(state, storage_writer=FileSystemWriter(str(directory)), planner=save_planner())
    Path(directory, STEP_FILE).write_text(json.dumps({"step": step}))


def load_sharded(directory: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore what :func:`save_sharded` wrote into ``model`` and ``optimizer``, which must already be on the XLA
    device and sharded (the mesh may differ from the saving run's: each device reads the slices of the tensors its
    shards cover). Returns the step the checkpoint was taken after.

    AdamW's moments do not exist before its first step and DCP loads in place, so the optimizer is primed first
    (torch_xla's ``prime_optimizer``: one step with zero gradients, its results overwritten by the load). The
    gradients it leaves are then dropped: a zeroed gradient stays whole on every device under SPMD, where a fresh
    one is sharded like its parameter (docs/sharding.md)."""
    import torch_xla
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load
    from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner, prime_optimizer

    prime_optimizer(optimizer)
    state: dict[str, Any] = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    load(state, storage_reader=FileSystemReader(str(directory)), planner=SPMDLoadPlanner())  # type: ignore[no-untyped-call]
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    optimizer.zero_grad(set_to_none=True)
    torch_xla.sync()
    return int(json.loads(Path(directory, STEP_FILE).read_text())["step"])
