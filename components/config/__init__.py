"""The typed configuration of one tpuray environment (a Pulumi stack).

Pure pydantic; imports no Pulumi. Two loaders feed the same model:

- :func:`load_stack_file` reads a ``Pulumi.<env>.yaml`` directly (the project's CLI, tests, the local run);
- ``tpuray.components.stack_config.from_pulumi_config`` reads the stack's ``pulumi.Config`` in the program.

Keys are camelCase in YAML (Pulumi's convention) and snake_case in Python. A bad value anywhere raises one
:class:`ConfigError` that lists every problem with its path, e.g. ``slicePools[1].topology: ...``.

The modules: ``base`` (the model base, sub-field errors), ``capacity``, ``slice_pool``, ``cluster``, ``ray``,
``kueue``, ``workload``, ``cost``, ``monitoring``, ``maintenance`` (one section each), ``stack`` (the whole
stack), ``rules`` (the rules that span sections), ``errors`` (problem paths and messages) and ``loaders``.
"""

from __future__ import annotations

from tpuray.components.catalog.gke_versions import gke_version_key
from tpuray.components.config.base import ConfigError
from tpuray.components.config.capacity import (
    CAPACITY_CLASSES,
    CAPACITY_TYPES,
    Capacity,
    CapacityClass,
    FlexStart,
    OnDemand,
    Queued,
    Reservation,
    Spot,
    capacity_type,
)
from tpuray.components.config.cluster import (
    MAX_AUTHORIZED_NETWORKS,
    PRODUCTION_STACKS,
    AuthorizedNetworkConfig,
    ClusterConfig,
    ControlPlaneEndpoint,
    NetworkConfig,
    ReleaseChannel,
    is_production_stack,
)
from tpuray.components.config.cost import CostConfig, SuppliedRateConfig
from tpuray.components.config.errors import problems
from tpuray.components.config.gke_cluster_types import AuthorizedNetwork, MaintenanceExclusion, MaintenanceWindow
from tpuray.components.config.kueue import KueueConfig
from tpuray.components.config.loaders import (
    NAMESPACE,
    RAY_TOKEN_CONFIG_KEY,
    SECRET_KEYS,
    exclusive_sources,
    find_stack_file,
    load_stack_file,
    parse_stack_config,
    pulumi_values,
    stack_of_file,
    stack_values,
    validated_as,
)
from tpuray.components.config.maintenance import (
    MaintenanceConfig,
    MaintenanceExclusionConfig,
    MaintenanceWindowConfig,
)
from tpuray.components.config.monitoring import IdleAlert, IdleMetric, MonitoringConfig
from tpuray.components.config.ray import (
    DEFAULT_JOB_TTL_SECONDS,
    MIN_KUBERAY_AUTH_OPTIONS,
    MIN_RAY_TOKEN_AUTH,
    SYSTEM_NAMESPACE_PREFIXES,
    SYSTEM_NAMESPACES,
    RayConfig,
)
from tpuray.components.config.rules import (
    KUEUE_RESERVED_GROUP,
    RULES,
    capacity_rules,
    control_plane_rules,
    monitoring_rules,
    namespace_rules,
    pool_rules,
    rules_of_valid_parts,
    stack_rules,
)
from tpuray.components.config.slice_pool import Autoscaling, SlicePoolConfig, required_gke_version, slice_shape
from tpuray.components.config.stack import StackConfig
from tpuray.components.config.stack_view import StackView, view_of_values
from tpuray.components.config.value_types import UtcTime
from tpuray.components.config.workload import CheckpointConfig, ModelConfig, WorkloadConfig

__all__ = [
    "CAPACITY_CLASSES",
    "CAPACITY_TYPES",
    "DEFAULT_JOB_TTL_SECONDS",
    "KUEUE_RESERVED_GROUP",
    "MAX_AUTHORIZED_NETWORKS",
    "MIN_KUBERAY_AUTH_OPTIONS",
    "MIN_RAY_TOKEN_AUTH",
    "NAMESPACE",
    "PRODUCTION_STACKS",
    "RAY_TOKEN_CONFIG_KEY",
    "RULES",
    "SECRET_KEYS",
    "SYSTEM_NAMESPACES",
    "SYSTEM_NAMESPACE_PREFIXES",
    "AuthorizedNetwork",
    "AuthorizedNetworkConfig",
    "Autoscaling",
    "Capacity",
    "CapacityClass",
    "CheckpointConfig",
    "ClusterConfig",
    "ConfigError",
    "ControlPlaneEndpoint",
    "CostConfig",
    "FlexStart",
    "IdleAlert",
    "IdleMetric",
    "KueueConfig",
    "MaintenanceConfig",
    "MaintenanceExclusion",
    "MaintenanceExclusionConfig",
    "MaintenanceWindow",
    "MaintenanceWindowConfig",
    "ModelConfig",
    "MonitoringConfig",
    "NetworkConfig",
    "OnDemand",
    "Queued",
    "RayConfig",
    "ReleaseChannel",
    "Reservation",
    "SlicePoolConfig",
    "Spot",
    "StackConfig",
    "StackView",
    "SuppliedRateConfig",
    "UtcTime",
    "WorkloadConfig",
    "capacity_rules",
    "capacity_type",
    "control_plane_rules",
    "exclusive_sources",
    "find_stack_file",
    "gke_version_key",
    "is_production_stack",
    "load_stack_file",
    "monitoring_rules",
    "namespace_rules",
    "parse_stack_config",
    "pool_rules",
    "problems",
    "pulumi_values",
    "required_gke_version",
    "rules_of_valid_parts",
    "slice_shape",
    "stack_of_file",
    "stack_rules",
    "stack_values",
    "validated_as",
    "view_of_values",
]
