"""The KubeRay TPU webhook and the cert-manager it needs: what multi-host slices need on a cluster whose KubeRay
comes from its Helm chart (which has no TPU webhook; the GKE Ray add-on bundled one)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tpuray.components.catalog.pins import CERT_MANAGER_CHART, TPU_WEBHOOK
from tpuray.components.config.base import NAME_PATTERN, ConfigModel, pattern
from tpuray.components.config.value_types import SemVer

__all__ = ["CertManagerConfig", "TpuWebhookConfig"]


class CertManagerConfig(ConfigModel):
    """cert-manager (https://cert-manager.io), which issues the webhook's serving certificate and injects its CA."""

    install: bool = Field(
        default=True,
        description="install cert-manager's Helm chart with its CRDs; false: the cluster already runs it (install it "
        "once per cluster, https://cert-manager.io/docs/installation/helm/)",
    )
    chart_version: Annotated[
        str, Field(pattern=pattern(r"^v[0-9]+\.[0-9]+\.[0-9]+$", f"a chart version vX.Y.Z, e.g. {CERT_MANAGER_CHART}"))
    ] = Field(default=CERT_MANAGER_CHART, description="jetstack/cert-manager chart version")


class TpuWebhookConfig(ConfigModel):
    """The KubeRay TPU webhook (https://github.com/ai-on-gke/kuberay-tpu-webhook): it gives each multi-host TPU pod
    TPU_NAME, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, its hostname in the headless service and MEGASCALE_*, from which
    Ray labels its TPU nodes and reserves whole slices."""

    enabled: bool | None = Field(
        default=None,
        description="install the webhook; default: when a slice pool is multi-host (single-host slices need none)",
    )
    chart_version: SemVer = Field(
        default=TPU_WEBHOOK.chart,
        description=f"kuberay-tpu-webhook chart version ({TPU_WEBHOOK.chart} ships webhook {TPU_WEBHOOK.release}: "
        "KubeRay >= 1.4, TPU v4 to tpu7x)",
    )
    namespace: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)] = Field(
        default="ray-system", description="the webhook's namespace (its chart's default)"
    )
    cert_manager: CertManagerConfig = CertManagerConfig()
