"""Hugging Face Transformers' ``Trainer`` with its PyTorch/XLA FSDPv2 (``xla_fsdp_v2``) over tpuray's SPMD mesh.

Transformers 5.24's own path needs two things put right (``transformers/trainer.py``), which
:class:`XlaFsdpV2Trainer` does:

- ``Trainer.__init__`` replaces the global mesh with its own ``(devices, 1)`` mesh of axes ``("fsdp", "tensor")``,
  so the one :func:`~tpuray.workloads.sharding.spmd.spmd_mesh` set is gone by the time the model is wrapped; the
  subclass sets it back.
- ``Trainer._prepare_for_training`` delays the optimizer until the model is wrapped whenever ``fsdp_config["xla"]``
  is on, then, the model being wrapped, skips the branch that creates it and hands ``create_scheduler`` no
  optimizer (``AttributeError: 'NoneType' object has no attribute 'param_groups'``, on TPUs as on CPU devices).
  The subclass creates it there, from the wrapped model's parameters, and prepares it with Accelerate as the
  Trainer's other paths do.

Transformers' wrap (``transformers/integrations/tpu.py``, ``wrap_model_xla_fsdp``, ``tpu_spmd_dataloader``) shards
each parameter, the batch and the logits along ``fsdp`` only, so :func:`xla_fsdp_v2_args` refuses a plan with a
``data`` or ``tensor`` axis: its devices would repeat each other's work. This module imports transformers.
"""

from __future__ import annotations

from typing import Any

from transformers import Trainer

from tpuray.workloads.sharding.mesh import MeshPlan

__all__ = ["XlaFsdpV2Trainer", "xla_fsdp_v2_args"]


def _check(shape: tuple[int, ...], names: tuple[str, ...]) -> None:
    other = {n: s for n, s in zip(names, shape, strict=True) if n != "fsdp" and s > 1}
    if other:
        raise ValueError(
            f"Hugging Face's xla_fsdp_v2 over the mesh {dict(zip(names, shape, strict=True))}: its FSDPv2 wrap "
            "and its data loader shard parameters and batches along 'fsdp' only (transformers/integrations/tpu.py), "
            f"so the devices along {', '.join(other)} would each repeat the same work; valid: "
            "mesh_plan(devices, fsdp=devices)"
        )


def xla_fsdp_v2_args(plan: MeshPlan) -> dict[str, Any]:
    """``TrainingArguments`` keyword arguments for Transformers' FSDPv2 over ``plan``, an all-``fsdp`` mesh:
    ``fsdp="full_shard"`` and ``fsdp_config={"xla": True, "xla_fsdp_v2": True}``. Train with
    :class:`XlaFsdpV2Trainer`."""
    _check(plan.shape, plan.axis_names)
    return {"fsdp": "full_shard", "fsdp_config": {"xla": True, "xla_fsdp_v2": True}}


class XlaFsdpV2Trainer(Trainer):
    """``transformers.Trainer`` that keeps the global mesh set before it (by
    :func:`~tpuray.workloads.sharding.spmd.spmd_mesh`) and creates the optimizer Transformers 5.24's XLA FSDP
    path leaves out (the module docstring says where)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from torch_xla.distributed.spmd import xla_sharding as xs

        mesh = xs.get_global_mesh()
        super().__init__(*args, **kwargs)
        if self.is_fsdp_xla_v2_enabled and mesh is not None:
            _check(tuple(mesh.mesh_shape), tuple(mesh.axis_names or ()))
            xs.set_global_mesh(mesh)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        if optimizer is None and self.optimizer is None:
            self.optimizer = self.accelerator.prepare(self.create_optimizer())
        return super().create_scheduler(num_training_steps, optimizer)
