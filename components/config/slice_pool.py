"""A slice pool: ``slices`` TPU slices of one generation and topology on one capacity type."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from tpuray.components.catalog.gke_versions import gke_version_key
from tpuray.components.catalog.topology import GENERATIONS, TopologyError, TpuSlice, generation
from tpuray.components.config.base import (
    NAME_PATTERN,
    ConfigModel,
    field_problem,
)
from tpuray.components.config.capacity import Capacity, OnDemand
from tpuray.components.config.value_types import Zone


class Autoscaling(ConfigModel):
    """Autoscale between ``minSlices`` and the pool's ``slices``. A multi-host slice is 0 or whole."""

    enabled: bool = True
    min_slices: Annotated[int, Field(ge=0)] = 0


class SlicePoolConfig(ConfigModel):
    """One kind of TPU slice: ``slices`` slices of ``generation``/``topology`` on one capacity type."""

    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=37, description="node pool name (prefix)")]
    generation: str
    topology: str
    machine_type: str | None = None
    slices: Annotated[int, Field(ge=1, le=64)] = 1
    capacity: Capacity = OnDemand()
    autoscaling: Autoscaling = Autoscaling()
    zone: Zone | None = Field(default=None, description="zone of this pool; defaults to the stack's zone")
    auto_upgrade: bool = Field(default=True, description="GKE node auto-upgrade (off needs releaseChannel UNSPECIFIED)")

    @field_validator("generation")
    @classmethod
    def _known_generation(cls, v: str) -> str:
        try:
            return generation(v).name
        except TopologyError as e:
            raise ValueError(str(e).removeprefix("generation: ")) from None

    @model_validator(mode="after")
    def _rules(self) -> SlicePoolConfig:
        try:
            TpuSlice.parse(self.generation, self.topology, self.machine_type)
        except TopologyError as e:
            raise field_problem(to_camel(e.field), str(e).split(": ", 1)[1]) from None
        auto, cap = self.autoscaling, self.capacity
        if auto.min_slices > self.slices:
            raise field_problem("autoscaling.minSlices", f"{auto.min_slices} exceeds slices={self.slices}")
        if cap.queued_provisioning and not (auto.enabled and auto.min_slices == 0):
            raise field_problem(
                "autoscaling",
                "queued provisioning needs autoscaling enabled with minSlices 0 (GKE creates the "
                "nodes when a ProvisioningRequest is granted); set autoscaling: {enabled: true, minSlices: 0}",
            )
        if cap.flex_start and not auto.enabled:
            raise field_problem(
                "autoscaling", "flex-start pools have no static node count: set autoscaling.enabled: true"
            )
        gen = generation(self.generation)
        if cap.flex_start and not gen.flex_start:
            # https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start : "TPU v3 and v4 are not supported."
            served = ", ".join(g.name for g in GENERATIONS if g.flex_start)
            raise field_problem(
                "capacity.type", f"flex-start capacity does not serve TPU {gen.name}; it serves {served}"
            )
        return self

    @property
    def tpu_slice(self) -> TpuSlice:
        """The slice shape every resource of this pool is derived from."""
        return TpuSlice.parse(self.generation, self.topology, self.machine_type)

    @property
    def min_slices(self) -> int:
        """Fewest slices kept (``slices`` when autoscaling is off)."""
        return self.autoscaling.min_slices if self.autoscaling.enabled else self.slices

    @property
    def node_pool_names(self) -> list[str]:
        """The GKE node pools of this pool: one per slice (``<pool>-<i>``) when multi-host, else ``<pool>``."""
        return [f"{self.name}-{i}" for i in range(self.slices)] if self.tpu_slice.multi_host else [self.name]

    @property
    def min_gke_version(self) -> str:
        """Lowest GKE version that serves this pool: its slice, and flex-start's own minimum for TPUs."""
        need = [self.tpu_slice.min_gke_version]
        if self.capacity.gke_minimum is not None:
            need.append(self.capacity.gke_minimum.version)
        return max(need, key=gke_version_key)


def slice_shape(s: TpuSlice) -> tuple[str, str]:
    """What a chip's TPU metrics say of its slice: GKE's accelerator label value and the topology (the device
    plugin's ``model`` and ``tpu_topology`` labels). Pools of one shape cannot be told apart by them."""
    return (s.gke_accelerator, s.topology)


def required_gke_version(pools: Iterable[SlicePoolConfig]) -> str:
    """The lowest GKE version that serves every pool (slice, capacity type, tpuray's floor); at least one pool."""
    return max((p.min_gke_version for p in pools), key=gke_version_key)
