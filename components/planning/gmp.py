"""Managed Service for Prometheus objects for the Ray pods' and Kueue's metrics. Pure data.

The GKE Ray add-on's cluster monitoring would collect Ray's own series from the Ray pods' metrics port
(https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/how-to/collect-view-logs-metrics); tpuray's
stacks run KubeRay from its Helm chart without the add-on. tpuray declares, as ``monitoring.googleapis.com/v1``
objects (GMP v0.17 CRDs; https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed#gmp-pod-monitoring):

- a PodMonitoring of the Ray cluster's pods that keeps every Ray series, the training job's own gauges among
  them (``ray_tpuray_*``, exported through ``ray.util.metrics`` on the same port);
- with Kueue, a PodMonitoring of Kueue's controller manager: its metrics endpoint is HTTPS with authentication
  and authorization (https://kueue.sigs.k8s.io/docs/tasks/manage/observability/setup_prometheus/), so a service
  account bound to the chart's metrics-reader ClusterRole holds the token, and GMP's collectors may read that
  token's Secret (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed#authorization).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuray.components.catalog import metric_names as mn
from tpuray.components.catalog.names import RAY_CLUSTER_POD_LABEL, RAY_METRICS_PORT

__all__ = [
    "GMP_API_VERSION",
    "GMP_COLLECTOR",
    "KUEUE_METRICS_READER_ROLE",
    "kueue_monitoring",
    "ray_pod_monitoring",
]

GMP_API_VERSION = "monitoring.googleapis.com/v1"
SCRAPE_INTERVAL = "30s"
GMP_COLLECTOR = ("gmp-system", "collector")
"""Namespace and service account of GMP's managed collectors (they read the scrape credentials' Secrets)."""
KUEUE_CONTROLLER_LABELS = {"control-plane": "controller-manager"}
"""Pod labels of Kueue's controller manager (Kueue's config/manager and Helm chart)."""
KUEUE_METRICS_READER_ROLE = "kueue-metrics-reader"
"""ClusterRole the Kueue chart ships for scraping its metrics (``nonResourceURLs: [/metrics]``, verb get)."""
KUEUE_SCRAPER = "kueue-metrics-scraper"
TOKEN_KEY = "token"


def _meta(name: str, namespace: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def ray_pod_monitoring(
    cluster: str, namespace: str, labels: Mapping[str, str], role: str = "training"
) -> dict[str, Any]:
    """The PodMonitoring ``<cluster>-<role>-metrics`` of the pods labelled ``cluster``: every Ray series, the training
    job's gauges or Ray Serve's among them."""
    endpoint: dict[str, Any] = {"port": RAY_METRICS_PORT, "interval": SCRAPE_INTERVAL}
    return {
        "apiVersion": GMP_API_VERSION,
        "kind": "PodMonitoring",
        "metadata": _meta(f"{cluster}-{role}-metrics", namespace, labels),
        "spec": {"selector": {"matchLabels": {RAY_CLUSTER_POD_LABEL: cluster}}, "endpoints": [endpoint]},
    }


def kueue_monitoring(namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Kueue's controller metrics: the scraper's identity and token, the collectors' right to read it, and the
    PodMonitoring."""
    collector_ns, collector_sa = GMP_COLLECTOR
    secret = f"{KUEUE_SCRAPER}-token"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(KUEUE_SCRAPER, namespace, labels)},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                **_meta(secret, namespace, labels),
                "annotations": {"kubernetes.io/service-account.name": KUEUE_SCRAPER},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(KUEUE_SCRAPER, None, labels),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": KUEUE_METRICS_READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": KUEUE_SCRAPER, "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(f"{KUEUE_SCRAPER}-secret-reader", namespace, labels),
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(f"{KUEUE_SCRAPER}-secret-reader", namespace, labels),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{KUEUE_SCRAPER}-secret-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": collector_sa, "namespace": collector_ns}],
        },
        {
            "apiVersion": GMP_API_VERSION,
            "kind": "PodMonitoring",
            "metadata": _meta("kueue-controller-metrics", namespace, labels),
            "spec": {
                "selector": {"matchLabels": dict(KUEUE_CONTROLLER_LABELS)},
                "endpoints": [
                    {
                        "port": mn.KUEUE_METRICS_PORT,
                        "scheme": "https",
                        "interval": SCRAPE_INTERVAL,
                        # Not verified, because there is nothing to verify against. GMP's CRD takes a CA
                        # (tls.ca.secret, a Secret key), but no Secret holds the CA of the certificate Kueue
                        # serves here: with the chart's defaults, which tpuray installs (internal cert management,
                        # no cert-manager), kueue v0.19.2 cmd/kueue/main.go gives the metrics server no certificate
                        # (its cert watcher runs only when internal cert management is off), so controller-runtime
                        # pkg/metrics/server/server.go createListener generates a self-signed one for "localhost"
                        # in memory at each start. Only with enableCertManager does the chart issue a CA-signed
                        # one (templates/certmanager/certificate-metrics.yaml, Secret kueue-metrics-server-cert);
                        # the chart's own ServiceMonitor skips verification too (values.yaml
                        # metrics.serviceMonitor.tlsConfig). What the bearer token risks is small: it is the
                        # scraper's, bound only to kueue-metrics-reader (GET /metrics), sent to the pod's own IP.
                        "tls": {"insecureSkipVerify": True},
                        "authorization": {
                            "type": "Bearer",
                            "credentials": {"secret": {"name": secret, "key": TOKEN_KEY, "namespace": namespace}},
                        },
                    }
                ],
            },
        },
    ]
