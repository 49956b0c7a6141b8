"""The training workload: the checkpoint bucket, the model and the entrypoint defaults."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    model_validator,
)

from tpuray.components.config.base import (
    ConfigModel,
    field_msg,
)
from tpuray.components.config_types import (
    BucketLocation,
    BucketName,
    MountPath,
)
from tpuray.components.runtime_ports import RuntimeBackend


class CheckpointConfig(ConfigModel):
    """The checkpoint bucket, mounted into every Ray pod through the GCS FUSE CSI driver."""

    bucket: BucketName | None = Field(default=None, description="bucket name; defaults to <project>-<cluster>-ckpt")
    location: BucketLocation | None = Field(default=None, description="bucket location; defaults to the region")
    mount_path: MountPath = "/checkpoints"
    retention_days: Annotated[int, Field(ge=0, le=36500, description="0 keeps checkpoints forever")] = 30
    soft_delete_days: Annotated[int, Field(ge=7, le=90)] = Field(
        default=7, description="days a deleted or overwritten checkpoint stays restorable (GCS soft delete, 7-90)"
    )
    versioning: bool = Field(default=False, description="also keep noncurrent object versions (GCS versioning)")


class ModelConfig(ConfigModel):
    """The GPT-style decoder trained by the entrypoint."""

    # Bounds: values that deploy but cannot run (a model that cannot fit any slice's HBM) stop here.
    vocab_size: Annotated[int, Field(ge=2, le=4_000_000)] = 256
    layers: Annotated[int, Field(ge=1, le=1_000)] = 2
    d_model: Annotated[int, Field(ge=8, le=65_536)] = 64
    heads: Annotated[int, Field(ge=1, le=1_024)] = 4

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(field_msg("heads", f"{self.heads} does not divide dModel={self.d_model}"))
        return self


class WorkloadConfig(ConfigModel):
    """Defaults of the training entrypoint (``python -m tpuray.workloads.train``)."""

    backend: RuntimeBackend = "xla"
    slice_pool: str | None = Field(default=None, description="pool the job runs on; defaults to the first")
    steps: Annotated[int, Field(ge=1, le=100_000_000)] = 60
    batch_size_per_chip: Annotated[int, Field(ge=1, le=65_536)] = 8
    seq_len: Annotated[int, Field(ge=2, le=1_048_576)] = 64
    learning_rate: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 3e-3
    checkpoint_every: Annotated[int, Field(ge=1, le=100_000_000)] = 20
    dataset: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^\S(.*\S)?$")] | None = Field(
        default=None, description="tokenised text file; synthetic tokens if unset"
    )
    model: ModelConfig = ModelConfig()
