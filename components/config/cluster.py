"""The GKE cluster and its network."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from tpuray.components.catalog.cloud_limits import system_machine_type_problem
from tpuray.components.catalog.ip_ranges import MAX_PUBLIC_AUTHORIZED_ADDRESSES, public_addresses
from tpuray.components.catalog.machine_shapes import machine_type_problem
from tpuray.components.catalog.resource_names import service_account_id
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.config.base import (
    NAME_PATTERN,
    ConfigModel,
    config_dataclass,
    field_problem,
)
from tpuray.components.config.gke_cluster_types import AuthorizedNetwork
from tpuray.components.config.value_types import (
    Cidr,
    GceName,
    GkeVersion,
    MachineType,
    RangeName,
    prefix_problem,
    private_range_problem,
)


def _not_everyone(network: AuthorizedNetwork) -> AuthorizedNetwork:
    if ipaddress.ip_network(network.cidr).prefixlen == 0:
        raise field_problem(
            "cidr",
            f"{network.cidr} opens the control plane to every address; list your networks, or set "
            "cluster.controlPlaneEndpoint: private or dns (GKE hardening guide, CIS GKE 5.6.3)",
        )
    return network


AuthorizedNetworkConfig = Annotated[
    AuthorizedNetwork, config_dataclass(AuthorizedNetwork), AfterValidator(_not_everyone)
]
"""The component's :class:`AuthorizedNetwork`, validated as config."""


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


class ClusterConfig(ConfigModel):
    """The GKE cluster."""

    # GKE cluster names: a lowercase letter, then up to 39 lowercase letters, digits or '-', not ending with '-'.
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=40)] = "tpuray"
    regional: bool = Field(default=False, description="regional control plane (else zonal, in `zone`)")
    release_channel: ReleaseChannel = "REGULAR"
    min_master_version: GkeVersion | None = Field(
        default=None,
        description="a GKE version alias, 1.X or 1.X.Y, at least what the TPU pools need: GKE creates the cluster at "
        "the newest patch it offers under that alias; unset: the release channel's default version (GKE offers it "
        "by definition), which `tpuray doctor` compares with what the pools need. An exact 1.X.Y-gke.N is refused",
    )
    private_nodes: bool = True
    master_authorized_networks: list[AuthorizedNetworkConfig] = []
    control_plane_endpoint: ControlPlaneEndpoint = Field(
        default="public",
        description="public (reached from masterAuthorizedNetworks only), private (internal IP only) or dns "
        "(the DNS-based endpoint, IAM-checked, IP endpoints off)",
    )
    deletion_protection: bool = True
    system_machine_type: MachineType = "e2-standard-8"
    system_nodes: Annotated[int, Field(ge=1, le=10)] = 1

    @field_validator("min_master_version")
    @classmethod
    def _alias_not_patch(cls, v: str | None) -> str | None:
        # GKE creates a cluster only at a version it offers now in the location and channel, and it withdraws patches
        # every few weeks (https://cloud.google.com/kubernetes-engine/versioning#specifying_cluster_version); an
        # alias resolves to the newest offered patch (the API's initialClusterVersion: "1.X" and "1.X.Y" are aliases,
        # https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters).
        if v is not None and "-gke." in v:
            alias = v.split("-gke.")[0]
            raise ValueError(
                f"{v} is an exact GKE patch, which GKE accepts only while it offers it (gcloud container "
                f"get-server-config lists them) and later withdraws: give an alias, {alias} or "
                f"{'.'.join(alias.split('.')[:2])}, or leave it unset for the release channel's default"
            )
        return v

    @field_validator("system_machine_type")
    @classmethod
    def _cpu_machine(cls, v: str) -> str:
        if any(v in g.machine_types for g in GENERATIONS):
            raise ValueError(f"{v} is a TPU machine type; the system pool runs the Ray head on CPU, e.g. e2-standard-8")
        if problem := system_machine_type_problem(v):  # a known CPU machine series (cloud_limits cites it)
            raise ValueError(problem)
        if problem := machine_type_problem(v):  # one the catalog holds, or a custom type within its series' limits
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _authorized_networks(self) -> ClusterConfig:
        nets, limit = self.master_authorized_networks, MAX_AUTHORIZED_NETWORKS[self.private_nodes]
        if len(nets) > limit:
            kind = "private" if self.private_nodes else "public"
            raise field_problem(
                "masterAuthorizedNetworks", f"{len(nets)} ranges; a {kind} cluster takes at most {limit}"
            )
        cidrs = [n.cidr for n in nets]
        for i, cidr in enumerate(cidrs):
            if cidr in cidrs[:i]:
                raise field_problem(f"masterAuthorizedNetworks[{i}].cidr", f"{cidr} is listed twice")
        # The union is judged, not each literal (0.0.0.0/1 + 128.0.0.0/1 is the whole internet).
        if public_addresses(cidrs) > MAX_PUBLIC_AUTHORIZED_ADDRESSES:
            raise field_problem(
                "masterAuthorizedNetworks",
                f"together these ranges cover {public_addresses(cidrs):,} public addresses, more than a /8: "
                "list the networks that must reach the control plane (e.g. an office's /24), or set "
                "cluster.controlPlaneEndpoint: private or dns",
            )
        return self

    @model_validator(mode="after")
    def _endpoint(self) -> ClusterConfig:
        if self.control_plane_endpoint == "private" and not self.private_nodes:
            raise field_problem(
                "controlPlaneEndpoint", "a private endpoint needs privateNodes: true (GKE private clusters)"
            )
        return self

    @property
    def node_service_account_id(self) -> str:
        """The nodes' Google service account id (6-30 characters, derived from the cluster name)."""
        return service_account_id(self.name, "nodes")


class NetworkConfig(ConfigModel):
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
            raise field_problem("name", "an existing network needs both name and subnetwork")
        if self.pods_range_name == self.services_range_name:
            raise field_problem("servicesRangeName", f"{self.services_range_name!r} is also the pods range")
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
                raise field_problem(to_camel(key), problem)
        nets = {k: ipaddress.ip_network(getattr(self, k)) for k in ("subnet_cidr", "pods_cidr", "services_cidr")}
        keys = list(nets)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                if nets[a].overlaps(nets[b]):
                    raise field_problem(to_camel(b), f"{nets[b]} overlaps {to_camel(a)} {nets[a]}")
        return self
