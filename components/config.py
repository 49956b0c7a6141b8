"""The typed configuration of one tpuray environment (a Pulumi stack).

Pure pydantic; imports no Pulumi. Two loaders feed the same model:

- :func:`load_stack_file` reads a ``Pulumi.<env>.yaml`` directly (the project's CLI, tests, the local run);
- ``tpuray.components.stack_config.from_pulumi_config`` reads the stack's ``pulumi.Config`` in the program.

Keys are camelCase in YAML (Pulumi's convention) and snake_case in Python. A bad value anywhere raises one
:class:`ConfigError` that lists every problem with its path, e.g. ``slicePools[1].topology: ...``.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import typing
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from tpuray.components.cloud_limits import (
    addon_auth_options_problem,
    exclusion_span_problem,
    kueue_chart_problem,
    system_machine_type_problem,
)
from tpuray.components.config_types import (
    MAX_PUBLIC_AUTHORIZED_ADDRESSES,
    MIN_MAINTENANCE_HOURS,
    REGION,
    BucketLocation,
    BucketName,
    Cidr,
    CpuQuantity,
    GceName,
    GkeVersion,
    ImageRef,
    MachineType,
    MemoryQuantity,
    MountPath,
    ProjectId,
    RangeName,
    Rrule,
    SemVer,
    Zone,
    bucket_name_problem,
    derived_bucket_name,
    gke_version_key,
    image_ray_version,
    maintenance_availability,
    prefix_problem,
    private_range_problem,
    public_addresses,
    service_account_id,
)
from tpuray.components.names import KUBERAY_NAMESPACE, SYSTEM_POOL
from tpuray.components.stack_yaml import YamlError, read_yaml_file
from tpuray.components.topology import FLEX_START_MIN_GKE_VERSION, GENERATIONS, TopologyError, TpuSlice, generation
from tpuray.components.tpu_locations import location_problems

__all__ = [
    "NAMESPACE",
    "PRODUCTION_STACKS",
    "RAY_AUTH_TOKEN_KEY",
    "SECRET_KEYS",
    "SYSTEM_NAMESPACES",
    "Autoscaling",
    "Capacity",
    "CheckpointConfig",
    "ClusterConfig",
    "ConfigError",
    "CostConfig",
    "FlexStart",
    "IdleAlert",
    "KueueConfig",
    "MaintenanceConfig",
    "MaintenanceExclusion",
    "MaintenanceWindow",
    "ModelConfig",
    "MonitoringConfig",
    "NetworkConfig",
    "OnDemand",
    "Queued",
    "RayConfig",
    "Reservation",
    "SlicePoolConfig",
    "Spot",
    "StackConfig",
    "SuppliedRateConfig",
    "WorkloadConfig",
    "capacity_rules",
    "control_plane_rules",
    "gke_version_key",
    "is_production_stack",
    "load_stack_file",
    "monitoring_rules",
    "parse_stack_config",
    "problems",
    "required_gke_version",
    "slice_shape",
    "stack_of_file",
    "stack_rules",
]

NAMESPACE = "tpuray"
"""The Pulumi config namespace (the project name): keys are ``tpuray:<key>``."""

RAY_AUTH_TOKEN_KEY = "rayAuthToken"
"""Optional ``tpuray:rayAuthToken`` (set with ``pulumi config set --secret``): the Ray token to use instead of a
generated one. Read only with ``Config.get_secret`` by the program."""
SECRET_KEYS = frozenset({RAY_AUTH_TOKEN_KEY})
"""Secret-bearing config keys: never part of :class:`StackConfig` (whose values are plain and may be printed),
never read with ``Config.get``."""


class ConfigError(ValueError):
    """Every problem of a stack configuration, each as ``(path, message)``."""

    MAX_SHOWN = 40
    """Problems printed at most; the rest are counted (a generated file can have thousands)."""
    MAX_LINE = 400

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(problems)} problem(s){where}:"]
        for path, message in problems[: self.MAX_SHOWN]:
            line = f"  {path}: {message}"
            lines.append(line if len(line) <= self.MAX_LINE else line[: self.MAX_LINE - 3] + "...")
        if len(problems) > self.MAX_SHOWN:
            lines.append(f"  ... and {len(problems) - self.MAX_SHOWN} more")
        super().__init__("\n".join(lines))


class _Model(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown keys are errors; values are immutable.

    Strict types: Pulumi's project config declares each key's type, so ``deletionProtection: 0`` or ``steps: true``
    is an error here too rather than a silent conversion.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True, strict=True
    )


_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(value: object) -> int:
    """A duration as seconds: an int, or a string like ``"3600s"``, ``"90m"``, ``"24h"``, ``"7d"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '24h', '90m' or '3600s', got {value!r}")
    if isinstance(value, int):
        return value
    m = _DURATION.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"expected a duration like '24h', '90m' or '3600s', got {value!r}")
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]


# ---- capacity -----------------------------------------------------------------------------------------
class OnDemand(_Model):
    """Standard on-demand VMs."""

    type: Literal["on-demand"] = "on-demand"


class Spot(_Model):
    """Spot VMs: cheaper, preemptible at any time."""

    type: Literal["spot"]


class Reservation(_Model):
    """Consume a specific reservation; ``project`` names the owner of a shared reservation.

    https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations : the reservation affinity value is
    the reservation's name, or ``projects/<project>/reservations/<name>`` for a shared one.
    """

    type: Literal["reservation"]
    name: GceName
    project: ProjectId | None = None

    @property
    def reservation_value(self) -> str:
        """The reservation affinity value GKE expects: the name, or ``projects/<p>/reservations/<name>``."""
        return f"projects/{self.project}/reservations/{self.name}" if self.project else self.name


class FlexStart(_Model):
    """Flex-start (DWS flex): VMs for at most ``maxRunDuration``, created on demand by the autoscaler."""

    type: Literal["flex-start"]
    max_run_duration: Annotated[int, Field(gt=0, le=7 * 86400, description="seconds, or '24h', '7d'")]

    _parse = field_validator("max_run_duration", mode="before")(lambda v: _seconds(v))


class Queued(_Model):
    """Flex-start with queued provisioning (DWS): the whole slice is granted at once through a ProvisioningRequest.

    ``maxRunDuration`` belongs to the ProvisioningRequest (``maxRunDurationSeconds``), not to the node pool
    (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest).
    """

    type: Literal["queued"]
    max_run_duration: Annotated[int | None, Field(gt=0, le=7 * 86400)] = None

    @field_validator("max_run_duration", mode="before")
    @classmethod
    def _parse(cls, v: object) -> int | None:
        return None if v is None else _seconds(v)


Capacity = Annotated[OnDemand | Spot | Reservation | FlexStart | Queued, Field(discriminator="type")]
CAPACITY_TYPES = ("on-demand", "spot", "reservation", "flex-start", "queued")


