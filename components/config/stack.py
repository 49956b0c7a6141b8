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

from tpuray.components.config.base import (
    ConfigModel,
    field_msg,
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
from tpuray.components.config.rules import (
    capacity_rules,
    control_plane_rules,
    monitoring_rules,
    stack_rules,
)
from tpuray.components.config.slice_pool import SlicePoolConfig, required_gke_version
from tpuray.components.config.workload import CheckpointConfig, WorkloadConfig
from tpuray.components.config_types import (
    REGION,
    ProjectId,
    Zone,
    derived_bucket_name,
)


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

    @field_validator("zone", mode="before")
    @classmethod
    def _empty_zone(cls, v: object) -> object:
        return None if v == "" else v  # Pulumi.yaml cannot declare a null default, so '' means unset

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> StackConfig:
        found = stack_rules(
            self.region,
            self.zone,
            self.cluster,
            list(enumerate(self.slice_pools)),
            [p.name for p in self.slice_pools],
            self.workload.slice_pool,
            self.network,
            self.project,
            self.checkpoints,
        )
        found += control_plane_rules(self.cluster, _stack_of(info.context))
        found += capacity_rules(
            list(enumerate(self.slice_pools)), self.cluster, self.ray, self.kueue, self.maintenance, self.workload
        )
        found += monitoring_rules(self.monitoring, list(enumerate(self.slice_pools)))
        if self.kueue.namespace == self.ray.namespace:
            found.append(
                field_msg(
                    "kueue.namespace",
                    f"{self.kueue.namespace!r} is Ray's namespace: Kueue's controller and webhook need their own "
                    "(e.g. kueue-system)",
                )
            )
        if found:
            raise ValueError("\n".join(found))
        return self

    @property
    def required_master_version(self) -> str:
        """The lowest GKE version that serves every slice of this stack with the Ray add-on."""
        return required_gke_version(self.slice_pools)

    @property
    def master_version(self) -> str:
        """``cluster.minMasterVersion`` if set, else what the TPU generations need."""
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
