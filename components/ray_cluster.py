"""``RayTpuCluster``, ``RayTpuJob`` and ``RayTpuService``: the KubeRay ``ray.io/v1`` resources for TPU slices.

``RayTpuCluster`` declares the RayCluster, ``RayTpuJob`` a RayJob, on its own cluster or on a running RayCluster,
and ``RayTpuService`` the Serve application's RayService; all run on a
:class:`~tpuray.components.ray_platform.RayPlatform` (namespace, policies, token, checkpoint bucket, identities, the
KubeRay operator). The manifests are the pure dicts of :mod:`tpuray.components.planning.kuberay` and
:mod:`tpuray.components.planning.serving`, kept on the components (``manifest``) so ``tpuray plan`` can write them
out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from tpuray.components.kueue import KubernetesObject
from tpuray.components.planning.component_args import RayClusterPlan
from tpuray.components.planning.kuberay import (
    RayJobParams,
    dashboard_service_name,
    ray_cluster_manifest,
    ray_job_manifest,
)
from tpuray.components.planning.serving import ServingPlan, ray_service_manifest
from tpuray.components.ray_platform import KUBERAY_HELM_REPO, RayPlatform

__all__ = [
    "KUBERAY_HELM_REPO",
    "RayTpuCluster",
    "RayTpuClusterArgs",
    "RayTpuJob",
    "RayTpuJobArgs",
    "RayTpuService",
    "RayTpuServiceArgs",
]


def declare_manifest(
    resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """Declare a pure manifest (``apiVersion``, ``kind``, ``metadata``, ``spec``) as it is, as a custom resource."""
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=copy.deepcopy(manifest["metadata"]),
        spec=copy.deepcopy(manifest["spec"]),
        opts=opts,
    )


@dataclass
class RayTpuClusterArgs:
    """Inputs of :class:`RayTpuCluster`: the planned cluster, plus the platform it runs on."""

    plan: RayClusterPlan
    """Everything declared, as data (:func:`~tpuray.components.planning.stack_plan.plan_stack` builds it)."""
    platform: RayPlatform
    """The namespace, identities, token and operator the RayCluster's pods need first."""
    depends_on: list[pulumi.Resource] | None = None
    """What the RayCluster waits for besides the platform: the node pools (and the TPU webhook, which mutates TPU
    pods as they are created)."""


class RayTpuCluster(pulumi.ComponentResource):
    """A KubeRay RayCluster with one worker group per TPU slice pool, on a :class:`RayPlatform`.

    With ``declare_cluster`` off (``ray.jobMode: ephemeral``) it declares nothing: each RayJob brings its own
    cluster. It is declared anyway, so its URN (and that of its RayCluster, once declared) stays what it was.
    """

    manifest: dict[str, Any] | None
    """The RayCluster as declared (plain data); None when ``declare_cluster`` is off."""
    name: str
    namespace: str
    dashboard_service: str
    ray_cluster: k8s.apiextensions.CustomResource | None

    def __init__(self, name: str, args: RayTpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        plan = args.plan
        # Rendering checks the KubeRay/TPU-webhook rules; a bad spec fails here, before any child exists.
        self.manifest = ray_cluster_manifest(plan.params) if plan.declare_cluster else None
        super().__init__("tpuray:index:RayTpuCluster", name, None, opts)
        p = plan.params
        self.name, self.namespace = p.name, p.namespace
        self.dashboard_service = f"{p.namespace}/{dashboard_service_name(p.name)}"
        self.ray_cluster = None
        if self.manifest is not None:
            self.ray_cluster = declare_manifest(
                f"{name}-raycluster",
                self.manifest,
                pulumi.ResourceOptions(
                    parent=self, depends_on=[*(args.depends_on or []), *args.platform.prerequisites]
                ),
            )
        self.register_outputs(
            {"name": self.name, "namespace": self.namespace, "dashboard_service": self.dashboard_service}
        )


@dataclass
class RayTpuJobArgs:
    """Inputs of :class:`RayTpuJob`: the job as pure data, plus what it must wait for."""

    params: RayJobParams
    depends_on: list[pulumi.Resource] | None = None


class RayTpuJob(pulumi.ComponentResource):
    """A KubeRay RayJob running ``python -m tpuray.workloads.train`` on TPU slices."""

    manifest: dict[str, Any]
    name: str
    ray_job: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: RayTpuJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        self.manifest = ray_job_manifest(args.params)
        super().__init__("tpuray:index:RayTpuJob", name, None, opts)
        self.name = args.params.name
        self.ray_job = declare_manifest(
            f"{name}-rayjob",
            self.manifest,
            # A suspended (Kueue-managed) job is unsuspended by Kueue, not by Pulumi: a changed job is a new job,
            # so Pulumi replaces it rather than re-applying `suspend: true` onto a running one.
            pulumi.ResourceOptions(
                parent=self,
                depends_on=args.depends_on or [],
                replace_on_changes=["spec"] if args.params.suspend else None,
            ),
        )
        self.register_outputs({"name": self.name})


@dataclass
class RayTpuServiceArgs:
    """Inputs of :class:`RayTpuService`: the planned RayService, plus the platform it runs on."""

    plan: ServingPlan
    """Everything declared, as data (:func:`~tpuray.components.planning.serving.serving_plan`)."""
    platform: RayPlatform
    """The namespace, identities, token and operator its pods need first."""
    depends_on: list[pulumi.Resource] | None = None
    """What it waits for besides the platform: the node pools, the TPU webhook."""


class RayTpuService(pulumi.ComponentResource):
    """A KubeRay RayService: one Ray Serve application on whole TPU slices of a pool of its own."""

    manifest: dict[str, Any]
    name: str
    namespace: str
    ray_service: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: RayTpuServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Rendering checks the KubeRay/TPU-webhook rules; a bad spec fails here, before any child exists.
        self.manifest = ray_service_manifest(args.plan)
        super().__init__("tpuray:index:RayTpuService", name, None, opts)
        self.name, self.namespace = args.plan.name, args.plan.namespace
        after = [*(args.depends_on or []), *args.platform.prerequisites]
        # its pods' own network identity and scrape (planning/serving.py): declared before the pods exist
        own: list[pulumi.Resource] = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-netpol-{pol['metadata']['name']}",
                metadata=cast(Any, pol["metadata"]),
                spec=cast(Any, pol["spec"]),
                opts=pulumi.ResourceOptions(parent=self, depends_on=after),
            )
            for pol in args.plan.network_policies
        ]
        own += [
            KubernetesObject(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                obj,
                pulumi.ResourceOptions(parent=self, depends_on=after),
            )
            for obj in args.plan.monitoring
        ]
        self.ray_service = declare_manifest(
            f"{name}-rayservice", self.manifest, pulumi.ResourceOptions(parent=self, depends_on=[*after, *own])
        )
        self.register_outputs({"name": self.name, "namespace": self.namespace})
