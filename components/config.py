"""The typed configuration of one tpuray environment (a Pulumi stack).

Pure pydantic; imports no Pulumi. Two loaders feed the same model:

- :func:`load_stack_file` reads a ``Pulumi.<env>.yaml`` directly (the project's CLI, tests, the local run);
- ``tpuray.components.stack_config.from_pulumi_config`` reads the stack's ``pulumi.Config`` in the program.

Keys are camelCase in YAML (Pulumi's convention) and snake_case in Python. A bad value anywhere raises one
:class:`ConfigError` that lists every problem with its path, e.g. ``slicePools[1].topology: ...``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from tpuray.components.images import parse_image
from tpuray.components.names import KUBERAY_NAMESPACE
from tpuray.components.topology import TopologyError, TpuSlice, generation

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
    "FlexStart",
    "ModelConfig",
    "NetworkConfig",
    "OnDemand",
    "Queued",
    "RayConfig",
    "Reservation",
    "SlicePoolConfig",
    "Spot",
    "StackConfig",
    "WorkloadConfig",
    "control_plane_rules",
    "gke_version_key",
    "is_production_stack",
    "load_stack_file",
    "parse_stack_config",
    "problems",
    "required_gke_version",
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

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(problems)} problem(s){where}:"] + [f"  {p}: {m}" for p, m in problems]
        super().__init__("\n".join(lines))


class _Model(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown keys are errors; values are immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True
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
    """Consume a specific reservation; ``project`` names the owner of a shared reservation."""

    type: Literal["reservation"]
    name: Annotated[str, Field(pattern=_NAME, max_length=63)]
    project: str | None = None

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
    """Queued provisioning (DWS): the whole slice is granted at once through a ProvisioningRequest."""

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

    name: Annotated[str, Field(pattern=_NAME, max_length=36, description="node pool name (prefix)")]
    generation: str
    topology: str
    machine_type: str | None = None
    slices: Annotated[int, Field(ge=1, le=64)] = 1
    capacity: Capacity = OnDemand()
    autoscaling: Autoscaling = Autoscaling()
    zone: str | None = Field(default=None, description="zone of this pool; defaults to the stack's zone")

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
        return self

    @property
    def tpu_slice(self) -> TpuSlice:
        """The slice shape every resource of this pool is derived from."""
        return TpuSlice.parse(self.generation, self.topology, self.machine_type)

    @property
    def min_slices(self) -> int:
        """Fewest slices kept (``slices`` when autoscaling is off)."""
        return self.autoscaling.min_slices if self.autoscaling.enabled else self.slices


# ---- cluster, network, Ray, checkpoints, workload -----------------------------------------------------
def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as e:
        raise ValueError(f"not a CIDR block: {e}") from None


Cidr = Annotated[str, AfterValidator(_cidr)]
"""An IP network in CIDR notation with no host bits set, e.g. ``10.0.0.0/20``."""


def _not_everyone(value: str) -> str:
    if ipaddress.ip_network(value).prefixlen == 0:
        raise ValueError(
            f"{value} opens the control plane to every address; list your networks, or set "
            "cluster.controlPlaneEndpoint: private or dns (GKE hardening guide, CIS GKE 5.6.3)"
        )
    return value


class AuthorizedNetwork(_Model):
    cidr: Annotated[Cidr, AfterValidator(_not_everyone)]
    name: str = ""


ReleaseChannel = Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"]
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

    name: Annotated[str, Field(pattern=_NAME, max_length=40)] = "tpuray"
    regional: bool = Field(default=False, description="regional control plane (else zonal, in `zone`)")
    release_channel: ReleaseChannel = "REGULAR"
    min_master_version: str | None = Field(default=None, description="defaults to what the TPU generations need")
    private_nodes: bool = True
    master_authorized_networks: list[AuthorizedNetwork] = []
    control_plane_endpoint: ControlPlaneEndpoint = Field(
        default="public",
        description="public (reached from masterAuthorizedNetworks only), private (internal IP only) or dns "
        "(the DNS-based endpoint, IAM-checked, IP endpoints off)",
    )
    deletion_protection: bool = True
    system_machine_type: str = "e2-standard-8"
    system_nodes: Annotated[int, Field(ge=1, le=10)] = 1

    @field_validator("min_master_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None:
            gke_version_key(v)
        return v

    @model_validator(mode="after")
    def _endpoint(self) -> ClusterConfig:
        if self.control_plane_endpoint == "private" and not self.private_nodes:
            raise ValueError(
                _field_msg("controlPlaneEndpoint", "a private endpoint needs privateNodes: true (GKE private clusters)")
            )
        return self


def gke_version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a GKE version, e.g. ``1.31.2-gke.1115000`` -> ``(1, 31, 2, 1115000)``."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-gke\.(\d+))?$", version.strip()) if isinstance(version, str) else None
    if not m:
        raise ValueError(f"{version!r} is not a GKE version like 1.31.2-gke.1115000")
    return tuple(int(x or 0) for x in m.groups())


class NetworkConfig(_Model):
    """The VPC: a new one (create: true) or an existing one by name, with its secondary range names."""

    create: bool = True
    name: str | None = Field(default=None, description="network name (required when create is false)")
    subnetwork: str | None = None
    subnet_cidr: Cidr = "10.0.0.0/20"
    pods_cidr: Cidr = "10.16.0.0/14"
    services_cidr: Cidr = "10.20.0.0/20"
    pods_range_name: str = "pods"
    services_range_name: str = "services"

    @model_validator(mode="after")
    def _rules(self) -> NetworkConfig:
        if not self.create and not (self.name and self.subnetwork):
            raise ValueError(_field_msg("name", "an existing network needs both name and subnetwork"))
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


def _image(value: str) -> str:
    parse_image(value)  # a tag or a digest (``@sha256:...``) are both accepted
    return value


Image = Annotated[str, AfterValidator(_image)]
"""A container image reference, by tag or pinned by digest."""


class RayConfig(_Model):
    """KubeRay and the Ray images."""

    version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+$")] = "2.60.0"
    image: Image = Field(default="rayproject/ray:2.60.0-py311", description="head image (a tag, or @sha256:<digest>)")
    worker_image: Image | None = Field(default=None, description="TPU worker image (workloads/Dockerfile)")
    namespace: Annotated[str, Field(pattern=_NAME, max_length=63), AfterValidator(_own_namespace)] = "ray"
    operator: Literal["addon", "helm"] = Field(default="addon", description="GKE Ray add-on or the Helm chart")
    auth_options: bool | None = Field(
        default=None,
        description="token auth through KubeRay's authOptions (KubeRay >= 1.6); default: on with the Helm operator, "
        "off with the GKE add-on (its KubeRay version is not published), which gets RAY_AUTH_MODE=token env instead",
    )
    helm_chart_version: str = "1.7.0"
    operator_namespace: Annotated[str, Field(pattern=_NAME, max_length=63)] | None = Field(
        default=None,
        description="namespace of in-cluster KubeRay operator pods allowed to call the head's job API (RayJob "
        "status); default kuberay-system with helm, none with the add-on (GKE hosts it and does not document where "
        "it connects from)",
    )
    head_cpu: str = "4"
    head_memory: str = "16Gi"
    worker_cpu: str = "8"
    worker_memory: str = "64Gi"

    @model_validator(mode="after")
    def _token_auth_needs(self) -> RayConfig:
        # Older versions ignore the setting instead of failing: the cluster would run without authentication.
        if _version_key(self.version) < _version_key(MIN_RAY_TOKEN_AUTH):
            raise ValueError(
                _field_msg(
                    "version",
                    f"{self.version} has no token authentication (Ray >= {MIN_RAY_TOKEN_AUTH}: "
                    "https://docs.ray.io/en/latest/ray-security/token-auth.html)",
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

    bucket: str | None = Field(default=None, description="bucket name; defaults to <project>-<cluster>-ckpt")
    location: str | None = Field(default=None, description="bucket location; defaults to the region")
    mount_path: str = "/checkpoints"
    retention_days: Annotated[int, Field(ge=0)] = 30
    soft_delete_days: Annotated[int, Field(ge=7, le=90)] = Field(
        default=7, description="days a deleted or overwritten checkpoint stays restorable (GCS soft delete, 7-90)"
    )
    versioning: bool = Field(default=False, description="also keep noncurrent object versions (GCS versioning)")


class ModelConfig(_Model):
    """The GPT-style decoder trained by the entrypoint."""

    vocab_size: Annotated[int, Field(ge=2)] = 256
    layers: Annotated[int, Field(ge=1)] = 2
    d_model: Annotated[int, Field(ge=8)] = 64
    heads: Annotated[int, Field(ge=1)] = 4

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(_field_msg("heads", f"{self.heads} does not divide dModel={self.d_model}"))
        return self


class WorkloadConfig(_Model):
    """Defaults of the training entrypoint (``python -m tpuray.workloads.train``)."""

    backend: Literal["xla", "torch_tpu"] = "xla"
    slice_pool: str | None = Field(default=None, description="pool the job runs on; defaults to the first")
    steps: Annotated[int, Field(ge=1)] = 60
    batch_size_per_chip: Annotated[int, Field(ge=1)] = 8
    seq_len: Annotated[int, Field(ge=2)] = 64
    learning_rate: Annotated[float, Field(gt=0)] = 3e-3
    checkpoint_every: Annotated[int, Field(ge=1)] = 20
    dataset: str | None = Field(default=None, description="tokenised text file; synthetic tokens if unset")
    model: ModelConfig = ModelConfig()


# ---- the stack ----------------------------------------------------------------------------------------
def required_gke_version(pools: Iterable[SlicePoolConfig]) -> str:
    """The lowest GKE version that serves every pool's slice with the Ray add-on (at least one pool)."""
    return max((p.tpu_slice.min_gke_version for p in pools), key=gke_version_key)


