"""The training workload: the checkpoint bucket, the model and the entrypoint defaults."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from tpuray.components.catalog.gpt_sharding import GPT_PARAMETERS, GptDims, gpt_parameters
from tpuray.components.catalog.runtimes import RUNTIMES, RuntimeBackend
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.base import (
    ConfigError,
    ConfigModel,
    field_problem,
    pattern,
)
from tpuray.components.config.value_types import (
    BucketLocation,
    BucketName,
    MountPath,
)

_NO_EDGE_SPACE = pattern(r"^\S(.*\S)?$", "a path with no space at its start or end")
_COMMAND = pattern(
    r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$",
    "a command line of printable characters on one line, no space at its start or end, e.g. python train.py",
)
BUILTIN_ENTRYPOINT = "python -m tpuray.workloads.train"
"""The built-in GPT job: what the stack's training RayJob runs unless ``workload.entrypoint`` names the user's own."""


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
            raise field_problem("heads", f"{self.heads} does not divide dModel={self.d_model}")
        return self


TRAIN_BYTES_PER_PARAMETER = 16
"""HBM a chip holds per model parameter while training, before activations: the fp32 weight (4 bytes), its fp32
gradient (4) and AdamW's two fp32 moments, ``exp_avg`` and ``exp_avg_sq`` (4 + 4; PyTorch torch/optim/adamw.py keeps
both per parameter, in the parameter's dtype). The entrypoint trains with torch.optim.AdamW under bf16 autocast,
which casts inside the ops and leaves the weights, and so their gradients and optimizer state, in fp32
(tpuray.workloads.gpt.loop). The same accounting as ZeRO's "model states" of Adam (Rajbhandari et al. 2019,
https://arxiv.org/abs/1910.02054 section 3.1), there 16 bytes per parameter in mixed precision too. Data parallel
training replicates all of it on every chip, so a model whose states exceed one chip's HBM cannot run whatever the
slice; activations only add to it, so the check is a lower bound and never refuses a model that fits. Sharding
divides it: :func:`training_state_bytes_per_device`."""


def training_state_bytes_per_device(dims: GptDims, fsdp: int = 1, tensor: int = 1) -> int:
    """HBM one mesh device holds of the GPT's training state (:data:`TRAIN_BYTES_PER_PARAMETER` per parameter)
    with ``fsdp`` and ``tensor`` ways of sharding: each parameter's share over the axes that split it
    (:data:`~tpuray.components.catalog.gpt_sharding.GPT_PARAMETERS`), the rest replicated. Gradients and AdamW's
    moments are laid out like their parameter (FSDP2's DTensors; XLA SPMD propagates the parameter's sharding to
    them), so all 16 bytes divide alike. The ``data`` axis divides nothing. The one figure the config's HBM rule,
    ``tpuray plan`` and the sharding tests use."""
    total = 0
    for rule in GPT_PARAMETERS:
        place = rule.placement(fsdp, tensor)
        ways = (fsdp if place.fsdp is not None else 1) * (tensor if place.tensor is not None else 1)
        total += (dims.layers if rule.per_block else 1) * rule.numel(dims) // ways
    return total * TRAIN_BYTES_PER_PARAMETER


class ParallelismConfig(ConfigModel):
    """How the training state is sharded over a slice's chips; the data axis takes the rest, and the slices of a
    multislice job are its outermost part (over DCN)."""

    fsdp: Annotated[int, Field(ge=1, le=65_536)] = Field(
        default=1, description="ways every parameter, gradient and AdamW moment is sharded (FSDP / ZeRO-3)"
    )
    tensor: Annotated[int, Field(ge=1, le=1_024)] = Field(
        default=1, description="ways attention and the MLP are split (Megatron-style tensor parallelism)"
    )

    @property
    def degree(self) -> int:
        """Chips (devices) one copy of the model is spread over: ``fsdp * tensor``."""
        return self.fsdp * self.tensor


# ---- elastic training: the bounds of the job's size, in whole slices ------------------------------------------
def _whole_slices(value: object) -> object:
    """A slice count as written: a whole number (a TPU job grows and shrinks by whole slices only)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a whole number of slices; valid: an integer such as 1 or 2")
    return value


class ElasticConfig(ConfigModel):
    """Train on fewer slices while some are lost, and grow back when they return: Ray Train's elastic
    ``ScalingConfig(num_workers=(min, max))``, both bounds whole slices of the job's pool (the cross-section rule
    ``elastic_rules`` checks them against the pool and its capacity type)."""

    min_slices: Annotated[int, Field(ge=1, le=64)] = Field(
        description="fewest slices the job trains on; below it the job waits for slices to return"
    )
    max_slices: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="most slices the job trains on; defaults to the pool's slices"
    )

    _whole = field_validator("min_slices", "max_slices", mode="before")(lambda v: v if v is None else _whole_slices(v))

    @model_validator(mode="after")
    def _ordered(self) -> ElasticConfig:
        if self.max_slices is not None and self.min_slices > self.max_slices:
            raise field_problem(
                "minSlices",
                f"{self.min_slices} exceeds maxSlices={self.max_slices}; valid: 1 <= minSlices <= maxSlices",
            )
        return self

    def bounds(self, pool_slices: int) -> tuple[int, int]:
        """``(min, max)`` slices on a pool of ``pool_slices`` slices."""
        return self.min_slices, self.max_slices if self.max_slices is not None else pool_slices


