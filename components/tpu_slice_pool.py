"""``TpuSlicePool``: the GKE node pools of one TPU slice pool.

Declares what :func:`~tpuray.components.planning.node_pools.slice_pool_node_pools` planned: one
``gcp.container.NodePool`` per spec (one per slice for multi-host shapes) and, for multi-host tpu7x, the
``gcp.compute.ResourcePolicy`` workload policy the pools reference. Outputs the node pool names and the slice's summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from tpuray.components.catalog.names import CLOUD_PLATFORM_SCOPE
from tpuray.components.planning.component_args import SlicePoolPlan
from tpuray.components.planning.node_pools import NodePoolSpec

__all__ = ["TpuSlicePool", "TpuSlicePoolArgs"]


@dataclass
class TpuSlicePoolArgs:
    """Inputs of :class:`TpuSlicePool`: the planned pool, plus the links only a running program has."""

    pool: SlicePoolPlan
    """The pool as :func:`~tpuray.components.planning.stack_plan.plan_stack` planned it."""
    cluster: pulumi.Input[str]
    """The cluster resource's name or id (orders the pools after the cluster)."""
    service_account: pulumi.Input[str]
    """Email of the node service account."""


class TpuSlicePool(pulumi.ComponentResource):
    """``slices`` TPU slices of one shape and capacity type, as GKE node pools."""

    plans: list[NodePoolSpec]
    node_pools: list[gcp.container.NodePool]
    workload_policy: gcp.compute.ResourcePolicy | None
    pool_names: pulumi.Output[list[str]]
    summary: dict[str, Any]

    def __init__(self, name: str, args: TpuSlicePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # The config model has checked every rule (zones, DWS autoscaling, names); the planner only derived.
        pool = args.pool
        self.plans = list(pool.node_pools)
        super().__init__("tpuray:index:TpuSlicePool", name, None, opts)
        s = pool.tpu_slice
        self.workload_policy = None
        wp = self.plans[0].workload_policy
        if wp is not None:
            self.workload_policy = gcp.compute.ResourcePolicy(
                f"{name}-workload-policy",
                name=wp.name,
                project=pool.project,
                region=wp.region,
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type=wp.type, accelerator_topology=wp.accelerator_topology
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.node_pools = [self._node_pool(name, p, args) for p in self.plans]
        self.pool_names = pulumi.Output.all(*[np.name for np in self.node_pools]).apply(list)
        self.summary = {
            "pool": pool.name,
            "capacity": pool.capacity,
            "slices": pool.slices,
            "node_pools": [p.name for p in self.plans],
            "total_chips": pool.slices * s.chips,
            **s.summary(),
        }
        self.register_outputs({"pool_names": self.pool_names, "summary": self.summary})

    def _node_pool(self, name: str, p: NodePoolSpec, args: TpuSlicePoolArgs) -> gcp.container.NodePool:
        placement = None
        if p.placement is not None:
            placement = gcp.container.NodePoolPlacementPolicyArgs(
                type=p.placement.type,
                tpu_topology=p.placement.tpu_topology,
                policy_name=self.workload_policy.name if self.workload_policy and p.placement.policy_name else None,
            )
        autoscaling = None
        if p.autoscaling is not None:
            autoscaling = gcp.container.NodePoolAutoscalingArgs(
                min_node_count=p.autoscaling.min_node_count,
                max_node_count=p.autoscaling.max_node_count,
                location_policy=p.autoscaling.location_policy,
            )
        reservation = None
        if p.reservation_affinity is not None:
            r = p.reservation_affinity
            reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type=r.consume_reservation_type,
                key=r.key,
                values=list(r.values) if r.values else None,
            )
        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=p.machine_type,
            service_account=args.service_account,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            spot=p.spot or None,
            flex_start=p.flex_start or None,
            max_run_duration=p.max_run_duration,
            reservation_affinity=reservation,
            labels=p.labels,
            resource_labels=args.pool.resource_labels or None,
            taints=[
                gcp.container.NodePoolNodeConfigTaintArgs(key=t.key, value=t.value, effect=t.effect) for t in p.taints
            ],
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            # Shielded nodes with secure boot and integrity monitoring (CIS GKE 5.5.6, 5.5.7)
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True
            ),
            # the image pull path (planning.startup): streaming, a disk with the worker image preloaded
            image_type=p.image_type,
            gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=True) if p.image_streaming else None,
            secondary_boot_disks=(
                [
                    gcp.container.NodePoolNodeConfigSecondaryBootDiskArgs(
                        disk_image=p.secondary_boot_disk, mode="CONTAINER_IMAGE_CACHE"
                    )
                ]
                if p.secondary_boot_disk
                else None
            ),
            # the longer graceful node shutdown after a Spot VM's preemption notice (config.capacity.Spot)
            kubelet_config=(
                gcp.container.NodePoolNodeConfigKubeletConfigArgs(
                    shutdown_grace_period_seconds=p.node_shutdown.grace_seconds,
                    shutdown_grace_period_critical_pods_seconds=p.node_shutdown.critical_pods_seconds,
                )
                if p.node_shutdown is not None
                else None
            ),
        )
        return gcp.container.NodePool(
            f"{name}-{p.name}",
            name=p.name,
            project=args.pool.project,
            cluster=args.cluster,
            location=args.pool.location,
            node_locations=list(p.node_locations) if p.node_locations else None,
            node_count=p.node_count,
            initial_node_count=p.initial_node_count,
            autoscaling=autoscaling,
            placement_policy=placement,
            queued_provisioning=(
                gcp.container.NodePoolQueuedProvisioningArgs(enabled=True) if p.queued_provisioning else None
            ),
            management=gcp.container.NodePoolManagementArgs(
                auto_repair=p.auto_repair, auto_upgrade=args.pool.auto_upgrade
            ),
            node_config=node_config,
            opts=pulumi.ResourceOptions(parent=self),
        )
