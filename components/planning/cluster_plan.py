"""``ClusterPlan``: every decision ``GkeCluster`` makes, as plain data (no Pulumi).

:func:`plan_cluster` turns the cluster's inputs (:class:`~tpuray.components.planning.component_args.GkeClusterArgs`)
into what :class:`~tpuray.components.gke_cluster.GkeCluster` declares: a new VPC or the paths of an existing one,
whether Cloud NAT is declared and which subnets it covers, the node identity's grants, the control-plane endpoint
(public with authorized networks, private, or DNS only), the maintenance policy and the CPU system pool. The
component only turns these fields into resources.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpuray.components.catalog.images import ArtifactRepository
from tpuray.components.catalog.names import (
    IMAGE_STREAMING_NODE_ROLE,
    NODE_SERVICE_ACCOUNT_ROLE,
    SYSTEM_POOL,
    workload_identity_pool,
)
from tpuray.components.planning.component_args import AuthorizedNetwork, GkeClusterArgs, Maintenance

__all__ = [
    "IMAGE_READER_ROLE",
    "NODE_SA_ROLES",
    "ClusterPlan",
    "ImageReadGrant",
    "Nat",
    "NewNetwork",
    "ProjectRoleGrant",
    "SystemPool",
    "plan_cluster",
]

# The one project role GKE documents for node service accounts (logs, metrics, autoscaling metrics); image streaming
# adds IMAGE_STREAMING_NODE_ROLE in the projects of the streamed images, and only there. Images are read with
# roles/artifactregistry.reader on each image repository, never project-wide.
NODE_SA_ROLES = (NODE_SERVICE_ACCOUNT_ROLE,)
IMAGE_READER_ROLE = "roles/artifactregistry.reader"
SYSTEM_NODE_LABELS = {"tpuray.io/role": "system"}


@dataclass(frozen=True)
class NewNetwork:
    """The VPC and subnet tpuray creates (``network.create``), with the pods' and services' secondary ranges."""

    vpc_name: str
    subnet_name: str
    subnet_cidr: str
    pods_cidr: str
    services_cidr: str


@dataclass(frozen=True)
class Nat:
    """The Cloud Router and Cloud NAT that give private nodes (no external IPs) egress to images and Google APIs."""

    router_name: str
    nat_name: str
    subnetworks: tuple[str, ...]
    """Only these subnets are NATed (a shared network's other subnets keep their egress); empty: every subnet of
    the VPC tpuray created."""
    log_filter: str = "ERRORS_ONLY"

    @property
    def source_ranges(self) -> str:
        """``source_subnetwork_ip_ranges_to_nat``: the listed subnets, or all of the VPC's."""
        return "LIST_OF_SUBNETWORKS" if self.subnetworks else "ALL_SUBNETWORKS_ALL_IP_RANGES"


@dataclass(frozen=True)
class ProjectRoleGrant:
    """A project role of the node service account in ``project``; ``key`` names its IAM member stably."""

    key: str
    role: str
    project: str


@dataclass(frozen=True)
class ImageReadGrant:
    """``IMAGE_READER_ROLE`` on one image repository; ``key`` names its IAM member stably."""

    key: str
    repository: ArtifactRepository


@dataclass(frozen=True)
class SystemPool:
    """The CPU node pool of the Ray head and the system pods."""

    name: str
    machine_type: str
    nodes: int
    labels: dict[str, str]


@dataclass(frozen=True)
class ClusterPlan:
    """What ``GkeCluster`` declares, field by field."""

    project: str
    region: str
    location: str
    """The region (regional cluster) or a zone (zonal cluster)."""
    name: str
    new_network: NewNetwork | None
    """The VPC to create; None: the cluster joins ``existing_network``/``existing_subnetwork``."""
    existing_network: str | None
    existing_subnetwork: str | None
    pods_range_name: str
    services_range_name: str
    nat: Nat | None
    """None: the nodes have external IPs (``privateNodes: false``) and need no NAT."""
    node_account_id: str
    node_account_display_name: str
    project_roles: tuple[ProjectRoleGrant, ...]
    image_reads: tuple[ImageReadGrant, ...]
    private_nodes: bool
    private_endpoint: bool
    """The control plane has no public IP endpoint (``controlPlaneEndpoint: private``)."""
    dns_endpoint_only: bool
    """The IP endpoints are off and the DNS endpoint checks IAM on every request (``controlPlaneEndpoint: dns``)."""
    authorized_networks: tuple[AuthorizedNetwork, ...]
    """Who may reach the IP endpoint; empty: no authorized-networks block is declared."""
    release_channel: str
    min_master_version: str | None
    """None: not sent, and GKE creates the cluster at its release channel's default version."""
    maintenance: Maintenance | None
    """None leaves GKE's default (upgrades at any time)."""
    workload_pool: str
    deletion_protection: bool
    system_pool: SystemPool
    resource_labels: dict[str, str] | None = field(default=None)
    """None when the stack has no labels: the field is left unset rather than sent empty."""


def _role_key(role: str) -> str:
    """``roles/container.defaultNodeServiceAccount`` -> ``container-defaultnodeserviceaccount``."""
    return role.split("/")[1].replace(".", "-").lower()


def plan_cluster(args: GkeClusterArgs) -> ClusterPlan:
    """Every decision of the cluster, from its inputs; raises ``ValueError`` naming the field for a network that is
    neither created nor named."""
    c, net = args.cluster, args.network
    new_network: NewNetwork | None = None
    existing_network = existing_subnetwork = None
    if net.create:
        new_network = NewNetwork(
            vpc_name=f"{c.name}-net",
            subnet_name=f"{c.name}-subnet",
            subnet_cidr=net.subnet_cidr,
            pods_cidr=net.pods_cidr,
            services_cidr=net.services_cidr,
        )
    else:
        if not net.name or not net.subnetwork:
            raise ValueError("network.name and network.subnetwork: both required when network.create is false")
        existing_network = f"projects/{args.project}/global/networks/{net.name}"
        existing_subnetwork = f"projects/{args.project}/regions/{args.region}/subnetworks/{net.subnetwork}"
    nat = None
    if c.private_nodes:
        nat = Nat(
            router_name=f"{c.name}-router",
            nat_name=f"{c.name}-nat",
            # On a shared network, NAT only this cluster's subnet so other subnets' egress is left alone.
            subnetworks=(existing_subnetwork,) if existing_subnetwork else (),
        )
    return ClusterPlan(
        project=args.project,
        region=args.region,
        location=args.location,
        name=c.name,
        new_network=new_network,
        existing_network=existing_network,
        existing_subnetwork=existing_subnetwork,
        pods_range_name=net.pods_range_name,
        services_range_name=net.services_range_name,
        nat=nat,
        node_account_id=c.node_service_account_id,
        node_account_display_name=f"GKE nodes of {c.name}",
        project_roles=(
            *(ProjectRoleGrant(_role_key(r), r, args.project) for r in NODE_SA_ROLES),
            *(
                ProjectRoleGrant(f"{_role_key(IMAGE_STREAMING_NODE_ROLE)}-{p}", IMAGE_STREAMING_NODE_ROLE, p)
                for p in dict.fromkeys(args.streamed_image_projects)
            ),
        ),
        image_reads=tuple(
            ImageReadGrant(f"{r.project}-{r.location}-{r.repository}", r) for r in args.image_repositories
        ),
        private_nodes=c.private_nodes,
        private_endpoint=c.private_nodes and c.control_plane_endpoint == "private",
        dns_endpoint_only=c.control_plane_endpoint == "dns",
        authorized_networks=tuple(c.master_authorized_networks),
        release_channel=c.release_channel,
        min_master_version=c.min_master_version,
        maintenance=args.maintenance if args.maintenance.declared else None,
        workload_pool=workload_identity_pool(args.project),
        deletion_protection=c.deletion_protection,
        system_pool=SystemPool(
            name=SYSTEM_POOL, machine_type=c.system_machine_type, nodes=c.system_nodes, labels=dict(SYSTEM_NODE_LABELS)
        ),
        resource_labels=dict(args.resource_labels) or None,
    )