def stack_rules(
    region: str | None,
    zone: str | None,
    cluster: ClusterConfig | None,
    pools: list[tuple[int, SlicePoolConfig]],
    pool_names: list[str],
    workload_pool: str | None,
) -> list[str]:
    """The rules that span sections of a stack, as :func:`_field_msg` strings.

    Any part may be missing (``None``, or pools left out) when it failed its own validation: the rules that
    need it are skipped, the others still run, so one error lists every problem of the stack.
    """
    found: list[str] = []
    if region is not None and zone is not None and not zone.startswith(region + "-"):
        found.append(_field_msg("zone", f"{zone!r} is not in region {region!r}"))
    if cluster is not None and not cluster.regional and zone is None:
        found.append(_field_msg("zone", "a zonal cluster (cluster.regional: false) needs a zone"))
    seen: set[str] = set()
    for i, pool in pools:
        at = f"slicePools[{i}]"
        if pool.name in seen:
            found.append(_field_msg(f"{at}.name", f"duplicate pool name {pool.name!r}"))
        seen.add(pool.name)
        if region is not None and pool.zone is not None and not pool.zone.startswith(region + "-"):
            found.append(_field_msg(f"{at}.zone", f"{pool.zone!r} is not in region {region!r}"))
        if pool.tpu_slice.placement != "none" and (pool.zone or zone) is None:
            found.append(
                _field_msg(
                    f"{at}.zone",
                    f"a multi-host {pool.tpu_slice.topology} slice needs compact placement in a single zone: set "
                    "the pool's zone or the stack's zone",
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
        return model.model_validate(value if value is not None else {})
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
    found = stack_rules(
        region if isinstance(region, str) and re.match(_REGION, region) else None,
        zone if isinstance(zone, str) else None,
        _valid_part(ClusterConfig, values.get("cluster")),
        pools,
        names,
        workload.slice_pool if workload is not None else None,
    )
    cluster = _valid_part(ClusterConfig, values.get("cluster"))
    if cluster is not None:
        found += control_plane_rules(cluster, stack)
    return [(path, text) for path, text in (line.split(_SEP, 1) for line in found)]


_REGION = r"^[a-z]+-[a-z]+\d+$"


class StackConfig(_Model):
    """One environment. Keys are ``tpuray:<key>`` in the Pulumi stack file."""

    project: Annotated[str, Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id")]
    region: Annotated[str, Field(pattern=_REGION, description="GCP region, e.g. us-central2")]
    zone: str | None = Field(default=None, description="zone for zonal clusters and TPU pools ('' for none)")
    cluster: ClusterConfig = ClusterConfig()
    network: NetworkConfig = NetworkConfig()
    slice_pools: Annotated[
        list[SlicePoolConfig],
        Field(min_length=1, description="TPU slice pools: name, generation, topology, slices, capacity, autoscaling"),
    ]
    checkpoints: CheckpointConfig = CheckpointConfig()
    ray: RayConfig = RayConfig()
    workload: WorkloadConfig = WorkloadConfig()

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
        )
        found += control_plane_rules(self.cluster, _stack_of(info.context))
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
        return self.checkpoints.bucket or f"{self.project}-{self.cluster.name}-ckpt"

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


def problems(err: ValidationError) -> list[tuple[str, str]]:
    """A pydantic error of any config model as ``(path, message)`` pairs, paths in camelCase."""
    problems: list[tuple[str, str]] = []
    for e in err.errors(include_url=False):
        base = _path(e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "union_tag_invalid":
            msg = (
                f"unknown capacity type {e.get('input', {}).get('type')!r}; valid choices: {', '.join(CAPACITY_TYPES)}"
            )
        elif e["type"] == "union_tag_not_found":
            msg = f"missing 'type'; valid choices: {', '.join(CAPACITY_TYPES)}"
        elif e["type"] == "literal_error" and "expected" in e.get("ctx", {}):
            msg = f"{e.get('input')!r} is not allowed; valid choices: {e['ctx']['expected']}"
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
        return StackConfig.model_validate(dict(values), context={"stack": stack})
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
    for key, value in raw_config.items():
        ns, _, name = str(key).rpartition(":")
        if ns in ("", NAMESPACE) and name not in SECRET_KEYS:
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
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError([("(file)", f"cannot read {p}: {e.strerror}")], str(p)) from None
    except yaml.YAMLError as e:
        raise ConfigError([("(file)", f"not valid YAML: {e}")], str(p)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise ConfigError([("config", "a stack file needs a top-level 'config:' mapping")], str(p))
    return parse_stack_config(stack_values(doc["config"], str(p)), str(p), stack or stack_of_file(p))