# ---- slice pools --------------------------------------------------------------------------------------
class Autoscaling(_Model):
    """Autoscale between ``minSlices`` and the pool's ``slices``. A multi-host slice is 0 or whole."""

    enabled: bool = True
    min_slices: Annotated[int, Field(ge=0)] = 0


class SlicePoolConfig(_Model):
    """One kind of TPU slice: ``slices`` slices of ``generation``/``topology`` on one capacity type."""

    name: Annotated[str, Field(pattern=_NAME, max_length=37, description="node pool name (prefix)")]
    generation: str
    topology: str
    machine_type: str | None = None
    slices: Annotated[int, Field(ge=1, le=64)] = 1
    capacity: Capacity = OnDemand()
    autoscaling: Autoscaling = Autoscaling()
    zone: Zone | None = Field(default=None, description="zone of this pool; defaults to the stack's zone")
    auto_upgrade: bool = Field(default=True, description="GKE node auto-upgrade (off needs releaseChannel UNSPECIFIED)")

    @field_validator("generation")
    @classmethod
    def _known_generation(cls, v: str) -> str:
        try:
            return generation(v).name
        except TopologyError as e:
            raise ValueError(str(e).removeprefix("generation: ")) from None

    @model_validator(mode="after")
    def _rules(self) -> SlicePoolConfig:
        try:
            TpuSlice.parse(self.generation, self.topology, self.machine_type)
        except TopologyError as e:
            raise ValueError(_field_msg(to_camel(e.field), str(e).split(": ", 1)[1])) from None
        auto, cap = self.autoscaling, self.capacity
        if auto.min_slices > self.slices:
            raise ValueError(_field_msg("autoscaling.minSlices", f"{auto.min_slices} exceeds slices={self.slices}"))
        if isinstance(cap, Queued) and not (auto.enabled and auto.min_slices == 0):
            raise ValueError(
                _field_msg(
                    "autoscaling",
                    "queued provisioning needs autoscaling enabled with minSlices 0 (GKE creates the "
                    "nodes when a ProvisioningRequest is granted); set autoscaling: {enabled: true, minSlices: 0}",
                )
            )
        if isinstance(cap, FlexStart) and not auto.enabled:
            raise ValueError(
                _field_msg("autoscaling", "flex-start pools have no static node count: set autoscaling.enabled: true")
            )
        gen = generation(self.generation)
        if isinstance(cap, FlexStart | Queued) and not gen.flex_start:
            # https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start : "TPU v3 and v4 are not supported."
            served = ", ".join(g.name for g in GENERATIONS if g.flex_start)
            raise ValueError(
                _field_msg("capacity.type", f"flex-start capacity does not serve TPU {gen.name}; it serves {served}")
            )
        return self

    @property
    def tpu_slice(self) -> TpuSlice:
        """The slice shape every resource of this pool is derived from."""
        return TpuSlice.parse(self.generation, self.topology, self.machine_type)

    @property
    def min_slices(self) -> int:
        """Fewest slices kept (``slices`` when autoscaling is off)."""
        return self.autoscaling.min_slices if self.autoscaling.enabled else self.slices

    @property
    def node_pool_names(self) -> list[str]:
        """The GKE node pools of this pool: one per slice (``<pool>-<i>``) when multi-host, else ``<pool>``."""
        return [f"{self.name}-{i}" for i in range(self.slices)] if self.tpu_slice.multi_host else [self.name]

    @property
    def min_gke_version(self) -> str:
        """Lowest GKE version that serves this pool: its slice, and flex-start's own minimum for TPUs."""
        need = [self.tpu_slice.min_gke_version]
        if isinstance(self.capacity, FlexStart | Queued):
            need.append(FLEX_START_MIN_GKE_VERSION)
        return max(need, key=gke_version_key)


# ---- cluster, network, Ray, checkpoints, workload -----------------------------------------------------
def _not_everyone(value: str) -> str:
    if ipaddress.ip_network(value).prefixlen == 0:
        raise ValueError(
            f"{value} opens the control plane to every address; list your networks, or set "
            "cluster.controlPlaneEndpoint: private or dns (GKE hardening guide, CIS GKE 5.6.3)"
        )
    return value


class AuthorizedNetwork(_Model):
    cidr: Annotated[Cidr, AfterValidator(_not_everyone)]
    name: Annotated[str, Field(max_length=100)] = ""


# https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks : "Public clusters can have up to 50
# authorized network CIDR ranges; private clusters can have up to 100."
MAX_AUTHORIZED_NETWORKS = {True: 100, False: 50}


ReleaseChannel = Literal["RAPID", "REGULAR", "STABLE", "EXTENDED", "UNSPECIFIED"]
"""``UNSPECIFIED``: not enrolled in a release channel, the only way to turn a pool's auto-upgrade off
(https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels)."""
ControlPlaneEndpoint = Literal["public", "private", "dns"]

PRODUCTION_STACKS = ("prod", "production")
"""Stack names (or prefixes before ``-``) held to the production rules, here and in the policy pack."""


def is_production_stack(stack: str | None, production_stacks: Iterable[str] = PRODUCTION_STACKS) -> bool:
    s = (stack or "").lower()
    return any(s == p or s.startswith(p + "-") for p in production_stacks)


def control_plane_rules(cluster: ClusterConfig, stack: str | None) -> list[str]:
    """A production control plane is private, DNS-only, or public to a non-empty list of networks.

    GKE hardening guide (https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster) and CIS GKE
    5.6.3/5.6.4; the policy rule ``gke-control-plane-not-public`` checks the same on the declared cluster.
    """
    if not is_production_stack(stack) or cluster.control_plane_endpoint != "public":
        return []
    if cluster.master_authorized_networks:
        return []
    return [
        _field_msg(
            "cluster.masterAuthorizedNetworks",
            f"[gke-control-plane-not-public] production stack {stack!r} has a public control plane open to every "
            "address: list the networks allowed to reach it (never 0.0.0.0/0), or set "
            "cluster.controlPlaneEndpoint: private or dns",
        )
    ]


