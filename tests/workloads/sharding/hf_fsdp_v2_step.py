"""Run in a subprocess: a few steps of Hugging Face's ``Trainer`` on a tiny Llama built from a config (no download).

``sharded``: with ``PJRT_DEVICE=CPU`` and ``CPU_NUM_DEVICES=4`` (torch_xla reads both when it first initialises),
tpuray's ``spmd_mesh(mesh_plan(4, fsdp=4))`` and then ``TrainingArguments(fsdp="full_shard",
fsdp_config={"xla": True, "xla_fsdp_v2": True})``. ``plain``: the same steps with ``USE_TORCH_XLA=0`` in plain torch
on the CPU, no fsdp (Transformers' ``is_torch_xla_available`` reads that variable). ``unsharded``: the ``sharded``
run without the fsdp settings (the mesh set, the model left whole on every device: the check that the test
can fail). Prints one JSON line: the
logged losses and, under XLA, the mesh the FSDPv2 wrap used and the bytes each device holds of the parameters.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch
from torch.utils.data import Dataset

VOCAB, SEQ, BATCH, STEPS = 64, 16, 8, 6


class _Rows(Dataset[dict[str, torch.Tensor]]):
    """Rows of an arithmetic sequence mod VOCAB, a different stride per row: learnable, so the loss falls."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(1)
        start = torch.randint(0, VOCAB, (n, 1), generator=g)
        stride = torch.randint(1, 4, (n, 1), generator=g)
        self.rows = (start + stride * torch.arange(SEQ)) % VOCAB

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )
    model: Any = LlamaForCausalLM(config)  # fp32: torch's default dtype, which no one here changes
    return model


def main(mode: str) -> None:
    from transformers import TrainerCallback, TrainingArguments

    from tpuray.workloads.sharding import mesh_plan, spmd_mesh
    from tpuray.workloads.sharding.hf import XlaFsdpV2Trainer, xla_fsdp_v2_args

    out: dict[str, Any] = {"mode": mode}
    fsdp: dict[str, Any] = {}
    if mode != "plain":
        plan = mesh_plan(4, fsdp=4)
        spmd_mesh(plan)
        if mode == "sharded":
            fsdp = xla_fsdp_v2_args(plan)

    losses: list[float] = []

    class _Losses(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(
            output_dir=d,
            per_device_train_batch_size=BATCH,
            max_steps=STEPS,
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            optim="adamw_torch",  # the unfused loop on both sides; the fused kernel is CUDA's/CPU's, not XLA's
            weight_decay=0.0,
            max_grad_norm=0.0,  # no clipping: its global norm under XLA goes through Accelerate's all-reduce
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
            dataloader_num_workers=0,
            disable_tqdm=True,
            use_cpu=mode == "plain",
            **fsdp,
        )
        rows = _Rows(BATCH * STEPS)
        trainer: Any = XlaFsdpV2Trainer(model=_model(), args=args, train_dataset=rows, callbacks=[_Losses()])
        if mode != "plain":
            from torch_xla.distributed.spmd import xla_sharding as xs

            mesh = xs.get_global_mesh()
            out["mesh_after_init"] = None if mesh is None else [list(mesh.mesh_shape), list(mesh.axis_names or ())]
        trainer.train()
    out["losses"] = losses
    out["dtypes"] = sorted({str(p.dtype) for p in trainer.model.parameters()})
    if mode != "plain":
        import torch_xla
        import torch_xla.core.xla_model as xm

        from tpuray.workloads.sharding import local_bytes

        torch_xla.sync()
        xm.wait_device_ops()
        wrapped = trainer.model_wrapped
        used: Any = getattr(wrapped, "_mesh", None)
        out["wrapper"] = type(wrapped).__name__
        out["mesh_used"] = None if used is None else [list(used.mesh_shape), list(used.axis_names)]
        params = list(trainer.model.parameters())
        out["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
        out["param_bytes_per_device"] = local_bytes(params)
        xlac: Any = torch_xla._XLAC  # type: ignore[attr-defined]
        weight = trainer.model.model.embed_tokens.weight
        out["embed_shape"] = list(weight.shape)
        out["embed_shards"] = [list(s.shape) for s, _ in xlac._get_local_shards([weight])[0]]
        out["embed_spec"] = xlac._get_xla_sharding_spec(weight)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
