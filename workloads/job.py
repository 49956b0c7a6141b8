"""The job description every worker receives: what to train, on which slice shape, and how. Pure data."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from tpuray.components.topology import TpuSlice
from tpuray.workloads.metrics import ModelShape

__all__ = ["Backend", "Collective", "JobSpec"]

Backend = Literal["xla", "torch_tpu"]
Collective = Literal["xla", "gloo"]


@dataclass(frozen=True)
class JobSpec:
    """One training job. Picklable: the driver sends it to every worker."""

    slice_spec: str
    """``str(TpuSlice)``, e.g. ``v5e:2x2`` (a string so that the spec pickles without the catalog)."""
    model: ModelShape
    steps: int
    batch_size_per_chip: int
    learning_rate: float
    checkpoint_every: int
    checkpoint_dir: str | None
    dataset: str | None = None
    seed: int = 0
    backend: Backend = "xla"
    collective: Collective = "xla"
    """``xla`` on TPUs; ``gloo`` with explicit CPU copies for the local emulation (XLA collectives do not work
    across CPU processes: each would see world size 1 and silently skip the all-reduce)."""
    bf16: bool = True
    """bf16 autocast on TPU; the CPU emulation trains in fp32."""
    log_every: int = 10
    """Steps per call to the workers: the driver's progress and fault detection granularity."""
    keep_checkpoints: int = 3
    fail_at_step: int | None = None
    """Fault injection for tests: rank ``fail_rank`` exits abruptly before this step, on the first attempt only."""
    fail_rank: int = 1
    cpu_threads: int | None = None
    """torch intra-op threads per worker (the CPU emulation uses 1: several workers share few cores)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Variables every worker sets before starting the XLA runtime (e.g. ``PJRT_DEVICE=CPU`` locally)."""

    @property
    def tpu_slice(self) -> TpuSlice:
        return TpuSlice.parse(self.slice_spec)

    @property
    def fingerprint(self) -> str:
        """Identifies the model a checkpoint belongs to: shape and dataset (not the step count or the LR)."""
        key = json.dumps({"model": asdict(self.model), "dataset": self.dataset}, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:16]