class ClusterConfig(_Model):
    """The GKE cluster."""

    # GKE cluster names: a lowercase letter, then up to 39 lowercase letters, digits or '-', not ending with '-'.
    name: Annotated[str, Field(pattern=_NAME, max_length=40)] = "tpuray"
    regional: bool = Field(default=False, description="regional control plane (else zonal, in `zone`)")
    release_channel: ReleaseChannel = "REGULAR"
    min_master_version: GkeVersion | None = Field(default=None, description="defaults to what the TPU pools need")
    private_nodes: bool = True
    master_authorized_networks: list[AuthorizedNetwork] = []
    control_plane_endpoint: ControlPlaneEndpoint = Field(
        default="public",
        description="public (reached from masterAuthorizedNetworks only), private (internal IP only) or dns "
        "(the DNS-based endpoint, IAM-checked, IP endpoints off)",
    )
    deletion_protection: bool = True
    system_machine_type: MachineType = "e2-standard-8"
    system_nodes: Annotated[int, Field(ge=1, le=10)] = 1

    @field_validator("system_machine_type")
    @classmethod
    def _cpu_machine(cls, v: str) -> str:
        if any(v in g.machine_types for g in GENERATIONS):
            raise ValueError(f"{v} is a TPU machine type; the system pool runs the Ray head on CPU, e.g. e2-standard-8")
        if problem := system_machine_type_problem(v):  # issue 20: a known CPU machine series (cloud_limits cites it)
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _authorized_networks(self) -> ClusterConfig:
        nets, limit = self.master_authorized_networks, MAX_AUTHORIZED_NETWORKS[self.private_nodes]
        if len(nets) > limit:
            kind = "private" if self.private_nodes else "public"
            raise ValueError(
                _field_msg("masterAuthorizedNetworks", f"{len(nets)} ranges; a {kind} cluster takes at most {limit}")
            )
        cidrs = [n.cidr for n in nets]
        for i, cidr in enumerate(cidrs):
            if cidr in cidrs[:i]:
                raise ValueError(_field_msg(f"masterAuthorizedNetworks[{i}].cidr", f"{cidr} is listed twice"))
        # Issue 20: the union is judged, not each literal (0.0.0.0/1 + 128.0.0.0/1 is the whole internet).
        if public_addresses(cidrs) > MAX_PUBLIC_AUTHORIZED_ADDRESSES:
            raise ValueError(
                _field_msg(
                    "masterAuthorizedNetworks",
                    f"together these ranges cover {public_addresses(cidrs):,} public addresses, more than a /8: "
                    "list the networks that must reach the control plane (e.g. an office's /24), or set "
                    "cluster.controlPlaneEndpoint: private or dns",
                )
            )
        return self

    @model_validator(mode="after")
    def _endpoint(self) -> ClusterConfig:
        if self.control_plane_endpoint == "private" and not self.private_nodes:
            raise ValueError(
                _field_msg("controlPlaneEndpoint", "a private endpoint needs privateNodes: true (GKE private clusters)")
            )
        return self

    @property
    def node_service_account_id(self) -> str:
        """The nodes' Google service account id (6-30 characters, derived from the cluster name)."""
        return service_account_id(self.name, "nodes")

    @property
    def ray_service_account_id(self) -> str:
        """The Ray pods' Google service account id (6-30 characters, derived from the cluster name)."""
        return service_account_id(self.name, "ray")


class NetworkConfig(_Model):
    """The VPC: a new one (create: true) or an existing one by name, with its secondary range names."""

    create: bool = True
    name: GceName | None = Field(default=None, description="network name (required when create is false)")
    subnetwork: GceName | None = None
    subnet_cidr: Cidr = "10.0.0.0/20"
    pods_cidr: Cidr = "10.16.0.0/14"
    services_cidr: Cidr = "10.20.0.0/20"
    pods_range_name: RangeName = "pods"
    services_range_name: RangeName = "services"

    @model_validator(mode="after")
    def _rules(self) -> NetworkConfig:
        if not self.create and not (self.name and self.subnetwork):
            raise ValueError(_field_msg("name", "an existing network needs both name and subnetwork"))
        if self.pods_range_name == self.services_range_name:
            raise ValueError(_field_msg("servicesRangeName", f"{self.services_range_name!r} is also the pods range"))
        # https://cloud.google.com/vpc/docs/subnets#valid-ranges (smallest subnet /29) and
        # https://cloud.google.com/kubernetes-engine/docs/concepts/alias-ips (Pod range /9-/24, Service range /16-/27)
        limits = {
            "subnet_cidr": (8, 29, "subnet range", "https://cloud.google.com/vpc/docs/subnets"),
            "pods_cidr": (9, 24, "Pod range", "https://cloud.google.com/kubernetes-engine/docs/concepts/alias-ips"),
            "services_cidr": (
                16,
                27,
                "Service range",
                "https://cloud.google.com/kubernetes-engine/docs/concepts/alias-ips",
            ),
        }
        for key, (largest, smallest, what, source) in limits.items():
            cidr = getattr(self, key)
            problem = private_range_problem(cidr) or prefix_problem(cidr, largest, smallest, what, source)
            if problem:
                raise ValueError(_field_msg(to_camel(key), problem))
        nets = {k: ipaddress.ip_network(getattr(self, k)) for k in ("subnet_cidr", "pods_cidr", "services_cidr")}
        keys = list(nets)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                if nets[a].overlaps(nets[b]):
                    raise ValueError(_field_msg(to_camel(b), f"{nets[b]} overlaps {to_camel(a)} {nets[a]}"))
        return self


MIN_RAY_TOKEN_AUTH = "2.52.0"
MIN_KUBERAY_AUTH_OPTIONS = "1.6.0"
"""The Ray docs name 1.5.1 in one version of the page and 1.6.0 in another; the later one is required here."""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", KUBERAY_NAMESPACE)
SYSTEM_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")
"""Namespaces Kubernetes, GKE and the KubeRay operator own; Ray pods run code on request, so never there."""


def _own_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith(SYSTEM_NAMESPACE_PREFIXES):
        raise ValueError(
            f"{value!r} is a system namespace (Kubernetes, GKE or the KubeRay operator own it); give Ray a "
            "namespace of its own, e.g. 'ray'"
        )
    return value


DEFAULT_JOB_TTL_SECONDS = 60
"""How long KubeRay keeps an ephemeral RayJob's cluster (and its paid slices) after the job finishes: KubeRay
deletes the RayCluster and the submitter ``ttlSecondsAfterFinished`` seconds after the Ray job ends, when
``shutdownAfterJobFinishes`` is true (https://docs.ray.io/en/latest/cluster/kubernetes/getting-started/
rayjob-quick-start.html, "ttlSecondsAfterFinished"). A minute, not 0: time for the submitter to exit and for its
and the head's last logs to be read (with 0 the submitter could race the deletion: kuberay PR #1919)."""