class WorkloadConfig(ConfigModel):
    """Defaults of the training entrypoint (``python -m tpuray.workloads.train``)."""

    backend: RuntimeBackend = "xla"
    slice_pool: str | None = Field(default=None, description="pool the job runs on; defaults to the first")
    steps: Annotated[int, Field(ge=1, le=100_000_000)] = 60
    batch_size_per_chip: Annotated[int, Field(ge=1, le=65_536)] = 8
    seq_len: Annotated[int, Field(ge=2, le=1_048_576)] = 64
    learning_rate: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 3e-3
    checkpoint_every: Annotated[int, Field(ge=1, le=100_000_000)] = 20
    dataset: Annotated[str, Field(min_length=1, max_length=4096, pattern=_NO_EDGE_SPACE)] | None = Field(
        default=None, description="tokenised text file; synthetic tokens if unset"
    )
    model: ModelConfig = ModelConfig()
    parallelism: ParallelismConfig = ParallelismConfig()
    entrypoint: Annotated[str, Field(max_length=4096, pattern=_COMMAND)] | None = Field(
        default=None,
        description=f"the training RayJob's command when the job is your own (e.g. python train.py), run as given; "
        f"unset: the built-in GPT job ({BUILTIN_ENTRYPOINT} with this section), and what it refuses at its start "
        "(a sharding it cannot run) is refused here",
    )
    elastic: ElasticConfig | None = Field(
        default=None, description="train through slice loss between these bounds (docs/elastic.md); unset: fixed size"
    )

    @model_validator(mode="after")
    def _parallelism(self) -> WorkloadConfig:
        fsdp, tensor, m = self.parallelism.fsdp, self.parallelism.tensor, self.model
        if m.heads % tensor:
            raise field_problem(
                "parallelism.tensor",
                f"{tensor} does not divide model.heads={m.heads}: tensor parallelism gives every device whole "
                f"attention heads (and so divides dModel, 3 dModel and 4 dModel); valid: a divisor of {m.heads}",
            )
        if m.d_model % fsdp:
            raise field_problem(
                "parallelism.fsdp",
                f"{fsdp} does not divide model.dModel={m.d_model}: FSDP splits every parameter along a dimension of "
                f"dModel (or 3 or 4 times it) in equal shards; valid: a divisor of {m.d_model}",
            )
        return self

    @property
    def gpt_dims(self) -> GptDims:
        return GptDims(self.model.vocab_size, self.seq_len, self.model.d_model, self.model.layers)

    @property
    def model_parameters(self) -> int:
        """Every parameter of the entrypoint's GPT (:mod:`tpuray.workloads.gpt.model`), from the one table of its
        tensors (:func:`~tpuray.components.catalog.gpt_sharding.gpt_parameters`)."""
        return gpt_parameters(self.gpt_dims)

    @property
    def training_state_bytes(self) -> int:
        """HBM one chip needs for the replicated weights, gradients and AdamW state
        (:data:`TRAIN_BYTES_PER_PARAMETER` per parameter)."""
        return self.model_parameters * TRAIN_BYTES_PER_PARAMETER

    def mesh_devices_per_chip(self, tpu_slice: TpuSlice) -> int:
        """Mesh devices on one chip: TorchTPU runs a process per PJRT device (two per tpu7x chip), PyTorch/XLA
        one per chip (:meth:`~tpuray.components.catalog.runtimes.Runtime.devices_per_chip`)."""
        return RUNTIMES[self.backend].devices_per_chip(tpu_slice)

    def training_state_bytes_per_chip(self, tpu_slice: TpuSlice) -> int:
        """HBM one chip of ``tpu_slice`` holds of the sharded training state: the per-device share
        (:func:`training_state_bytes_per_device`) times the mesh devices on the chip."""
        p = self.parallelism
        per_device = training_state_bytes_per_device(self.gpt_dims, p.fsdp, p.tensor)
        return per_device * self.mesh_devices_per_chip(tpu_slice)


def require_entrypoint_sharding(backend: str, tpu_slice: TpuSlice, num_slices: int, fsdp: int, tensor: int) -> None:
    """Raise ``ConfigError`` on a sharded job the built-in entrypoint does not run, naming what it runs instead: on
    PyTorch/XLA, SPMD on one host; on TorchTPU, FSDP2 and tensor parallelism inside each slice, one worker per
    device (``tpuray.workloads.gpt.fsdp2_loop``), tensor parallelism on a mesh with no data axis."""
    if fsdp * tensor == 1:
        return
    why = None
    if backend == "torch_tpu":
        devices = RUNTIMES["torch_tpu"].devices_per_host(tpu_slice) * tpu_slice.hosts
        if devices % (fsdp * tensor):
            why = f"fsdp x tensor does not divide the {devices} TorchTPU devices of a {tpu_slice} slice"
        elif tensor > 1 and (fsdp * tensor < devices or num_slices > 1):
            why = (
                f"tensor={tensor} leaves a data axis ({devices // (fsdp * tensor) * num_slices} replicas), and its "
                f"gradients are averaged across replicas only through FSDP2: set fsdp x tensor = {devices}, one slice"
            )
    elif tpu_slice.hosts * num_slices > 1:
        why = (
            f"{num_slices} x {tpu_slice} is {tpu_slice.hosts * num_slices} hosts: it runs PyTorch/XLA SPMD on one host "
            "(a single-host slice, one slice); TorchTPU (backend: torch_tpu) shards across hosts and slices"
        )
    elif tpu_slice.chips % (fsdp * tensor):
        why = f"fsdp x tensor does not divide the slice's {tpu_slice.chips} chips"
    if why:
        raise ConfigError(
            [
                (
                    "workload.parallelism",
                    f"fsdp={fsdp} x tensor={tensor}: the built-in entrypoint cannot train this sharded ({why}); "
                    "shard your own train function with tpuray.workloads.sharding (docs/sharding.md), or set "
                    "fsdp: 1 and tensor: 1",
                )
            ]
        )
