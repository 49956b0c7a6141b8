"""``GkeCluster``: a GKE Standard cluster for Ray on TPUs.

Declares: a VPC and subnet with pod/service secondary ranges (or uses an existing network), a Cloud Router and
Cloud NAT when nodes are private, a least-privilege node service account (GKE's node role, Artifact Registry
read on the image repositories only), the cluster (GCS FUSE CSI driver, the Ray Operator add-on declared off unless
asked for, Workload Identity, Dataplane V2, release channel, private nodes, a public endpoint limited to the
authorized networks or a private or DNS-only endpoint, shielded nodes, legacy ABAC and client certificates off,
default node pool removed) and a CPU system node pool for the Ray head and system pods. Outputs the cluster
name, endpoint, location, a kubeconfig (secret, using ``gke-gcloud-auth-plugin``) and a Kubernetes provider for
the other components.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from tpuray.components.catalog.names import CLOUD_PLATFORM_SCOPE, NODE_SERVICE_ACCOUNT_ROLE, SYSTEM_POOL
from tpuray.components.planning.component_args import (
    AuthorizedNetwork,
    ControlPlane,
    GkeClusterArgs,
    Maintenance,
    MaintenanceExclusion,
    MaintenanceWindow,
    Network,
)

__all__ = [
    "NODE_SA_ROLES",
    "SYSTEM_POOL",
    "AuthorizedNetwork",
    "ControlPlane",
    "GkeCluster",
    "GkeClusterArgs",
    "Maintenance",
    "MaintenanceExclusion",
    "MaintenanceWindow",
    "Network",
    "maintenance_policy",
    "render_kubeconfig",
]

# The one project role GKE documents for node service accounts (logs, metrics, autoscaling metrics). Images are
# read with roles/artifactregistry.reader on each image repository, never project-wide.
NODE_SA_ROLES = (NODE_SERVICE_ACCOUNT_ROLE,)
IMAGE_READER_ROLE = "roles/artifactregistry.reader"


def maintenance_policy(m: Maintenance) -> gcp.container.ClusterMaintenancePolicyArgs | None:
    """The cluster's maintenance policy, or None to leave GKE's default (any time).

    TPU VMs cannot live-migrate, so an upgrade restarts whole slices; the window and exclusions confine it
    (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions).
    """
    if not m.declared:
        return None
    window = None
    if m.window is not None:
        window = gcp.container.ClusterMaintenancePolicyRecurringWindowArgs(
            start_time=m.window.start, end_time=m.window.end, recurrence=m.window.recurrence
        )
    return gcp.container.ClusterMaintenancePolicyArgs(
        recurring_window=window,
        maintenance_exclusions=[
            gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name=e.name,
                start_time=e.start,
                end_time=e.end,
                exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                    scope=e.scope
                ),
            )
            for e in m.exclusions
        ]
        or None,
    )


def render_kubeconfig(name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with ``gke-gcloud-auth-plugin`` (no static credentials in state)."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }
    }
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": f"https://{endpoint}", "certificate-authority-data": ca_certificate}}
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [{"name": name, "user": user}],
    }
    return json.dumps(doc, indent=2)


class GkeCluster(pulumi.ComponentResource):
    """A GKE cluster with Workload Identity, the GCS FUSE CSI driver and a CPU system pool."""

    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    location: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    node_service_account_email: pulumi.Output[str]
    provider: k8s.Provider
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpuray:index:GkeCluster", name, None, opts)
        c, net = args.cluster, args.network
        child = pulumi.ResourceOptions(parent=self)

        # ---- network ------------------------------------------------------------------------------------
        network: pulumi.Input[str]
        subnetwork: pulumi.Input[str]
        nat_subnets: list[gcp.compute.RouterNatSubnetworkArgs] | None = None
        if net.create:
            vpc = gcp.compute.Network(
                f"{name}-network",
                name=f"{c.name}-net",
                project=args.project,
                auto_create_subnetworks=False,
                opts=child,
            )
            subnet = gcp.compute.Subnetwork(
                f"{name}-subnet",
                name=f"{c.name}-subnet",
                project=args.project,
                region=args.region,
                network=vpc.id,
                ip_cidr_range=net.subnet_cidr,
                private_ip_google_access=True,
                secondary_ip_ranges=[
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=net.pods_range_name, ip_cidr_range=net.pods_cidr
                    ),
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=net.services_range_name, ip_cidr_range=net.services_cidr
                    ),
                ],
                opts=child,
            )
            network, subnetwork = vpc.self_link, subnet.self_link
        else:
            network = f"projects/{args.project}/global/networks/{net.name}"
            subnetwork = f"projects/{args.project}/regions/{args.region}/subnetworks/{net.subnetwork}"
            # On a shared network, NAT only this cluster's subnet so other subnets' egress is left alone.
            nat_subnets = [
                gcp.compute.RouterNatSubnetworkArgs(name=subnetwork, source_ip_ranges_to_nats=["ALL_IP_RANGES"])
            ]

        if c.private_nodes:
            # Private nodes have no external IPs; NAT gives them egress to pull images and reach Google APIs.
            router = gcp.compute.Router(
                f"{name}-router",
                name=f"{c.name}-router",
                project=args.project,
                region=args.region,
                network=network,
                opts=child,
            )
            gcp.compute.RouterNat(
                f"{name}-nat",
                name=f"{c.name}-nat",
                project=args.project,
                region=args.region,
                router=router.name,
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat=(
                    "LIST_OF_SUBNETWORKS" if nat_subnets else "ALL_SUBNETWORKS_ALL_IP_RANGES"
                ),
                subnetworks=nat_subnets,
                log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
                opts=child,
            )

        # ---- node identity --------------------------------------------------------------------------------
        node_sa = gcp.serviceaccount.Account(
            f"{name}-node-sa",
            account_id=c.node_service_account_id,
            display_name=f"GKE nodes of {c.name}",
            project=args.project,
            opts=child,
        )
        member = node_sa.email.apply(lambda e: f"serviceAccount:{e}")
        role_bindings: list[pulumi.Resource] = [
            gcp.projects.IAMMember(
                f"{name}-node-sa-{role.split('/')[1].replace('.', '-').lower()}",
                project=args.project,
                role=role,
                member=member,
                opts=child,
            )
            for role in NODE_SA_ROLES
        ]
        role_bindings += [
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-node-sa-reads-{repo.project}-{repo.location}-{repo.repository}",
                project=repo.project,
                location=repo.location,
                repository=repo.repository,
                role=IMAGE_READER_ROLE,
                member=member,
                opts=child,
            )
            for repo in args.image_repositories
        ]
        node_metadata = gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA")

        # ---- the cluster ----------------------------------------------------------------------------------
        # The Ray add-on is declared off, not left out: the provider's ray_operator_config is Optional+Computed
        # (terraform-provider-google resource_container_cluster.go), so leaving it out would keep an add-on a
        # cluster already has running beside the Helm operator.
        ray_addon = gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(enabled=False)
        addons = gcp.container.ClusterAddonsConfigArgs(
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
            ray_operator_configs=[ray_addon],
        )
        private = (
            gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=c.control_plane_endpoint == "private"
            )
            if c.private_nodes
            else None
        )
        # DNS-only: the IP endpoints are off and the DNS endpoint checks IAM on every request
        # (https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation).
        endpoints = (
            gcp.container.ClusterControlPlaneEndpointsConfigArgs(
                dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
                    allow_external_traffic=True
                ),
                ip_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigIpEndpointsConfigArgs(
                    enabled=False
                ),
            )
            if c.control_plane_endpoint == "dns"
            else None
        )
        authorized = (
            gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=n.cidr, display_name=n.name or None
                    )
                    for n in c.master_authorized_networks
                ]
            )
            if c.master_authorized_networks
            else None
        )
        # Shielded nodes with secure boot and integrity monitoring on every pool (CIS GKE 5.5.5-5.5.7).
        shielded = {"enable_secure_boot": True, "enable_integrity_monitoring": True}
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=c.name,
            project=args.project,
            location=args.location,
            network=network,
            subnetwork=subnetwork,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=net.pods_range_name,
                services_secondary_range_name=net.services_range_name,
            ),
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=c.release_channel),
            maintenance_policy=maintenance_policy(args.maintenance),
            min_master_version=c.min_master_version,
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog"
            ),
            addons_config=addons,
            datapath_provider="ADVANCED_DATAPATH",
            private_cluster_config=private,
            master_authorized_networks_config=authorized,
            control_plane_endpoints_config=endpoints,
            enable_shielded_nodes=True,
            # Explicitly off, not left to defaults (GKE hardening guide; CIS GKE 5.8.1 and 5.8.4).
            enable_legacy_abac=False,
            master_auth=gcp.container.ClusterMasterAuthArgs(
                client_certificate_config=gcp.container.ClusterMasterAuthClientCertificateConfigArgs(
                    issue_client_certificate=False
                )
            ),
            deletion_protection=c.deletion_protection,
            # The default pool is created and deleted at once; give it the node identity anyway so the
            # default compute service account never runs a node.
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config=gcp.container.ClusterNodeConfigArgs(
                service_account=node_sa.email,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=node_metadata,
                shielded_instance_config=gcp.container.ClusterNodeConfigShieldedInstanceConfigArgs(**shielded),
            ),
            resource_labels=args.resource_labels or None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_bindings),
        )

        self.system_pool = gcp.container.NodePool(
            f"{name}-system-pool",
            name=SYSTEM_POOL,
            project=args.project,
            cluster=self.cluster.name,
            location=args.location,
            node_count=c.system_nodes,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=c.system_machine_type,
                service_account=node_sa.email,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                labels={"tpuray.io/role": "system"},
                resource_labels=args.resource_labels or None,
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(**shielded),
            ),
            opts=child,
        )

        self.cluster_name = self.cluster.name
        self.endpoint = self.cluster.endpoint
        self.location = self.cluster.location
        self.node_service_account_email = node_sa.email
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate
            ).apply(lambda v: render_kubeconfig(v[0], v[1], v[2]))
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]),
        )
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "endpoint": self.endpoint,
                "location": self.location,
                "kubeconfig": self.kubeconfig,
            }
        )
