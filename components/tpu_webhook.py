"""``TpuWebhook``: the KubeRay TPU webhook and, unless the cluster has it, the cert-manager it needs.

The webhook (https://github.com/ai-on-gke/kuberay-tpu-webhook; chart 0.3.1 ships image ``v1.3.1-gke.2``, whose code
is commit 5da78aa's ``main.go``, ``mutatePod``) mutates every new pod labelled ``app.kubernetes.io/name: kuberay``
that requests ``google.com/tpu``. Into each container that requests TPUs it injects, each only where the container
leaves it unset:

- ``TPU_WORKER_ID`` (the host's index in its slice; on tpu7x one per TPU container, ``host * containers +
  container``) and ``TPU_NAME`` (``<group>-<replica>``);
- ``TPU_DEVICE_PLUGIN_HOST_IP`` (the node's IP, from ``status.hostIP``) and ``TPU_DEVICE_PLUGIN_ADDR``
  (``$(TPU_DEVICE_PLUGIN_HOST_IP):2112``, the GKE TPU device plugin's metrics, which Ray's reporter agent reads);
- on a multi-host slice, ``TPU_WORKER_HOSTNAMES`` (``<group>-<replica>-<host>.<cluster>-headless``, one per host),
  and on tpu7x also ``TPU_PROCESS_ADDRESSES`` (every host at ``8471 + container``) and ``TPU_PROCESS_PORT``
  (``8471 + container``);
- where the container sets ``MEGASCALE_NUM_SLICES``: ``MEGASCALE_SLICE_ID`` (the replica),
  ``MEGASCALE_COORDINATOR_ADDRESS`` (host 0 of replica 0; on tpu7x with port 8081, container 0's) and
  ``MEGASCALE_PORT`` (8081; on tpu7x ``8081 + container``).

On a multi-host slice it also sets the pod's hostname and subdomain in the cluster's headless service and a required
pod affinity and anti-affinity per node pool on its ``replicaIndex`` pod label (``injectAffinity``), a label it adds
itself only for a KubeRay that does not label replica indices. Ray labels its TPU nodes from those variables
(``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``) and reserves a multi-host slice by them, so a multi-host
slice's Ray pods must be created after the webhook serves. Installed as its README says: cert-manager from the
jetstack chart with its CRDs (the webhook's ``Certificate`` and its CA injection), then the webhook's chart from
``oci://us-docker.pkg.dev/ai-on-gke/kuberay-tpu-webhook-helm``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tpuray.components.catalog.names import TPU_WEBHOOK
from tpuray.components.planning.component_args import TpuWebhookPlan

__all__ = ["CERT_MANAGER_NAMESPACE", "CERT_MANAGER_REPO", "TPU_WEBHOOK_CHART", "TpuWebhook", "TpuWebhookArgs"]

TPU_WEBHOOK_CHART = "oci://us-docker.pkg.dev/ai-on-gke/kuberay-tpu-webhook-helm/kuberay-tpu-webhook"
CERT_MANAGER_REPO = "https://charts.jetstack.io"
CERT_MANAGER_NAMESPACE = "cert-manager"


@dataclass
class TpuWebhookArgs:
    """Inputs of :class:`TpuWebhook`."""

    plan: TpuWebhookPlan
    """The charts and namespace (:func:`~tpuray.components.planning.stack_plan.plan_stack` builds it)."""
    depends_on: list[pulumi.Resource] | None = None
    """What every child waits for: the cluster and its system node pool."""


class TpuWebhook(pulumi.ComponentResource):
    """The KubeRay TPU webhook's Helm release, after cert-manager's."""

    cert_manager: k8s.helm.v3.Release | None
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: TpuWebhookArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpuray:index:TpuWebhook", name, None, opts)
        plan = args.plan
        after = list(args.depends_on or [])
        self.cert_manager = None
        if plan.cert_manager_chart_version is not None:
            self.cert_manager = k8s.helm.v3.Release(
                f"{name}-cert-manager",
                name="cert-manager",
                chart="cert-manager",
                version=plan.cert_manager_chart_version,
                namespace=CERT_MANAGER_NAMESPACE,
                create_namespace=True,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CERT_MANAGER_REPO),
                # https://cert-manager.io/docs/installation/helm/: the CRDs with the release (crds.enabled), kept on
                # uninstall (crds.keep, the chart's default) so that certificates are not deleted with it
                values={"crds": {"enabled": True, "keep": True}},
                opts=pulumi.ResourceOptions(parent=self, depends_on=after),
            )
        self.release = k8s.helm.v3.Release(
            f"{name}-{TPU_WEBHOOK}",
            name=TPU_WEBHOOK,
            chart=TPU_WEBHOOK_CHART,
            version=plan.chart_version,
            # The chart creates its namespace itself (helm-chart/templates/deployment.yaml renders a Namespace
            # named tpuWebhook.namespace.name), so the release's own record lives in `default`, as its README's
            # `helm install` leaves it; --create-namespace of the same namespace would collide with the chart's.
            namespace="default",
            values={"tpuWebhook": {"namespace": {"name": plan.namespace}}},
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*after, *([self.cert_manager] if self.cert_manager else [])]
            ),
        )
        self.register_outputs({"namespace": plan.namespace, "chart_version": plan.chart_version})