class RayConfig(_Model):
    """KubeRay and the Ray images."""

    version: SemVer = "2.60.0"
    image: ImageRef = Field(
        default="rayproject/ray:2.60.0-py311", description="head image (a tag, or @sha256:<digest>)"
    )
    worker_image: ImageRef | None = Field(default=None, description="TPU worker image (workloads/Dockerfile)")
    namespace: Annotated[str, Field(pattern=_NAME, max_length=63), AfterValidator(_own_namespace)] = "ray"
    operator: Literal["addon", "helm"] = Field(default="addon", description="GKE Ray add-on or the Helm chart")
    auth_options: bool | None = Field(
        default=None,
        description="token auth through KubeRay's authOptions (KubeRay >= 1.6); default: on with the Helm operator, "
        "off with the GKE add-on (its KubeRay version is not published), which gets RAY_AUTH_MODE=token env instead",
    )
    helm_chart_version: SemVer = "1.7.0"
    operator_namespace: Annotated[str, Field(pattern=_NAME, max_length=63)] | None = Field(
        default=None,
        description="namespace of in-cluster KubeRay operator pods allowed to call the head's job API (RayJob "
        "status); default kuberay-system with helm, none with the add-on (GKE hosts it and does not document where "
        "it connects from)",
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
            raise ValueError(
                _field_msg(
                    "ttlSecondsAfterFinished",
                    "applies only to ray.jobMode: ephemeral (a shared-mode job runs on the long-lived cluster, "
                    "which it never deletes); remove it or set jobMode: ephemeral",
                )
            )
        return self

    @property
    def job_ttl_seconds(self) -> int:
        """``ttlSecondsAfterFinished`` of an ephemeral RayJob."""
        t = self.ttl_seconds_after_finished
        return DEFAULT_JOB_TTL_SECONDS if t is None else t

    @model_validator(mode="after")
    def _token_auth_needs(self) -> RayConfig:
        if problem := addon_auth_options_problem(self.operator, self.auth_options):  # issue 20 item 1 (cloud_limits)
            raise ValueError(_field_msg("authOptions", problem))
        # Older versions ignore the setting instead of failing: the cluster would run without authentication.
        if _version_key(self.version) < _version_key(MIN_RAY_TOKEN_AUTH):
            raise ValueError(
                _field_msg(
                    "version",
                    f"{self.version} has no token authentication (Ray >= {MIN_RAY_TOKEN_AUTH}: "
                    "https://docs.ray.io/en/latest/ray-security/token-auth.html)",
                )
            )
        # The image, not rayVersion, decides whether token auth runs: a tag naming another Ray (an older one runs
        # with auth silently off) is refused; a digest-pinned image is taken at ray.version's word.
        for field, image in (("image", self.image), ("workerImage", self.worker_image)):
            tagged = image_ray_version(image) if image is not None else None
            if tagged is not None and tagged != self.version:
                raise ValueError(
                    _field_msg(
                        field,
                        f"{image} runs Ray {tagged} but ray.version is {self.version}: use an image tagged "
                        f"{self.version} (Ray >= {MIN_RAY_TOKEN_AUTH} for token auth), or pin it by digest",
                    )
                )
        if self.operator_namespace in ("default", self.namespace):
            raise ValueError(
                _field_msg(
                    "operatorNamespace",
                    f"{self.operator_namespace!r} would let every pod there call the head's job API: name the "
                    "KubeRay operator's own namespace (e.g. kuberay-system)",
                )
            )
        old_chart = _version_key(self.helm_chart_version) < _version_key(MIN_KUBERAY_AUTH_OPTIONS)
        if self.operator == "helm" and self.uses_auth_options and old_chart:
            raise ValueError(
                _field_msg(
                    "helmChartVersion",
                    f"KubeRay {self.helm_chart_version} has no authOptions (needs >= {MIN_KUBERAY_AUTH_OPTIONS}); its "
                    "CRD would drop the field and leave the cluster unauthenticated: upgrade, or set "
                    "ray.authOptions: false",
                )
            )
        return self

    @property
    def job_api_namespace(self) -> str | None:
        """The operator namespace the NetworkPolicy lets reach the head's job API."""
        if self.operator_namespace is not None:
            return self.operator_namespace
        return KUBERAY_NAMESPACE if self.operator == "helm" else None

    @property
    def uses_auth_options(self) -> bool:
        """Token auth through KubeRay's ``authOptions`` (else the variables go into every container)."""
        return self.auth_options if self.auth_options is not None else self.operator == "helm"


class CheckpointConfig(_Model):
    """The checkpoint bucket, mounted into every Ray pod through the GCS FUSE CSI driver."""

    bucket: BucketName | None = Field(default=None, description="bucket name; defaults to <project>-<cluster>-ckpt")
    location: BucketLocation | None = Field(default=None, description="bucket location; defaults to the region")
    mount_path: MountPath = "/checkpoints"
    retention_days: Annotated[int, Field(ge=0, le=36500, description="0 keeps checkpoints forever")] = 30
    soft_delete_days: Annotated[int, Field(ge=7, le=90)] = Field(
        default=7, description="days a deleted or overwritten checkpoint stays restorable (GCS soft delete, 7-90)"
    )
    versioning: bool = Field(default=False, description="also keep noncurrent object versions (GCS versioning)")


class ModelConfig(_Model):
    """The GPT-style decoder trained by the entrypoint."""

    # Bounds: values that deploy but cannot run (a model that cannot fit any slice's HBM) stop here.
    vocab_size: Annotated[int, Field(ge=2, le=4_000_000)] = 256
    layers: Annotated[int, Field(ge=1, le=1_000)] = 2
    d_model: Annotated[int, Field(ge=8, le=65_536)] = 64
    heads: Annotated[int, Field(ge=1, le=1_024)] = 4

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(_field_msg("heads", f"{self.heads} does not divide dModel={self.d_model}"))
        return self


class WorkloadConfig(_Model):
    """Defaults of the training entrypoint (``python -m tpuray.workloads.train``)."""

    backend: Literal["xla", "torch_tpu"] = "xla"
    slice_pool: str | None = Field(default=None, description="pool the job runs on; defaults to the first")
    steps: Annotated[int, Field(ge=1, le=100_000_000)] = 60
    batch_size_per_chip: Annotated[int, Field(ge=1, le=65_536)] = 8
    seq_len: Annotated[int, Field(ge=2, le=1_048_576)] = 64
    learning_rate: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 3e-3
    checkpoint_every: Annotated[int, Field(ge=1, le=100_000_000)] = 20
    dataset: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^\S(.*\S)?$")] | None = Field(
        default=None, description="tokenised text file; synthetic tokens if unset"
    )
    model: ModelConfig = ModelConfig()


class SuppliedRateConfig(_Model):
    """A price the stack pays that no public table gives (a reservation's committed use contract, a flex-start
    rate) or that differs from it (a negotiated discount): USD per chip-hour of one generation on one capacity
    type, with where it comes from."""

    generation: str
    capacity: Literal["on-demand", "spot", "reservation", "flex-start", "queued"]
    usd_per_chip_hour: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]
    source: Annotated[str, Field(min_length=1, max_length=200, description="where the rate comes from")]

    _gen = field_validator("generation")(lambda v: SlicePoolConfig._known_generation(v))


class CostConfig(_Model):
    """What the stack may cost: a budget in USD per hour (checked at the autoscaling maximum) and rates the
    price table cannot give (``tpuray.components.pricing``)."""

    budget_usd_per_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="the most the stack's TPU pools may cost per hour at their maximum size (USD)"
    )
    rates: Annotated[list[SuppliedRateConfig], Field(max_length=100)] = []

    @model_validator(mode="after")
    def _unique(self) -> CostConfig:
        keys = [(r.generation, r.capacity) for r in self.rates]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                raise ValueError(_field_msg(f"rates[{i}]", f"a second rate for {key[0]} {key[1]}"))
        return self


