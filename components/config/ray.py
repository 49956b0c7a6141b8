"""Ray: the KubeRay operator, the Ray images and the job mode; the namespaces Ray may not use."""

from __future__ import annotations

from typing import Annotated, Literal

from packaging.version import Version
from pydantic import (
    AfterValidator,
    Field,
    model_validator,
)

from tpuray.components.catalog.cloud_limits import env_token_problem, ray_addon_problem
from tpuray.components.catalog.images import image_ray_version
from tpuray.components.catalog.names import KUBERAY_NAMESPACE
from tpuray.components.catalog.pins import (
    KUBERAY_CHART,
    KUBERAY_FEATURE_GATES,
    MULTI_HOST_INDEXING_DEFAULTS,
    multi_host_indexing_default,
)
from tpuray.components.config.base import (
    NAME_PATTERN,
    ConfigModel,
    field_problem,
)
from tpuray.components.config.tpu_webhook import TpuWebhookConfig
from tpuray.components.config.value_types import CpuQuantity, ImageRef, MemoryQuantity, SemVer

MIN_RAY_TOKEN_AUTH = "2.52.0"
MIN_KUBERAY_AUTH_OPTIONS = "1.6.0"
"""The Ray docs name 1.5.1 in one version of the page and 1.6.0 in another; the later one is required here."""


CERT_MANAGER_NAMESPACE = "cert-manager"
"""Where cert-manager installs itself (https://cert-manager.io/docs/installation/helm/), the issuer Kueue's and
KubeRay's charts can take their webhook certificates from: its CA keys live there."""
SYSTEM_NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    KUBERAY_NAMESPACE,
    CERT_MANAGER_NAMESPACE,
)
SYSTEM_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")
"""Namespaces Kubernetes, GKE (gke-managed-*, gke-gmp-system), Google Cloud Managed Service for Prometheus
(gmp-system, gmp-public), the KubeRay operator and cert-manager own; Ray pods run code on request, so never there.
Kueue's namespace is the stack's own choice: the cross-section rules keep Ray out of it."""


def _own_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith(SYSTEM_NAMESPACE_PREFIXES):
        raise ValueError(
            f"{value!r} is a system namespace (Kubernetes, GKE, GMP, the KubeRay operator or cert-manager own it); "
            "give Ray a "
            "namespace of its own, e.g. 'ray'"
        )
    return value


DEFAULT_JOB_TTL_SECONDS = 60
"""How long KubeRay keeps an ephemeral RayJob's cluster (and its paid slices) after the job finishes: KubeRay
deletes the RayCluster and the submitter ``ttlSecondsAfterFinished`` seconds after the Ray job ends, when
``shutdownAfterJobFinishes`` is true (https://docs.ray.io/en/latest/cluster/kubernetes/getting-started/
rayjob-quick-start.html, "ttlSecondsAfterFinished"). A minute, not 0: time for the submitter to exit and for its
and the head's last logs to be read (with 0 the submitter could race the deletion: kuberay PR #1919)."""


