"""The versions tpuray installs and checks against, in one table, with the facts that tie them to each other.

The config's defaults (``ray.helmChartVersion``, ``ray.tpuWebhook.chartVersion``, its ``certManager.chartVersion``,
``kueue.chartVersion``), the KubeRay operator's Helm values (:data:`KUBERAY_FEATURE_GATES`), ``tpuray doctor``'s
floors and ``tools/fetch_crds.py`` (which loads this file by its path: standard library only, imports nothing) all
read these values; none is written anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "CERT_MANAGER_CHART",
    "GATE_DEFAULTS",
    "GMP_RELEASE",
    "INCREMENTAL_UPGRADE",
    "INCREMENTAL_UPGRADE_DEFAULTS",
    "KUBERAY_CHART",
    "KUBERAY_FEATURE_GATES",
    "KUBERAY_GATES",
    "KUEUE_CHART",
    "MULTI_HOST_INDEXING",
    "MULTI_HOST_INDEXING_DEFAULTS",
    "TPU_WEBHOOK",
    "WEBHOOK_BASE_RELEASE",
    "WEBHOOK_GENERATION_FLOORS",
    "WEBHOOK_INDEXING_RELEASE",
    "WEBHOOK_IRONWOOD_CHART",
    "FeatureGate",
    "GateSpec",
    "WebhookPin",
    "feature_gate_default",
    "helm_feature_gates",
    "multi_host_indexing_default",
    "release_key",
]


def release_key(version: str) -> tuple[int, ...] | None:
    """``1.3.2``, ``v1.7.0`` or an image tag ``v1.3.1-gke.2`` -> (1, 3, 1); None when it does not start X.Y.Z."""
    head = version.removeprefix("v").split("-", 1)[0].split("+", 1)[0]
    parts = head.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 9 for p in parts):
        return None
    return tuple(int(p) for p in parts)


# ---- KubeRay ----------------------------------------------------------------------------------------------------
KUBERAY_CHART = "1.7.0"
"""The kuberay-operator Helm chart (https://ray-project.github.io/kuberay-helm/), which runs
``quay.io/kuberay/operator:v1.7.0`` (``helm-chart/kuberay-operator/values.yaml`` at v1.7.0), and the KubeRay release
whose CRDs ``tools/fetch_crds.py`` fetches."""

MULTI_HOST_INDEXING = "RayMultiHostIndexing"
"""KubeRay's feature gate that labels multi-host worker pods ``ray.io/worker-group-replica-index``,
``ray.io/worker-group-replica-name`` and ``ray.io/replica-host-index`` and reconciles a multi-host replica as a unit
(ray-project/kuberay ``ray-operator/controllers/ray/common/pod.go`` and ``raycluster_controller.go`` at v1.7.0)."""

INCREMENTAL_UPGRADE = "RayServiceIncrementalUpgrade"
"""KubeRay's feature gate of a RayService's ``NewClusterWithIncrementalUpgrade`` upgrade type: with it off the
controller treats that type as no upgrade (``ray-operator/pkg/features/features.go``)."""


@dataclass(frozen=True)
class GateSpec:
    """One KubeRay feature gate as a release registers it (``featuregate.FeatureSpec``)."""

    default: bool
    stage: str
    """``Alpha`` or ``Beta``: which of the featuregate package's ``AllAlpha``/``AllBeta`` switches reaches it."""


_A, _BON = GateSpec(False, "Alpha"), GateSpec(True, "Beta")
KUBERAY_GATES: Mapping[str, Mapping[str, GateSpec]] = MappingProxyType(
    {
        "1.5": MappingProxyType(
            {
                "RayClusterStatusConditions": _BON,
                "RayJobDeletionPolicy": _A,
                MULTI_HOST_INDEXING: _A,
                INCREMENTAL_UPGRADE: _A,
            }
        ),
        "1.6": MappingProxyType(
            {
                "RayClusterStatusConditions": _BON,
                "RayJobDeletionPolicy": _BON,
                MULTI_HOST_INDEXING: _BON,
                INCREMENTAL_UPGRADE: _A,
                "RayCronJob": _A,
                "AsyncJobInfoQuery": _A,
            }
        ),
        "1.7": MappingProxyType(
            {
                "RayClusterStatusConditions": _BON,
                "RayJobDeletionPolicy": _BON,
                MULTI_HOST_INDEXING: _BON,
                INCREMENTAL_UPGRADE: _BON,
                "RayCronJob": _A,
                "SidecarSubmitterRestart": _A,
                "RayClusterNetworkPolicy": _A,
                "GCSFaultToleranceEmbeddedStorage": _A,
                "RayClusterMTLS": _A,
                "RayClusterHistoryServer": _A,
                "KubernetesWAS": _A,
            }
        ),
    }
)
"""Every gate a KubeRay minor release registers, by minor: ``defaultFeatureGates`` of ray-project/kuberay
``ray-operator/pkg/features/features.go``, the same at every patch release of a minor (v1.5.0-v1.5.2, v1.6.0-v1.6.2,
v1.7.0). The operator exits on a ``--feature-gates`` naming any other (component-base ``featuregate``:
"unrecognized feature gate"), except the package's own ``AllAlpha`` and ``AllBeta``. Before 1.5 neither gate tpuray
reads exists; after 1.7 nothing is known here."""

MULTI_HOST_INDEXING_DEFAULTS: Mapping[str, bool] = MappingProxyType(
    {minor: gates[MULTI_HOST_INDEXING].default for minor, gates in KUBERAY_GATES.items()}
)
"""The gate's default by KubeRay minor release (:data:`KUBERAY_GATES`): Alpha and off in 1.5, Beta and on in 1.6 and
1.7. Before 1.5 the gate does not exist (no indexing labels); after 1.7 it is not known here."""


@dataclass(frozen=True)
class FeatureGate:
    """One gate tpuray sets on the KubeRay operator, and why."""

    name: str
    enabled: bool
    why: str


KUBERAY_FEATURE_GATES: tuple[FeatureGate, ...] = (
    FeatureGate(
        MULTI_HOST_INDEXING,
        False,
        "the TPU webhook tpuray installs (TPU_WEBHOOK) sees KubeRay's indexing labels, skips its own replicaIndex "
        "label and still requires pod affinity on replicaIndex, which no pod then carries, so no pod of any "
        "multi-host replica schedules, the first included: kube-scheduler lets a group's first pod through only "
        "when it matches its own affinity term (ai-on-gke/kuberay-tpu-webhook main.go mutatePod and injectAffinity "
        "at 5da78aa; kubernetes pkg/scheduler/framework/plugins/interpodaffinity/filtering.go; fixed in "
        "f82f9b4, WEBHOOK_INDEXING_RELEASE, which no published chart ships). Off, KubeRay takes its legacy path: no "
        "indexing labels, pods created one by one, and the webhook numbers them and labels replicaIndex, which Ray's "
        "autoscaler reads too (ray/autoscaler/_private/kuberay/node_provider.py REPLICA_INDEX_KEY)",
    ),
)
"""The ``featureGates`` tpuray gives the operator's Helm release. Helm replaces a list value whole, so the chart's
own list (``values.yaml``: RayClusterStatusConditions, RayJobDeletionPolicy, RayMultiHostIndexing,
RayServiceIncrementalUpgrade on; RayCronJob, RayClusterMTLS, RayClusterNetworkPolicy, RayClusterHistoryServer off)
is dropped and ``_helpers.tpl`` renders only these into ``--feature-gates=``; every other gate takes the binary's
default from ``features.go``, which at v1.7.0 is the value the chart's list gave it."""


def helm_feature_gates() -> list[dict[str, object]]:
    """:data:`KUBERAY_FEATURE_GATES` as the chart's ``featureGates`` value (a list of ``{name, enabled}``)."""
    return [{"name": g.name, "enabled": g.enabled} for g in KUBERAY_FEATURE_GATES]


INCREMENTAL_UPGRADE_DEFAULTS: Mapping[str, bool] = MappingProxyType(
    {minor: gates[INCREMENTAL_UPGRADE].default for minor, gates in KUBERAY_GATES.items()}
)
"""The gate's default by KubeRay minor release (:data:`KUBERAY_GATES`): Alpha and off in 1.5 and 1.6, Beta and on in
1.7 (``helm-chart/kuberay-operator/values.yaml`` at v1.7.0 lists it enabled). Before 1.5 it does not exist."""

GATE_DEFAULTS: Mapping[str, Mapping[str, bool]] = MappingProxyType(
    {MULTI_HOST_INDEXING: MULTI_HOST_INDEXING_DEFAULTS, INCREMENTAL_UPGRADE: INCREMENTAL_UPGRADE_DEFAULTS}
)
"""The KubeRay gates tpuray reads on a live operator or a declared release, each with its defaults by minor."""


def feature_gate_default(gate: str, kuberay_version: str) -> bool | None:
    """Whether KubeRay ``kuberay_version`` runs with ``gate`` (a key of :data:`GATE_DEFAULTS`) on when no flag sets
    it: False before 1.5 (neither gate exists), the table's value for 1.5 to 1.7, None (unknown) for a later or
    unreadable version."""
    key = release_key(kuberay_version)
    if key is None:
        return None
    if key[:2] < (1, 5):
        return False
    return GATE_DEFAULTS[gate].get(f"{key[0]}.{key[1]}")


def multi_host_indexing_default(kuberay_version: str) -> bool | None:
    """:func:`feature_gate_default` of :data:`MULTI_HOST_INDEXING`."""
    return feature_gate_default(MULTI_HOST_INDEXING, kuberay_version)


# ---- the KubeRay TPU webhook ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WebhookPin:
    """A kuberay-tpu-webhook chart and what it runs (``helm-chart/Chart.yaml`` and ``values.yaml``)."""

    chart: str
    release: str
    """The webhook's release (the chart's appVersion)."""
    image_tag: str
    """``tpuWebhook.image.tag`` of the chart: ``v<release>-gke.<n>``."""


TPU_WEBHOOK = WebhookPin(chart="0.3.1", release="1.3.1", image_tag="v1.3.1-gke.2")
"""The chart tpuray installs (``oci://us-docker.pkg.dev/ai-on-gke/kuberay-tpu-webhook-helm``): ai-on-gke/
kuberay-tpu-webhook ``helm-chart/`` at 5da78aa, still the chart at the repository's head."""

WEBHOOK_IRONWOOD_CHART = "0.3.1"
"""The first chart whose webhook serves tpu7x: 0.3.1 ships 1.3.1, "Added Ironwood (TPU v7x) support"; the chart
before it, 0.2.6, ships 1.2.5 (``helm-chart/Chart.yaml`` history of ai-on-gke/kuberay-tpu-webhook)."""

WEBHOOK_BASE_RELEASE = "1.2.4"
"""The first row of the webhook README's compatibility table: TPU v4 to v6e, with KubeRay 1.1.1."""

WEBHOOK_GENERATION_FLOORS: Mapping[str, str] = MappingProxyType({"tpu7x": "1.3.1"})
"""The lowest webhook release that serves a generation, where it is newer than :data:`WEBHOOK_BASE_RELEASE`: 1.3.1
"Added Ironwood (TPU v7x) support" (the README's compatibility table)."""

WEBHOOK_INDEXING_RELEASE = "1.3.2"
"""The first webhook release whose pod affinity follows KubeRay's indexing labels (commit f82f9b4, "Fix Pod Affinity
rules with KubeRay MultiHostIndexing feature", tagged kuberay-tpu-webhook/v1.3.2); older ones strand every
multi-host replica of an operator running :data:`MULTI_HOST_INDEXING`."""

# ---- the rest of what the stack installs or checks --------------------------------------------------------------
CERT_MANAGER_CHART = "v1.19.1"
"""jetstack/cert-manager (https://charts.jetstack.io), which issues the TPU webhook's certificate."""

KUEUE_CHART = "0.19.2"
"""Kueue's Helm chart, and the Kueue release (v0.19.2) whose CRDs ``tools/fetch_crds.py`` fetches."""

GMP_RELEASE = "0.17.2"
"""Google Cloud Managed Service for Prometheus (GoogleCloudPlatform/prometheus-engine): the release whose
``charts/operator/crds`` the PodMonitorings are checked against; GKE runs the operator itself."""