# ---- Kueue and maintenance ----------------------------------------------------------------------------
def _kueue_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith(SYSTEM_NAMESPACE_PREFIXES):
        raise ValueError(f"{value!r} is a system namespace; install Kueue in its own, e.g. 'kueue-system'")
    return value


class KueueConfig(_Model):
    """Kueue: TPU quota from the slice pools, and admission (required by queued pools and ephemeral jobs)."""

    enabled: bool = False
    chart_version: SemVer = Field(default="0.19.2", description="Kueue Helm chart version")

    namespace: Annotated[str, Field(pattern=_NAME, max_length=63), AfterValidator(_kueue_namespace)] = "kueue-system"
    local_queue: Annotated[str, Field(pattern=_NAME, max_length=63, description="LocalQueue in the Ray namespace")] = (
        "tpu"
    )
    priority: Literal["low", "normal", "high"] = Field(
        default="normal", description="WorkloadPriorityClass of the training job"
    )

    @field_validator("chart_version")
    @classmethod
    def _serves_rendered_api(cls, v: str) -> str:
        if problem := kueue_chart_problem(v):  # issue 20: the chart serves the API tpuray renders (cloud_limits)
            raise ValueError(problem)
        return v


# ---- monitoring ---------------------------------------------------------------------------------------
IdleMetric = Literal["dutyCycle", "tensorcoreUtilization"]
"""The per-chip TPU figures the idle-slice alert may watch (each is a dashboard panel)."""
IDLE_ALERT_METRICS: tuple[str, ...] = typing.get_args(IdleMetric)
# https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.notificationChannels : the resource name form.
_NOTIFICATION_CHANNEL = r"^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/notificationChannels/[0-9]+$"


class IdleAlert(_Model):
    """An alert for a slice that is held but idle: every chip's figure below ``belowPercent`` for ``window``
    while the slice's Ray worker pods run."""

    enabled: bool = True
    window: Annotated[int, Field(gt=0, le=7 * 86400, description="seconds, or '30m', '2h'")] = 1800
    metric: IdleMetric = "dutyCycle"
    below_percent: Annotated[float, Field(gt=0, lt=100)] = 1.0
    exclude_pools: Annotated[list[str], Field(max_length=64)] = []
    """Slice pools the alert does not watch (e.g. a pool kept warm on purpose); the dashboard still shows them."""
    notification_channels: Annotated[
        list[Annotated[str, Field(pattern=_NOTIFICATION_CHANNEL)]], Field(max_length=16)
    ] = []
    """``projects/<project>/notificationChannels/<id>``; none: the incident shows in Cloud Monitoring only."""

    _parse = field_validator("window", mode="before")(lambda v: _seconds(v))


class MonitoringConfig(_Model):
    """A Cloud Monitoring dashboard of the stack (one row per slice pool) and the idle-slice alert."""

    enabled: bool = False
    idle_alert: IdleAlert = IdleAlert()


def slice_shape(s: TpuSlice) -> tuple[str, str]:
    """What a chip's TPU metrics say of its slice: GKE's accelerator label value and the topology (the device
    plugin's ``model`` and ``tpu_topology`` labels). Pools of one shape cannot be told apart by them."""
    return (s.gke_accelerator, s.topology)


def monitoring_rules(
    monitoring: MonitoringConfig, pools: list[tuple[int, SlicePoolConfig]], pool_names: list[str] | None = None
) -> list[str]:
    """Settings that name slice pools name pools of this stack, and an excluded pool can be told from a watched one.

    ``pool_names``: every pool's name, valid or not (default: the names of ``pools``)."""
    found: list[str] = []
    names = list(dict.fromkeys(pool_names if pool_names is not None else [p.name for _, p in pools]))
    excluded = monitoring.idle_alert.exclude_pools
    watched = {slice_shape(p.tpu_slice): p.name for _, p in pools if p.name not in excluded}
    for i, name in enumerate(excluded):
        at = f"monitoring.idleAlert.excludePools[{i}]"
        pool = next((p for _, p in pools if p.name == name), None)
        if pool is None:
            if names and name not in names:
                found.append(_field_msg(at, f"{name!r} is not a slice pool; valid choices: {', '.join(names)}"))
            continue
        other = watched.get(slice_shape(pool.tpu_slice))
        if other is not None:
            found.append(
                _field_msg(
                    at,
                    f"{name!r} has the slice shape of watched pool {other!r} ({pool.tpu_slice.generation} "
                    f"{pool.tpu_slice.topology}); TPU metrics carry the shape, not the pool, so the alert cannot "
                    f"leave one out: exclude both or neither",
                )
            )
    return found


_RFC3339_UTC = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
UtcTime = Annotated[str, Field(pattern=_RFC3339_UTC, description="RFC 3339 UTC time, e.g. 2026-01-03T02:00:00Z")]
# GKE: a window needs >= 4 contiguous hours, an exclusion without a release channel (NO_UPGRADES) lasts <= 30 days
# (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions).
_MIN_WINDOW = timedelta(hours=4)
_MAX_NO_UPGRADES = timedelta(days=30)


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


class MaintenanceWindow(_Model):
    """A recurring window: ``start``/``end`` give the first occurrence, ``recurrence`` is an RFC 5545 RRULE."""

    start: UtcTime
    end: UtcTime
    recurrence: Rrule

    @model_validator(mode="after")
    def _length(self) -> MaintenanceWindow:
        if _utc(self.end) - _utc(self.start) < _MIN_WINDOW:
            raise ValueError(_field_msg("end", "a maintenance window lasts at least 4 hours after start"))
        # GKE refuses a window giving less than 48 h in some 32-day rolling window (stretches >= 4 h count).
        got = maintenance_availability(_utc(self.start), _utc(self.end), self.recurrence)
        if got < timedelta(hours=MIN_MAINTENANCE_HOURS):
            raise ValueError(
                _field_msg(
                    "recurrence",
                    f"gives only {got.total_seconds() / 3600:g} h of maintenance in the worst 32 days; GKE needs at "
                    f"least {MIN_MAINTENANCE_HOURS} h (e.g. 6 h on FREQ=WEEKLY;BYDAY=SA,SU)",
                )
            )
        return self