class RayConfig(ConfigModel):
    """KubeRay and the Ray images."""

    version: SemVer = "2.60.0"
    image: ImageRef = Field(
        default="rayproject/ray:2.60.0-py311", description="head image (a tag, or @sha256:<digest>)"
    )
    worker_image: ImageRef | None = Field(default=None, description="TPU worker image (workloads/Dockerfile)")
    namespace: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63), AfterValidator(_own_namespace)] = "ray"
    operator: Literal["addon", "helm"] = Field(
        default="helm",
        description="helm: tpuray installs KubeRay from its Helm chart (helmChartVersion), so the operator is known "
        "to take authOptions and authenticates its RayJob status calls; addon (the GKE Ray add-on) is refused: GKE "
        "does not publish its KubeRay version, and the stack's RayJob fails or the cluster runs open on it",
    )
    auth_options: bool | None = Field(
        default=None,
        description="token auth through KubeRay's authOptions (KubeRay >= 1.6), on by default; false is refused: "
        "with the token in env variables only, KubeRay's RayJob status calls get 401 and the job ends Failed",
    )
    helm_chart_version: SemVer = Field(default=KUBERAY_CHART, description="kuberay-operator Helm chart version")
    tpu_webhook: TpuWebhookConfig = TpuWebhookConfig()
    operator_namespace: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)] | None = Field(
        default=None,
        description="namespace of in-cluster KubeRay operator pods allowed to call the head's job API (RayJob "
        f"status); default {KUBERAY_NAMESPACE}, where the Helm chart is installed",
    )
    head_cpu: CpuQuantity = "4"
    head_memory: MemoryQuantity = "16Gi"
    worker_cpu: CpuQuantity = "8"
    worker_memory: MemoryQuantity = "64Gi"
    job_mode: Literal["shared", "ephemeral"] = Field(
        default="shared",
        description="shared: the training RayJob runs on the long-lived RayCluster; ephemeral: the RayJob brings its "
        "own cluster and Kueue admits it whole",
    )
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=86400)] | None = Field(
        default=None,
        description=f"ephemeral jobMode: seconds KubeRay keeps the job's cluster (its slices) after the job ends; "
        f"default {DEFAULT_JOB_TTL_SECONDS}",
    )

    @model_validator(mode="after")
    def _ttl_needs_an_own_cluster(self) -> RayConfig:
        if self.ttl_seconds_after_finished is not None and self.job_mode != "ephemeral":
            raise field_problem(
                "ttlSecondsAfterFinished",
                "applies only to ray.jobMode: ephemeral (a shared-mode job runs on the long-lived cluster, "
                "which it never deletes); remove it or set jobMode: ephemeral",
            )
        return self

    @property
    def job_ttl_seconds(self) -> int:
        """``ttlSecondsAfterFinished`` of an ephemeral RayJob."""
        t = self.ttl_seconds_after_finished
        return DEFAULT_JOB_TTL_SECONDS if t is None else t

    @model_validator(mode="after")
    def _token_auth_needs(self) -> RayConfig:
        # Every stack renders a training RayJob (stack_plan), whose status KubeRay reads from the dashboard with
        # the token only through authOptions: cloud_limits says why the add-on and env-only tokens are refused.
        if problem := ray_addon_problem(self.operator):
            raise field_problem("operator", problem)
        if problem := env_token_problem(auth_options=self.uses_auth_options):
            raise field_problem("authOptions", problem)
        # Older versions ignore the setting instead of failing: the cluster would run without authentication.
        if Version(self.version) < Version(MIN_RAY_TOKEN_AUTH):
            raise field_problem(
                "version",
                f"{self.version} has no token authentication (Ray >= {MIN_RAY_TOKEN_AUTH}: "
                "https://docs.ray.io/en/latest/ray-security/token-auth.html)",
            )
        # The image, not rayVersion, decides whether token auth runs: a tag naming another Ray (an older one runs
        # with auth silently off) is refused; a digest-pinned image is taken at ray.version's word.
        for field, image in (("image", self.image), ("workerImage", self.worker_image)):
            tagged = image_ray_version(image) if image is not None else None
            if tagged is not None and tagged != self.version:
                raise field_problem(
                    field,
                    f"{image} runs Ray {tagged} but ray.version is {self.version}: use an image tagged "
                    f"{self.version} (Ray >= {MIN_RAY_TOKEN_AUTH} for token auth), or pin it by digest",
                )
        if self.operator_namespace in ("default", self.namespace):
            raise field_problem(
                "operatorNamespace",
                f"{self.operator_namespace!r} would let every pod there call the head's job API: name the "
                "KubeRay operator's own namespace (e.g. kuberay-system)",
            )
        if Version(self.helm_chart_version) < Version(MIN_KUBERAY_AUTH_OPTIONS):
            raise field_problem(
                "helmChartVersion",
                f"KubeRay {self.helm_chart_version} has no authOptions (needs >= {MIN_KUBERAY_AUTH_OPTIONS}); its "
                "CRD would drop the field and leave the cluster unauthenticated: use chart "
                f"{MIN_KUBERAY_AUTH_OPTIONS} or later",
            )
        return self

    @model_validator(mode="after")
    def _operator_takes_the_gates(self) -> RayConfig:
        # tpuray sets KubeRay feature gates (catalog/pins.py); a release whose gates are not verified there could
        # have dropped or locked one, and an operator given a gate it refuses exits at start
        # (ray-operator/main.go: "Unable to set flag gates for known features").
        if multi_host_indexing_default(self.helm_chart_version) is None:
            gates = ", ".join(f"{g.name}={str(g.enabled).lower()}" for g in KUBERAY_FEATURE_GATES)
            raise field_problem(
                "helmChartVersion",
                f"tpuray sets the KubeRay operator's feature gates {gates}, verified for KubeRay "
                f"{', '.join(MULTI_HOST_INDEXING_DEFAULTS)} (ray-operator/pkg/features/features.go), not "
                f"{self.helm_chart_version}: use a chart of those releases, or verify the gates of this one and add it "
                "to tpuray.components.catalog.pins",
            )
        return self

    @property
    def job_api_namespace(self) -> str:
        """The operator namespace the NetworkPolicy lets reach the head's job API."""
        return self.operator_namespace or KUBERAY_NAMESPACE

    @property
    def uses_auth_options(self) -> bool:
        """Token auth through KubeRay's ``authOptions`` (the validators refuse the stack without it)."""
        return self.auth_options is not False
