"""``KueueQueues``: a pinned Kueue (Helm chart) and the queue objects derived from the slice pools.

Declares the Kueue Helm release (``oci://registry.k8s.io/kueue/charts/kueue``, the version pinned in the config;
chart docs: https://github.com/kubernetes-sigs/kueue/tree/main/charts/kueue) and, after it (the chart brings the
CRDs and the webhooks), every object of :func:`~tpuray.components.planning.kueue.kueue_spec`: ResourceFlavors,
WorkloadPriorityClasses, ProvisioningRequestConfigs and AdmissionChecks for queued pools, the ClusterQueue and the
LocalQueue.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tpuray.components.planning.component_args import KueuePlan

__all__ = ["KUEUE_CHART", "KubernetesObject", "KueueQueues", "KueueQueuesArgs"]

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_RELEASE = "kueue"
_REFERRING_KINDS = ("AdmissionCheck", "ClusterQueue", "LocalQueue")


class KubernetesObject(pulumi.CustomResource):
    """Any Kubernetes object, top-level fields as given.

    ``pulumi_kubernetes.apiextensions.CustomResource`` only carries ``spec``; a WorkloadPriorityClass keeps
    ``value`` and ``description`` at the top level, so the objects are registered under the same type token
    (``kubernetes:<apiVersion>:<kind>``) with their own fields.
    """

    def __init__(self, name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        props = copy.deepcopy(dict(obj))
        super().__init__(f"kubernetes:{obj['apiVersion']}:{obj['kind']}", name, props, opts)


@dataclass
class KueueQueuesArgs:
    """Inputs of :class:`KueueQueues`: the planned queues, plus what they wait for."""

    plan: KueuePlan
    """The release and the queue objects, as data (:func:`~tpuray.components.planning.stack_plan.plan_stack`)."""
    depends_on: list[pulumi.Resource] | None = None
    """What every child waits for: the cluster, its node pools, and the Ray namespace (the LocalQueue's)."""


class KueueQueues(pulumi.ComponentResource):
    """Kueue from its Helm chart, plus the flavors, quota and queues of the TPU slice pools."""

    release: k8s.helm.v3.Release
    objects: dict[str, KubernetesObject]
    """By ``<kind>/<name>``."""
    local_queue: str
    cluster_queue: str

    def __init__(self, name: str, args: KueueQueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpuray:index:KueueQueues", name, None, opts)
        plan = args.plan
        after = list(args.depends_on or [])
        self.release = k8s.helm.v3.Release(
            f"{name}-kueue",
            name=KUEUE_RELEASE,
            chart=KUEUE_CHART,
            version=plan.chart_version,
            namespace=plan.namespace,
            create_namespace=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        self.objects = {}
        for obj in plan.spec.objects:
            key = f"{obj['kind']}/{obj['metadata']['name']}"
            # The release's webhooks validate every object. An AdmissionCheck names its ProvisioningRequestConfig,
            # the ClusterQueue the flavors and checks, the LocalQueue the ClusterQueue: each of those waits for
            # what the plan puts before it.
            earlier = list(self.objects.values()) if obj["kind"] in _REFERRING_KINDS else []
            self.objects[key] = KubernetesObject(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                obj,
                pulumi.ResourceOptions(parent=self, depends_on=[*after, self.release, *earlier]),
            )
        self.monitoring = [
            KubernetesObject(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                obj,
                pulumi.ResourceOptions(parent=self, depends_on=[*after, self.release]),
            )
            for obj in plan.monitoring
        ]
        self.local_queue = plan.spec.local_queue
        self.cluster_queue = plan.spec.cluster_queue
        self.register_outputs({"local_queue": self.local_queue, "cluster_queue": self.cluster_queue})