class MaintenanceExclusion(_Model):
    """A span in which GKE does not upgrade (``scope`` says what it holds back)."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    start: UtcTime
    end: UtcTime
    scope: Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"] = "NO_MINOR_OR_NODE_UPGRADES"

    @model_validator(mode="after")
    def _span(self) -> MaintenanceExclusion:
        span = _utc(self.end) - _utc(self.start)
        if span <= timedelta(0):
            raise ValueError(_field_msg("end", f"{self.end} is not after start {self.start}"))
        if self.scope == "NO_UPGRADES" and span > _MAX_NO_UPGRADES:
            raise ValueError(_field_msg("end", "a NO_UPGRADES exclusion lasts at most 30 days"))
        return self


class MaintenanceConfig(_Model):
    """When GKE may upgrade the cluster and its nodes: a recurring window and exclusions."""

    window: MaintenanceWindow | None = None
    exclusions: Annotated[list[MaintenanceExclusion], Field(max_length=20)] = []

    @model_validator(mode="after")
    def _unique(self) -> MaintenanceConfig:
        names = [e.name for e in self.exclusions]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(_field_msg(f"exclusions[{i}].name", f"duplicate exclusion name {name!r}"))
        return self

    @property
    def declared(self) -> bool:
        """A window or an exclusion is set (GKE then keeps upgrades out of the rest of the time)."""
        return self.window is not None or bool(self.exclusions)


KUEUE_RESERVED_GROUP = "head"
"""Kueue names the head's pod set ``head``; a worker group of that name is rejected (Kueue raycluster webhook)."""


def capacity_rules(
    pools: list[tuple[int, SlicePoolConfig]],
    cluster: ClusterConfig | None,
    ray: RayConfig | None,
    kueue: KueueConfig | None,
    maintenance: MaintenanceConfig | None,
    workload: WorkloadConfig | None,
) -> list[str]:
    """Rules tying capacity types to Kueue, the job mode and maintenance; parts may be None (see stack_rules)."""
    found: list[str] = []
    queued = [(i, p) for i, p in pools if isinstance(p.capacity, Queued)]
    if kueue is not None and not kueue.enabled:
        for i, p in queued:
            found.append(
                _field_msg(
                    f"slicePools[{i}].capacity",
                    f"queued pool {p.name!r} is only reachable through Kueue (its ProvisioningRequest admission "
                    "check is what makes GKE create the nodes): set kueue.enabled: true",
                )
            )
        if ray is not None and ray.job_mode == "ephemeral":
            found.append(
                _field_msg(
                    "kueue.enabled",
                    "ray.jobMode ephemeral submits a suspended RayJob that only Kueue admits: set kueue.enabled: true",
                )
            )
    if ray is not None and ray.job_mode == "shared" and pools:
        target = workload.slice_pool if workload is not None else None
        job_pool = next((p for _, p in pools if target is None or p.name == target), None)
        if job_pool is not None and isinstance(job_pool.capacity, Queued):
            found.append(
                _field_msg(
                    "ray.jobMode",
                    f"the training job runs on queued pool {job_pool.name!r}, which only a Kueue-admitted RayJob "
                    "with its own cluster reaches: set ray.jobMode: ephemeral",
                )
            )
    if kueue is not None and kueue.enabled:
        for i, p in pools:
            if p.name == KUEUE_RESERVED_GROUP:
                found.append(_field_msg(f"slicePools[{i}].name", "'head' is Kueue's name for the Ray head's pod set"))
    if cluster is not None:
        enrolled = cluster.release_channel != "UNSPECIFIED"
        for i, p in pools:
            if not p.auto_upgrade and enrolled:
                found.append(
                    _field_msg(
                        f"slicePools[{i}].autoUpgrade",
                        f"GKE keeps node auto-upgrade on in release channel {cluster.release_channel}: set "
                        "cluster.releaseChannel: UNSPECIFIED, or use maintenance exclusions instead",
                    )
                )
        for j, e in enumerate(maintenance.exclusions if maintenance is not None else []):
            if span := exclusion_span_problem(e.scope, _utc(e.start), _utc(e.end), cluster.release_channel):
                found.append(_field_msg(f"maintenance.exclusions[{j}].end", span))  # issue 20 (cloud_limits)
            if e.scope != "NO_UPGRADES" and not enrolled:
                found.append(
                    _field_msg(
                        f"maintenance.exclusions[{j}].scope",
                        f"{e.scope} needs a release channel; a cluster outside one can only use NO_UPGRADES",
                    )
                )
    return found


# ---- the stack ----------------------------------------------------------------------------------------
def required_gke_version(pools: Iterable[SlicePoolConfig]) -> str:
    """The lowest GKE version that serves every pool (slice, Ray add-on, capacity type); at least one pool."""
    return max((p.min_gke_version for p in pools), key=gke_version_key)


def stack_rules(
    region: str | None,
    zone: str | None,
    cluster: ClusterConfig | None,
    pools: list[tuple[int, SlicePoolConfig]],
    pool_names: list[str],
    workload_pool: str | None,
    network: NetworkConfig | None = None,
    project: str | None = None,
    checkpoints: CheckpointConfig | None = None,
    zone_invalid: bool = False,
) -> list[str]:
    """The rules that span sections of a stack, as :func:`_field_msg` strings.

    Any part may be missing (``None``, or pools left out) when it failed its own validation: the rules that
    need it are skipped, the others still run, so one error lists every problem of the stack.
    """
    found: list[str] = []
    if region is not None and zone is not None and not zone.startswith(region + "-"):
        found.append(_field_msg("zone", f"{zone!r} is not in region {region!r}"))
    # Issue 20: a region or zone without TPUs, a pool in a zone without its generation (tpu_locations cites the page).
    found += [
        _field_msg(f, m)
        for f, m in location_problems(region, zone, [(i, p.name, p.generation, p.zone) for i, p in pools])
    ]
    if cluster is not None and not cluster.regional and zone is None and not zone_invalid:
        found.append(_field_msg("zone", "a zonal cluster (cluster.regional: false) needs a zone"))
    seen: set[str] = set()
    # Every GKE node pool name the stack derives, with the pool that owns it; the system pool is the cluster's.
    node_pools: dict[str, str] = {SYSTEM_POOL: "the system node pool"}
    for i, pool in pools:
        at = f"slicePools[{i}]"
        if pool.name in seen:
            found.append(_field_msg(f"{at}.name", f"duplicate pool name {pool.name!r}"))
        seen.add(pool.name)
        for node_pool in pool.node_pool_names:
            # https://github.com/pulumi/pulumi-gcp/issues/1510 quotes GKE's rule: [a-z](?:[-a-z0-9]{0,38}[a-z0-9])?
            if not _NODE_POOL_NAME.match(node_pool):
                found.append(_field_msg(f"{at}.name", f"node pool name {node_pool!r} is longer than 40 characters"))
            me = f"slicePools[{i}] ({pool.name})"
            owner = node_pools.setdefault(node_pool, me)
            if owner != me and not owner.endswith(f"({pool.name})"):  # same pool name: reported above
                found.append(_field_msg(f"{at}.name", f"node pool name {node_pool!r} is also used by {owner}"))
        if region is not None and pool.zone is not None and not pool.zone.startswith(region + "-"):
            found.append(_field_msg(f"{at}.zone", f"{pool.zone!r} is not in region {region!r}"))
        if cluster is not None and not cluster.regional and zone is not None and pool.zone not in (None, zone):
            found.append(
                _field_msg(
                    f"{at}.zone",
                    f"{pool.zone!r}: the zonal cluster lives in {zone!r} and its node pools too; set "
                    "cluster.regional: true to spread pools over the region's zones",
                )
            )
        if pool.tpu_slice.placement != "none" and (pool.zone or zone) is None and not zone_invalid:
            found.append(
                _field_msg(
                    f"{at}.zone",
                    f"a multi-host {pool.tpu_slice.topology} slice needs compact placement in a single zone: set "
                    "the pool's zone or the stack's zone",
                )
            )
        elif (pool.zone or zone) is None and not zone_invalid:
            # Without node locations a pool spans every zone of a regional cluster, and GKE applies the autoscaling
            # limits per zone: up to three times the slices, in zones that may not have the TPU at all.
            found.append(
                _field_msg(
                    f"{at}.zone",
                    f"TPU {pool.tpu_slice.generation} slices are zonal: set the pool's zone or the stack's zone",
                )
            )
    if pools and cluster is not None and cluster.min_master_version is not None:
        need = required_gke_version(p for _, p in pools)
        if gke_version_key(cluster.min_master_version) < gke_version_key(need):
            found.append(
                _field_msg(
                    "cluster.minMasterVersion",
                    f"{cluster.min_master_version} is older than {need}, which the TPU generations of this stack need",
                )
            )
    if network is not None and network.create and cluster is not None:
        # Each node takes a /24 of the Pod range at GKE's default of 110 Pods per node
        # (https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr).
        # A regional cluster's system pool has systemNodes per zone (three zones in most regions).
        nodes = cluster.system_nodes * (3 if cluster.regional else 1) + sum(
            p.slices * p.tpu_slice.hosts for _, p in pools
        )
        room = ipaddress.ip_network(network.pods_cidr).num_addresses // 256
        if nodes > room:
            found.append(
                _field_msg(
                    "network.podsCidr",
                    f"{network.pods_cidr} holds {room} nodes (a /24 each), but the stack can grow to {nodes} nodes",
                )
            )
    if project is not None and cluster is not None and checkpoints is not None and checkpoints.bucket is None:
        problem = bucket_name_problem(derived_bucket_name(project, cluster.name))
        if problem:
            found.append(_field_msg("checkpoints.bucket", f"the default name does not work ({problem}); set one"))
    if workload_pool is not None and pool_names and workload_pool not in pool_names:
        found.append(
            _field_msg(
                "workload.slicePool",
                f"{workload_pool!r} is not a slice pool; valid choices: {', '.join(dict.fromkeys(pool_names))}",
            )
        )
    return found


