"""One environment: the :class:`StackConfig` of a Pulumi stack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tpuray.components.catalog.resource_names import derived_bucket_name
from tpuray.components.config.base import (
    ConfigModel,
    FieldProblems,
)
from tpuray.components.config.cluster import (
    ClusterConfig,
    NetworkConfig,
)
from tpuray.components.config.cost import CostConfig
from tpuray.components.config.kueue import KueueConfig
from tpuray.components.config.maintenance import (
    MaintenanceConfig,
)
from tpuray.components.config.monitoring import (
    MonitoringConfig,
)
from tpuray.components.config.ray import (
    RayConfig,
)
from tpuray.components.config.rules import stack_rules
from tpuray.components.config.serving import ServingConfig
from tpuray.components.config.slice_pool import SlicePoolConfig, required_gke_version
from tpuray.components.config.stack_view import StackView, view_sections_of
from tpuray.components.config.startup import StartupConfig
from tpuray.components.config.value_types import REGION, ProjectId, Zone
from tpuray.components.config.workload import CheckpointConfig, WorkloadConfig


def _stack_of(context: Any) -> str | None:
    stack = context.get("stack") if isinstance(context, Mapping) else None
    return stack if isinstance(stack, str) else None


class StackConfig(ConfigModel):
    """One environment. Keys are ``tpuray:<key>`` in the Pulumi stack file."""

    project: Annotated[ProjectId, Field(description="GCP project id")]
    # https://cloud.google.com/compute/docs/regions-zones : <area>-<location><number>, e.g. us-east5.
    region: Annotated[str, Field(pattern=REGION.pattern, description="GCP region, e.g. us-central2")]
    zone: Zone | None = Field(default=None, description="zone for zonal clusters and TPU pools ('' for none)")
    cluster: ClusterConfig = ClusterConfig()
    network: NetworkConfig = NetworkConfig()
    slice_pools: Annotated[
        list[SlicePoolConfig],
        Field(min_length=1, description="TPU slice pools: name, generation, topology, slices, capacity, autoscaling"),
    ]
    checkpoints: CheckpointConfig = CheckpointConfig()
    ray: RayConfig = RayConfig()
    workload: WorkloadConfig = WorkloadConfig()
    kueue: KueueConfig = KueueConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    cost: CostConfig = CostConfig()
    startup: StartupConfig = StartupConfig()
    serving: ServingConfig | None = Field(
        default=None, description="a Ray Serve application on whole TPU slices (a RayService); none if unset"
    )

    @field_validator("zone", mode="before")
    @classmethod
    def _empty_zone(cls, v: object) -> object:
        return None if v == "" else v  # Pulumi.yaml cannot declare a null default, so '' means unset

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> StackConfig:
        found = stack_rules(self.view(_stack_of(info.context)))
        if found:
            raise FieldProblems(found)
        return self

    def view(self, stack: str | None = None) -> StackView:
        """This stack as the cross-section rules read it (every part valid); ``stack`` names the stack."""
        return StackView(
            region=self.region,
            zone=self.zone,
            zone_invalid=False,
            project=self.project,
            pools=tuple(enumerate(self.slice_pools)),
            pool_names=tuple(p.name for p in self.slice_pools),
            stack=stack,
            serving=self.serving,
            **view_sections_of(self),
        )

    @property
    def required_master_version(self) -> str:
        """The lowest GKE version that serves every slice of this stack (``topology.MIN_GKE_VERSION`` at least)."""
        return required_gke_version(self.slice_pools)

    @property
    def master_version(self) -> str:
        """The lowest version the cluster is known to run at: ``cluster.minMasterVersion`` (an alias, read as its
        newest patch) if set, else what the TPU generations need. Unset, nothing is requested: the release channel's
        default is created, and ``tpuray doctor`` compares the live version with this floor."""
        return self.cluster.min_master_version or self.required_master_version

    @property
    def location(self) -> str:
        """The cluster's location: the region (regional) or the zone (zonal)."""
        return self.region if self.cluster.regional else str(self.zone)

    def pool_zone(self, pool: SlicePoolConfig) -> str | None:
        return pool.zone or self.zone

    @property
    def checkpoint_bucket(self) -> str:
        """``checkpoints.bucket``, else ``<project>-<cluster>-ckpt`` cut to a valid bucket name."""
        return self.checkpoints.bucket or derived_bucket_name(self.project, self.cluster.name)

    def workload_pool(self) -> SlicePoolConfig:
        """The slice pool the training job targets: ``workload.slicePool``, else the first pool."""
        name = self.workload.slice_pool
        return next(p for p in self.slice_pools if name is None or p.name == name)
