"""The per-chip training loop. Runs inside a Ray worker or a bare process (the benchmark's baseline).

Each process drives one chip (one XLA device). Gradients are averaged over all processes before every
optimizer step: with the ``xla://`` process group on TPUs, or over gloo with explicit CPU copies in the CPU
emulation (an XLA all-reduce across CPU processes silently returns the local value).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tpuray.workloads import checkpoint
from tpuray.workloads.data import open_dataset
from tpuray.workloads.job import JobSpec

__all__ = ["ChipTrainer", "ChunkResult", "SetupResult"]

PROCESS_GROUP_TIMEOUT = timedelta(seconds=120)
"""How long a collective waits for a peer; the driver kills a stuck group long before, on any worker death."""


@dataclass(frozen=True)
class SetupResult:
    start_step: int
    """Optimizer steps already done (from the checkpoint resumed, else 0)."""
    resumed_from: str | None
    resumed_loss: float | None
    setup_s: float
    """Seconds from the start of setup to a ready model (imports, process group, checkpoint load)."""


@dataclass(frozen=True)
class ChunkResult:
    first_step: int
    """Step index (0-based) of the first step of this chunk."""
    losses: list[float]
    """Training loss (nats/token) of each step of the chunk, before its update."""
    step_time_s: float
    """Mean wall time per step over the chunk, seconds."""
    first_step_done_s: float | None = None
    """Seconds from the start of setup to the end of the process's very first step (once per process)."""
    checkpoints: list[int] = field(default_factory=list)


class ChipTrainer:
    """One worker's model, optimizer, data shard and process-group membership."""

    def __init__(
        self, spec: JobSpec, rank: int, world: int, master_addr: str, master_port: int, attempt: int = 0
    ) -> None:
        self.spec = spec
        self.rank = rank
        self.world = world
        self.master = (master_addr, master_port)
        self.attempt = attempt
        self.step = 0
        self._t0 = time.perf_counter()
        self._first_done: float | None = None
        self._first_reported = False

    # ---- setup ------------------------------------------------------------------------------------------
    def setup(self) -> SetupResult:
        self._t0 = time.perf_counter()
        os.environ.update(self.spec.extra_env)  # before the XLA runtime starts
        import torch
        import torch.distributed as dist
        import torch_xla

        from tpuray.workloads.model import GPT

        if self.spec.cpu_threads:
            torch.set_num_threads(self.spec.cpu_threads)
        self.torch, self.dist, self.xla = torch, dist, torch_xla
        self.device = torch_xla.device()
        self.data = open_dataset(self.spec.dataset, self.spec.model.vocab_size, self.spec.seed)
        torch.manual_seed(self.spec.seed)  # identical initial weights on every worker
        model = GPT(self.spec.model)
        resumed: tuple[int, Any] | None = None
        latest = checkpoint.latest_checkpoint(self.spec.checkpoint_dir) if self.spec.checkpoint_dir else None
        if latest is not None:
            state = checkpoint.load(latest[1], {"fingerprint": self.spec.fingerprint})
            model.load_state_dict(state["model"])
            resumed = (latest[0], state)
        self.model = model.to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=self.spec.learning_rate, weight_decay=0.01)
        if resumed is not None:
            self.opt.load_state_dict(resumed[1]["optimizer"])
            self.step = resumed[0]
        if self.world > 1:
            if self.spec.collective == "gloo":
                addr, port = self.master
                dist.init_process_group(
                    "gloo",
                    init_method=f"tcp://{addr}:{port}",
                    rank=self.rank,
                    world_size=self.world,
                    timeout=PROCESS_GROUP_TIMEOUT,
                )
            else:
                import torch_xla.distributed.xla_backend  # registers the "xla" process group backend

                dist.init_process_group("xla", init_method="xla://", timeout=PROCESS_GROUP_TIMEOUT)
        return SetupResult(
            start_step=self.step,
            resumed_from=str(latest[1]) if latest else None,
            resumed_loss=float(resumed[1].get("loss", float("nan"))) if resumed else None,
            setup_s=time.perf_counter() - self._t0,
        )

    # ---- training ---------------------------------------------------------------------------------------
    def _average_gradients(self) -> None:
        if self.world == 1:
            return
        torch, dist = self.torch, self.dist
        if self.spec.collective == "xla":
            import torch_xla.core.xla_model as xm

            xm.reduce_gradients(self.opt)
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads]).cpu()  # gloo cannot read XLA tensors
        dist.all_reduce(flat)
        flat = (flat / self.world).to(self.device)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n

    def run(self, until: int) -> ChunkResult:
        """Train up to ``until`` optimizer steps in total (checkpointing on the way)."""
        torch, spec = self.torch, self.spec
        first, losses, saved = self.step, [], []
        autocast = torch.autocast("xla", dtype=torch.bfloat16, enabled=spec.bf16)
        t = time.perf_counter()
        while self.step < min(until, spec.steps):
            if spec.fail_at_step == self.step and self.rank == spec.fail_rank and self.attempt == 0:
                os._exit(17)  # injected fault: die like a preempted or OOM-killed process
            tokens = self.data.batch(self.step, self.rank, self.world, spec.batch_size_per_chip, spec.model.seq_len)
            batch = torch.from_numpy(tokens).to(self.device)
            with autocast:
                loss = self.model.loss(batch)
            loss.backward()  # type: ignore[no-untyped-call]
            self._average_gradients()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.xla.sync()
            losses.append(loss.detach())
            self.step += 1
            if self._first_done is None:
                float(losses[-1])  # wait for the device, so the time covers compile and run
                self._first_done = time.perf_counter() - self._t0
            if spec.checkpoint_dir and (self.step % spec.checkpoint_every == 0 or self.step == spec.steps):
                if self.rank == 0:
                    self._save(float(losses[-1]))
                saved.append(self.step)
        values = [float(v) for v in losses]  # one device sync per chunk, not per step
        elapsed = time.perf_counter() - t
        report_first = None
        if self._first_done is not None and not self._first_reported:
            report_first, self._first_reported = self._first_done, True
        return ChunkResult(
            first_step=first,
            losses=values,
            step_time_s=elapsed / max(1, len(values)),
            first_step_done_s=report_first,
            checkpoints=saved,
        )

    def _save(self, loss: float) -> None:
        assert self.spec.checkpoint_dir is not None
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "fingerprint": self.spec.fingerprint,
            "loss": loss,
        }
        checkpoint.save(self.spec.checkpoint_dir, self.step, state)
        checkpoint.prune(self.spec.checkpoint_dir, self.spec.keep_checkpoints)

    def digest(self) -> str:
        """SHA-256 of every parameter's bytes: equal across workers iff their weights are identical."""
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        return h.hexdigest()

    def close(self) -> None:
        if self.world > 1 and self.dist.is_initialized():
            self.dist.destroy_process_group()