def _valid_part(model: type[_Model], value: Any) -> Any:
    """``value`` validated as ``model``, or None if it is not valid on its own."""
    try:
        return model.model_validate(value if value is not None else {}, by_name=False)
    except ValidationError:
        return None


def _stack_of(context: Any) -> str | None:
    stack = context.get("stack") if isinstance(context, Mapping) else None
    return stack if isinstance(stack, str) else None


def _rules_of_valid_parts(values: Mapping[str, Any], stack: str | None = None) -> list[tuple[str, str]]:
    """The cross-section rules run over whatever parts of an invalid stack are valid on their own.

    pydantic skips a model's own after-validator once any field fails, so without this a type error in one
    section would hide a zone or version problem in another until the first was fixed.
    """
    region = values.get("region")
    zone = None if values.get("zone") in ("", None) else values.get("zone")
    raw_pools = values.get("slicePools")
    raw_pools = raw_pools if isinstance(raw_pools, list) else []
    pools = [(i, p) for i, p in enumerate(_valid_part(SlicePoolConfig, raw) for raw in raw_pools) if p is not None]
    names = [str(raw.get("name")) for raw in raw_pools if isinstance(raw, Mapping) and "name" in raw]
    workload = _valid_part(WorkloadConfig, values.get("workload"))
    project = values.get("project")
    zone_ok = zone is None or (isinstance(zone, str) and _valid_part_of(Zone, zone))
    found = stack_rules(
        region if isinstance(region, str) and REGION.match(region) else None,
        zone if zone_ok else None,
        _valid_part(ClusterConfig, values.get("cluster")),
        pools,
        names,
        workload.slice_pool if workload is not None else None,
        _valid_part(NetworkConfig, values.get("network")),
        project if isinstance(project, str) and _valid_part_of(ProjectId, project) else None,
        _valid_part(CheckpointConfig, values.get("checkpoints")),
        zone_invalid=not zone_ok,
    )
    cluster = _valid_part(ClusterConfig, values.get("cluster"))
    if cluster is not None:
        found += control_plane_rules(cluster, stack)
    found += capacity_rules(
        pools,
        _valid_part(ClusterConfig, values.get("cluster")),
        _valid_part(RayConfig, values.get("ray")),
        _valid_part(KueueConfig, values.get("kueue")),
        _valid_part(MaintenanceConfig, values.get("maintenance")),
        workload,
    )
    monitoring = _valid_part(MonitoringConfig, values.get("monitoring"))
    if monitoring is not None:
        found += monitoring_rules(monitoring, pools, names)
    return [(path, text) for path, text in (line.split(_SEP, 1) for line in found)]


def _valid_part_of(annotation: Any, value: Any) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


_NODE_POOL_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")


class StackConfig(_Model):
    """One environment. Keys are ``tpuray:<key>`` in the Pulumi stack file."""

    project: Annotated[ProjectId, Field(description="GCP project id")]
    # https://cloud.google.com/compute/docs/regions-zones : <area>-<location><number>, e.g. us-east5.
    region: Annotated[str, Field(pattern=REGION.pattern, description="GCP region, e.g. us-central2")]
    zone: Zone | None = Field(default=None, description="zone for zonal clusters and TPU pools ('' for none)")
    cluster: ClusterConfig = ClusterConfig()
    network: NetworkConfig = NetworkConfig()
    slice_pools: Annotated[
        list[SlicePoolConfig],
        Field(min_length=1, description="TPU slice pools: name, generation, topology, slices, capacity, autoscaling"),
    ]
    checkpoints: CheckpointConfig = CheckpointConfig()
    ray: RayConfig = RayConfig()
    workload: WorkloadConfig = WorkloadConfig()
    kueue: KueueConfig = KueueConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    cost: CostConfig = CostConfig()

    @field_validator("zone", mode="before")
    @classmethod
    def _empty_zone(cls, v: object) -> object:
        return None if v == "" else v  # Pulumi.yaml cannot declare a null default, so '' means unset

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> StackConfig:
        found = stack_rules(
            self.region,
            self.zone,
            self.cluster,
            list(enumerate(self.slice_pools)),
            [p.name for p in self.slice_pools],
            self.workload.slice_pool,
            self.network,
            self.project,
            self.checkpoints,
        )
        found += control_plane_rules(self.cluster, _stack_of(info.context))
        found += capacity_rules(
            list(enumerate(self.slice_pools)), self.cluster, self.ray, self.kueue, self.maintenance, self.workload
        )
        found += monitoring_rules(self.monitoring, list(enumerate(self.slice_pools)))
        if self.kueue.namespace == self.ray.namespace:
            found.append(
                _field_msg(
                    "kueue.namespace",
                    f"{self.kueue.namespace!r} is Ray's namespace: Kueue's controller and webhook need their own "
                    "(e.g. kueue-system)",
                )
            )
        if found:
            raise ValueError("\n".join(found))
        return self

    @property
    def required_master_version(self) -> str:
        """The lowest GKE version that serves every slice of this stack with the Ray add-on."""
        return required_gke_version(self.slice_pools)

    @property
    def master_version(self) -> str:
        """``cluster.minMasterVersion`` if set, else what the TPU generations need."""
        return self.cluster.min_master_version or self.required_master_version

    @property
    def location(self) -> str:
        """The cluster's location: the region (regional) or the zone (zonal)."""
        return self.region if self.cluster.regional else str(self.zone)

    def pool_zone(self, pool: SlicePoolConfig) -> str | None:
        return pool.zone or self.zone

    @property
    def checkpoint_bucket(self) -> str:
        """``checkpoints.bucket``, else ``<project>-<cluster>-ckpt`` cut to a valid bucket name."""
        return self.checkpoints.bucket or derived_bucket_name(self.project, self.cluster.name)

    def workload_pool(self) -> SlicePoolConfig:
        """The slice pool the training job targets: ``workload.slicePool``, else the first pool."""
        name = self.workload.slice_pool
        return next(p for p in self.slice_pools if name is None or p.name == name)


