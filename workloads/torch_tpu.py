"""The TorchTPU backend: ``torch_tpu`` through Ray Train's ``ScalingConfig(use_tpu=True, ...)``.

Ray Train drives torch_tpu (process group backend ``tpu_dist``, device ``torch.device("tpu")``) with one
worker per TPU VM, but Ray 2.60 leaves ``TORCH_TPU_TOPOLOGY`` and ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` unset.
:func:`torch_tpu_env` derives them from the :class:`TpuSlice` and the webhook's ``TPU_WORKER_HOSTNAMES``,
and :class:`TorchTpuConfig` sets them on every worker before Ray creates the process group.

torch_tpu is not on PyPI and there are no TPUs here: this path is tested for its configuration and env only.
The value formats follow torch_tpu's ``set_tpu_launch_env`` as documented in the project's reference notes
(topology as ``AxBxC``, slice builder ``host:port`` list); they are not verified against torch_tpu itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tpuray.components.names import TPU_SLICEBUILDER_PORT
from tpuray.components.topology import TpuSlice
from tpuray.workloads.pjrt import hostnames_from_env

__all__ = ["DEFAULT_SLICEBUILDER_PORT", "TorchTpuConfig", "run_torch_tpu", "scaling_config_kwargs", "torch_tpu_env"]

DEFAULT_SLICEBUILDER_PORT = TPU_SLICEBUILDER_PORT
"""libtpu's slice builder port on every host of a multi-host slice (TCP)."""


def torch_tpu_env(
    tpu_slice: TpuSlice, hostnames: Sequence[str], port: int = DEFAULT_SLICEBUILDER_PORT
) -> dict[str, str]:
    """``TORCH_TPU_TOPOLOGY`` (the slice's chip grid, three dims) and ``TORCH_TPU_SLICEBUILDER_ADDRESSES``
    (every host's slice builder, worker-id order; ``localhost`` on a single host)."""
    if tpu_slice.multi_host and len(hostnames) != tpu_slice.hosts:
        raise ValueError(f"{tpu_slice} has {tpu_slice.hosts} hosts but {len(hostnames)} hostnames were given")
    hosts = list(hostnames) if tpu_slice.multi_host else ["localhost"]
    return {
        "TORCH_TPU_TOPOLOGY": "x".join(map(str, tpu_slice.dims)),
        "TORCH_TPU_SLICEBUILDER_ADDRESSES": ",".join(f"{h}:{port}" for h in hosts),
    }


def scaling_config_kwargs(tpu_slice: TpuSlice, num_slices: int = 1) -> dict[str, Any]:
    """Arguments of Ray Train's ``ScalingConfig`` for ``num_slices`` whole slices: one worker per TPU VM."""
    return {
        "num_workers": tpu_slice.hosts * num_slices,
        "use_tpu": True,
        "topology": tpu_slice.topology,
        "accelerator_type": tpu_slice.ray_accelerator_type,
        "resources_per_worker": {"TPU": tpu_slice.chips_per_host},
    }


def _fill_env(slice_spec: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """In a Ray Train worker: set the TORCH_TPU_* variables that are still unset; returns what it set."""
    env = os.environ if environ is None else environ
    wanted = torch_tpu_env(TpuSlice.parse(slice_spec), hostnames_from_env(env))
    missing = {k: v for k, v in wanted.items() if k not in env}
    if environ is None:
        os.environ.update(missing)
    return missing


def _config_class() -> type:
    from ray.train.torch import TorchConfig
    from ray.train.torch.config import _TorchBackend

    class _TorchTpuBackend(_TorchBackend):
        def __init__(self, slice_spec: str) -> None:
            self.slice_spec = slice_spec

        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            worker_group.execute(_fill_env, self.slice_spec)  # before Ray creates the tpu_dist group
            super().on_start(worker_group, backend_config)

    class _TorchTpuConfig(TorchConfig):
        slice_spec: str = ""

        @property
        def backend_cls(self) -> Any:
            spec = self.slice_spec
            return lambda: _TorchTpuBackend(spec)

    return _TorchTpuConfig


def TorchTpuConfig(tpu_slice: TpuSlice) -> Any:  # a factory standing in for a Ray class
    """A Ray Train ``TorchConfig`` (backend ``tpu_dist``) that fills in the TORCH_TPU_* env first."""
    cfg = _config_class()(backend="tpu_dist")
    cfg.slice_spec = str(tpu_slice)
    return cfg


def run_torch_tpu(spec: Any, num_slices: int = 1) -> dict[str, object]:  # pragma: no cover - needs TPUs
    """Train the job's model with torch_tpu on ``num_slices`` slices through Ray Train."""
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(config: dict[str, Any]) -> None:
        import torch
        import torch.distributed as dist
        import torch_tpu  # type: ignore[import-not-found]  # noqa: F401

        from tpuray.workloads.data import open_dataset
        from tpuray.workloads.model import GPT

        job = config["spec"]
        device = torch.device("tpu")
        torch.manual_seed(job.seed)
        model = GPT(job.model).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate)
        data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
        rank, world = dist.get_rank(), dist.get_world_size()
        for step in range(job.steps):
            tokens = torch.from_numpy(data.batch(step, rank, world, job.batch_size_per_chip, job.model.seq_len))
            with torch.autocast("tpu", dtype=torch.bfloat16):
                loss = model.loss(tokens.to(device))
            loss.backward()  # type: ignore[no-untyped-call]
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world
            opt.step()
            opt.zero_grad(set_to_none=True)

    trainer = TorchTrainer(
        loop,
        train_loop_config={"spec": spec},
        scaling_config=ScalingConfig(**scaling_config_kwargs(spec.tpu_slice, num_slices)),
        torch_config=TorchTpuConfig(spec.tpu_slice),
    )
    result = trainer.fit()
    return {"event": "summary", "backend": "torch_tpu", "slice": spec.slice_spec, "result": str(result)}
