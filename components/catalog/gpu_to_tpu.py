"""What replaces each GPU-only construct of a Ray Train script on TPUs: the one table that ``tpuray port check``
prints and the portable API's refusals (``tpuray.workloads.xla.portable``) quote.
"""

from __future__ import annotations

# Each kind of finding -> (what it is, the TPU replacement). Written once: the CLI, --json, the docs' example and
# the portable API's refusals all come from here. The replacements name tpuray's real API (tpuray.workloads) and Ray
# Train's portable one, which returns the worker's XLA chip when the trainer runs with XlaChipConfig().
REPLACEMENTS: dict[str, tuple[str, str]] = {
    "cuda-method": (
        ".cuda() moves to a GPU",
        ".to(ray.train.torch.get_device()), or ray.train.torch.prepare_model(model) for the model",
    ),
    "cuda-device": (
        "a CUDA device",
        "ray.train.torch.get_device() (the worker's XLA chip under torch_config=XlaChipConfig())",
    ),
    "cuda-sync": (
        "torch.cuda.synchronize()",
        "torch_xla.sync() to cut and run the graph; torch_xla.core.xla_model.wait_device_ops() to wait for it",
    ),
    "cuda-memory": (
        "CUDA memory statistics",
        "torch_xla.core.xla_model.get_memory_info(device) (bytes_used, bytes_limit, peak_bytes_used); "
        "no reset or cache calls on TPUs: drop them",
    ),
    "cuda-api": (
        "a torch.cuda call",
        "none on TPUs: Ray places one worker per chip (tpu_scaling_config(...)), ray.train.torch.get_device() "
        "gives its device; drop device counting and selection",
    ),
    "nccl": (
        'backend="nccl" (GPU-only collectives)',
        "TorchTrainer(..., torch_config=XlaChipConfig()) from tpuray.workloads sets up the process group; "
        "drop init_process_group and TorchConfig(backend=...)",
    ),
    "use-gpu": (
        "ScalingConfig(use_gpu=True)",
        'scaling_config=tpu_scaling_config("v5e:2x2") from tpuray.workloads (whole slices, one worker per chip)',
    ),
    "gpu-resources": (
        'resources_per_worker={"GPU": ...}',
        'tpu_scaling_config("v5e:2x2") from tpuray.workloads: it sets the TPU resources per worker itself',
    ),
    "fp16-autocast": (
        "float16 autocast (TPUs compute in bfloat16)",
        'torch.autocast("xla", dtype=torch.bfloat16)',
    ),
    "grad-scaler": (
        "GradScaler (fp16 loss scaling)",
        "drop it: bfloat16 needs no loss scaling (scaler.scale(loss).backward() -> loss.backward(), "
        "scaler.step(opt) -> opt.step())",
    ),
}