# ---- error formatting and loaders ---------------------------------------------------------------------
_SEP = " :: "


def _field_msg(field: str, message: str) -> str:
    """A model-level error that names a sub-field; :func:`problems` moves the field into the path."""
    return f"{field}{_SEP}{message}"


def _path(loc: Iterable[int | str]) -> str:
    out, previous = "", None
    for part in loc:
        tag, previous = previous == "capacity" and part in CAPACITY_TYPES, part
        if tag:
            continue  # the discriminated union's tag adds nothing a reader needs
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(root: type[BaseModel], loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The config model that holds the key at ``loc`` (``loc`` without its last part), if one does."""
    model: Any = root
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        if part in CAPACITY_TYPES:  # the discriminated union's tag names the member
            model = {"on-demand": OnDemand, "spot": Spot, "reservation": Reservation, "flex-start": FlexStart,
                     "queued": Queued}[part]  # fmt: skip
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(str(part))
        if field is None:
            return None
        models = [a for a in _flat_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = models[0] if models else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _flat_args(annotation: Any) -> list[Any]:
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    return [leaf for a in args for leaf in _flat_args(a)]


def _unknown_key(loc: tuple[int | str, ...], model: type[BaseModel]) -> str:
    """``unknown key``, with the nearest valid key at that place and the valid keys."""
    holder = _model_at(model, loc[:-1])
    if holder is None:
        return "unknown key"
    valid = [f.alias or n for n, f in holder.model_fields.items()]
    key = str(loc[-1])
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5) or difflib.get_close_matches(
        to_camel(key), valid, n=1, cutoff=0.5
    )
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown key{hint} valid keys here: {', '.join(valid)}"


def problems(err: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """A pydantic error of any config model as ``(path, message)`` pairs, paths in camelCase.

    ``model`` is the model that was validated (default :class:`StackConfig`); it lets an unknown key name the
    nearest valid one.
    """
    root = model or StackConfig
    problems: list[tuple[str, str]] = []
    for e in err.errors(include_url=False, include_input=False):
        base = _path(e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = _unknown_key(tuple(e["loc"]), root)
        elif e["type"] == "union_tag_invalid":
            tag = str(e.get("ctx", {}).get("tag", ""))[:40]
            msg = f"unknown capacity type {tag!r}; valid choices: {', '.join(CAPACITY_TYPES)}"
        elif e["type"] == "union_tag_not_found":
            msg = f"missing 'type'; valid choices: {', '.join(CAPACITY_TYPES)}"
        elif e["type"] == "literal_error" and "expected" in e.get("ctx", {}):
            msg = f"not allowed; valid choices: {e['ctx']['expected']}"
        for line in msg.split("\n"):
            if _SEP in line:
                sub, text = line.split(_SEP, 1)
                problems.append((f"{base}.{sub}" if base else sub, text))
            else:
                problems.append((base or "(root)", line))
    return problems


def parse_stack_config(values: Mapping[str, Any], source: str | None = None, stack: str | None = None) -> StackConfig:
    """Validate the ``tpuray:`` config values of a stack (namespace already stripped); ``stack`` names the stack
    for the production rules."""
    if not isinstance(values, Mapping):
        raise ConfigError([("(root)", f"expected a mapping of config keys, got {type(values).__name__}")], source)
    try:
        # by alias only: a snake_case key (slice_pools) is a different Pulumi config key the program never reads
        return StackConfig.model_validate(dict(values), by_name=False, context={"stack": stack})
    except ValidationError as e:
        found = problems(e)
        found += [p for p in _rules_of_valid_parts(values, stack) if p not in found]
        raise ConfigError(found, source) from None


def stack_values(raw_config: Mapping[str, Any], source: str | None = None) -> dict[str, Any]:
    """The ``tpuray:`` keys of a stack file's ``config:`` map, namespace stripped.

    Keys without a namespace belong to the project (as Pulumi reads them); other namespaces (``gcp:``,
    ``kubernetes:``) are the providers' and ignored here.
    """
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in raw_config.items():
        ns, _, name = str(key).rpartition(":")
        if ns in ("", NAMESPACE) and name not in SECRET_KEYS:  # secret-bearing keys are read with get_secret only
            if name in given_as:  # `cluster` and `tpuray:cluster` are one Pulumi key
                raise ConfigError([(name, f"given twice, as {given_as[name]!r} and {str(key)!r}")], source)
            given_as[name] = str(key)
            values[name] = value
    return values


def stack_of_file(path: str | Path) -> str | None:
    """``Pulumi.<stack>.yaml`` -> ``<stack>``; None for other file names."""
    m = re.match(r"^Pulumi\.(.+)\.ya?ml$", Path(path).name)
    return m.group(1) if m else None


def load_stack_file(path: str | Path, stack: str | None = None) -> StackConfig:
    """Load a ``Pulumi.<env>.yaml`` stack file without the Pulumi CLI; the stack's name (for the production
    rules) is ``stack``, else the ``<env>`` of the file name."""
    p = Path(path)
    try:
        doc = read_yaml_file(p)
    except YamlError as e:
        raise ConfigError([("(file)", str(e))], str(p)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise ConfigError([("config", "a stack file needs a top-level 'config:' mapping")], str(p))
    return parse_stack_config(stack_values(doc["config"], str(p)), str(p), stack or stack_of_file(p))
