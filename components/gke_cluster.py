"""``GkeCluster``: a GKE Standard cluster for Ray on TPUs.

Declares: a VPC and subnet with pod/service secondary ranges (or uses an existing network), a Cloud Router and
Cloud NAT when nodes are private, a least-privilege node service account (GKE's node role, Artifact Registry
read on the image repositories only), the cluster (GCS FUSE CSI driver, the Ray Operator add-on declared off unless
asked for, Workload Identity, Dataplane V2, release channel, private nodes, a public endpoint limited to the
authorized networks or a private or DNS-only endpoint, shielded nodes, legacy ABAC and client certificates off,
default node pool removed) and a CPU system node pool for the Ray head and system pods. Outputs the cluster
name, endpoint, location, a kubeconfig (secret, using ``gke-gcloud-auth-plugin``) and a Kubernetes provider for
the other components. What to declare is decided by :func:`~tpuray.components.planning.cluster_plan.plan_cluster`;
this module only turns its :class:`ClusterPlan` into resources.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from tpuray.components.catalog.names import CLOUD_PLATFORM_SCOPE, SYSTEM_POOL
from tpuray.components.planning.cluster_plan import IMAGE_READER_ROLE, NODE_SA_ROLES, ClusterPlan, plan_cluster
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
    "ClusterPlan",
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

    plan: ClusterPlan
    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    location: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    node_service_account_email: pulumi.Output[str]
    provider: k8s.Provider
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        self.plan = plan = plan_cluster(args)  # every decision, before any child exists
        super().__init__("tpuray:index:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # ---- network ------------------------------------------------------------------------------------
        network: pulumi.Input[str]
        subnetwork: pulumi.Input[str]
        if plan.new_network is not None:
            new = plan.new_network
            vpc = gcp.compute.Network(
                f"{name}-network",
                name=new.vpc_name,
                project=plan.project,
                auto_create_subnetworks=False,
                opts=child,
            )
            subnet = gcp.compute.Subnetwork(
                f"{name}-subnet",
                name=new.subnet_name,
                project=plan.project,
                region=plan.region,
                network=vpc.id,
                ip_cidr_range=new.subnet_cidr,
                private_ip_google_access=True,
                secondary_ip_ranges=[
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=plan.pods_range_name, ip_cidr_range=new.pods_cidr
                    ),
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=plan.services_range_name, ip_cidr_range=new.services_cidr
                    ),
                ],
                opts=child,
            )
            network, subnetwork = vpc.self_link, subnet.self_link
        else:
            assert plan.existing_network is not None and plan.existing_subnetwork is not None  # plan_cluster's rule
            network, subnetwork = plan.existing_network, plan.existing_subnetwork

        if plan.nat is not None:
            router = gcp.compute.Router(
                f"{name}-router",
                name=plan.nat.router_name,
                project=plan.project,
                region=plan.region,
                network=network,
                opts=child,
            )
            gcp.compute.RouterNat(
                f"{name}-nat",
                name=plan.nat.nat_name,
                project=plan.project,
                region=plan.region,
                router=router.name,
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat=plan.nat.source_ranges,
                subnetworks=[
                    gcp.compute.RouterNatSubnetworkArgs(name=s, source_ip_ranges_to_nats=["ALL_IP_RANGES"])
                    for s in plan.nat.subnetworks
                ]
                or None,
                log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter=plan.nat.log_filter),
                opts=child,
            )

        # ---- node identity --------------------------------------------------------------------------------
        node_sa = gcp.serviceaccount.Account(
            f"{name}-node-sa",
            account_id=plan.node_account_id,
            display_name=plan.node_account_display_name,
            project=plan.project,
            opts=child,
        )
        member = node_sa.email.apply(lambda e: f"serviceAccount:{e}")
        role_bindings: list[pulumi.Resource] = [
            gcp.projects.IAMMember(f"{name}-node-sa-{g.key}", project=g.project, role=g.role, member=member, opts=child)
            for g in plan.project_roles
        ]
        role_bindings += [
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-node-sa-reads-{g.key}",
                project=g.repository.project,
                location=g.repository.location,
                repository=g.repository.repository,
                role=IMAGE_READER_ROLE,
                member=member,
                opts=child,
            )
            for g in plan.image_reads
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
                enable_private_nodes=True, enable_private_endpoint=plan.private_endpoint
            )
            if plan.private_nodes
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
            if plan.dns_endpoint_only
            else None
        )
        authorized = (
            gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=n.cidr, display_name=n.name or None
                    )
                    for n in plan.authorized_networks
                ]
            )
            if plan.authorized_networks
            else None
        )
        # Shielded nodes with secure boot and integrity monitoring on every pool (CIS GKE 5.5.5-5.5.7).
        shielded = {"enable_secure_boot": True, "enable_integrity_monitoring": True}
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=plan.name,
            project=plan.project,
            location=plan.location,
            network=network,
            subnetwork=subnetwork,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=plan.pods_range_name,
                services_secondary_range_name=plan.services_range_name,
            ),
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=plan.release_channel),
            maintenance_policy=maintenance_policy(plan.maintenance) if plan.maintenance is not None else None,
            min_master_version=plan.min_master_version,
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(workload_pool=plan.workload_pool),
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
            deletion_protection=plan.deletion_protection,
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
            resource_labels=plan.resource_labels,
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_bindings),
        )

        system = plan.system_pool
        self.system_pool = gcp.container.NodePool(
            f"{name}-system-pool",
            name=system.name,
            project=plan.project,
            cluster=self.cluster.name,
            location=plan.location,
            node_count=system.nodes,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=system.machine_type,
                service_account=node_sa.email,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                labels=dict(system.labels),
                resource_labels=plan.resource_labels,
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
