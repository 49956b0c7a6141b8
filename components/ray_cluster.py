"""``RayTpuCluster`` and ``RayTpuJob``: KubeRay ``ray.io/v1`` resources for TPU slices.

``RayTpuCluster`` declares the Ray namespace, the checkpoint bucket (uniform access, public access prevention
enforced), a Google service account holding ``roles/storage.objectUser`` on that bucket only, a Kubernetes service
account bound to it by Workload Identity, optionally the KubeRay operator from its Helm chart (for clusters
without the GKE Ray add-on), and the RayCluster. ``RayTpuJob`` declares a RayJob, on its own cluster or on a
running RayCluster. The manifests are the pure dicts of :mod:`tpuray.components.planning.kuberay`, kept on the
components (``manifest``) so ``tpuray plan`` can write them out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from tpuray.components.config_types import service_account_id
from tpuray.components.planning.kuberay import (
    RayClusterParams,
    RayJobParams,
    dashboard_service_name,
    ray_cluster_manifest,
    ray_job_manifest,
)

__all__ = [
    "KUBERAY_HELM_REPO",
    "RayTpuCluster",
    "RayTpuClusterArgs",
    "RayTpuJob",
    "RayTpuJobArgs",
]

KUBERAY_HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_HELM_CHART = "kuberay-operator"
KUBERAY_NAMESPACE = "kuberay-system"
CHECKPOINT_ROLE = "roles/storage.objectUser"


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
    """Inputs of :class:`RayTpuCluster`."""

    project: str
    cluster_name: str
    """The GKE cluster's configured name (names the Google service account)."""
    params: RayClusterParams
    """The RayCluster, as pure data (names, images, TPU worker groups)."""
    bucket_location: str
    retention_days: int = 30
    """Delete checkpoints older than this many days (0 keeps them)."""
    operator: Literal["addon", "helm"] = "addon"
    helm_chart_version: str = "1.7.0"
    resource_labels: dict[str, str] | None = None
    depends_on: list[pulumi.Resource] | None = None
    """What every child waits for: the cluster (its Workload Identity pool must exist before the binding) and the
    node pools. A component's own ``depends_on`` does not reach its children, hence this field."""
    declare_cluster: bool = True
    """Declare the long-lived RayCluster; off when every job brings its own (``ray.jobMode: ephemeral``), which
    still needs the namespace, identity and bucket declared here."""


class RayTpuCluster(pulumi.ComponentResource):
    """A KubeRay RayCluster with one worker group per TPU slice pool, and its identity and storage."""

    manifest: dict[str, Any] | None
    """The RayCluster as declared (plain data); None when ``declare_cluster`` is off."""
    name: str
    namespace: str
    service_account: str
    bucket_name: pulumi.Output[str]
    google_service_account_email: pulumi.Output[str]
    dashboard_service: str
    ray_cluster: k8s.apiextensions.CustomResource | None
    prerequisites: list[pulumi.Resource]
    """What a Ray pod needs before it starts: namespace, service account and its bindings, the operator."""

    def __init__(self, name: str, args: RayTpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Rendering checks the KubeRay/TPU-webhook rules; a bad spec fails here, before any child exists.
        self.manifest = ray_cluster_manifest(args.params) if args.declare_cluster else None
        super().__init__("tpuray:index:RayTpuCluster", name, None, opts)
        p = args.params
        self.name, self.namespace, self.service_account = p.name, p.namespace, p.service_account
        self.dashboard_service = f"{p.namespace}/{dashboard_service_name(p.name)}"
        after = list(args.depends_on or [])
        child = pulumi.ResourceOptions(parent=self, depends_on=after)

        operator: list[pulumi.Resource] = []
        if args.operator == "helm":
            # Without the GKE add-on there is no TPU webhook: multi-host pods then lack TPU_WORKER_ID and
            # TPU_WORKER_HOSTNAMES unless the kuberay-tpu-webhook is installed separately.
            if any(g.tpu_slice.multi_host for g in p.groups):
                pulumi.log.warn(
                    "ray.operator is 'helm': install the kuberay-tpu-webhook for multi-host TPU slices "
                    "(the GKE Ray add-on bundles it)",
                    resource=self,
                )
            operator.append(
                k8s.helm.v3.Release(
                    f"{name}-kuberay-operator",
                    name=KUBERAY_HELM_CHART,
                    chart=KUBERAY_HELM_CHART,
                    version=args.helm_chart_version,
                    namespace=KUBERAY_NAMESPACE,
                    create_namespace=True,
                    repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KUBERAY_HELM_REPO),
                    opts=child,
                )
            )

        ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=p.namespace, labels=dict(p.labels)),
            opts=child,
        )
        bucket = gcp.storage.Bucket(
            f"{name}-checkpoints",
            name=p.checkpoint_bucket,
            project=args.project,
            location=args.bucket_location,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=args.retention_days),
                )
            ]
            if args.retention_days
            else None,
            labels=args.resource_labels or None,
            opts=child,
        )
        gsa = gcp.serviceaccount.Account(
            f"{name}-ray-gsa",
            account_id=service_account_id(args.cluster_name, "ray"),
            display_name=f"Ray pods of {args.cluster_name} (checkpoint bucket only)",
            project=args.project,
            opts=child,
        )
        bucket_access = gcp.storage.BucketIAMMember(
            f"{name}-checkpoints-object-user",
            bucket=bucket.name,
            role=CHECKPOINT_ROLE,
            member=gsa.email.apply(lambda e: f"serviceAccount:{e}"),
            opts=child,
        )
        wi_binding = gcp.serviceaccount.IAMMember(
            f"{name}-ray-workload-identity",
            service_account_id=gsa.name,
            role="roles/iam.workloadIdentityUser",
            member=f"serviceAccount:{args.project}.svc.id.goog[{p.namespace}/{p.service_account}]",
            opts=child,
        )
        ksa = k8s.core.v1.ServiceAccount(
            f"{name}-ray-ksa",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=p.service_account,
                namespace=p.namespace,
                annotations={"iam.gke.io/gcp-service-account": gsa.email},
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*after, ns]),
        )
        self.prerequisites = [ns, ksa, bucket_access, wi_binding, *operator]
        self.ray_cluster = None
        if self.manifest is not None:
            self.ray_cluster = declare_manifest(
                f"{name}-raycluster",
                self.manifest,
                pulumi.ResourceOptions(parent=self, depends_on=[*after, *self.prerequisites]),
            )
        self.bucket_name = bucket.name
        self.google_service_account_email = gsa.email
        self.register_outputs(
            {
                "name": self.name,
                "namespace": self.namespace,
                "dashboard_service": self.dashboard_service,
                "bucket_name": self.bucket_name,
            }
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
