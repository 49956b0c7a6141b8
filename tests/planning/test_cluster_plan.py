"""``plan_cluster``: each decision ``GkeCluster`` declares from, made from the config without Pulumi."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from tpuray.components.catalog.images import ArtifactRepository
from tpuray.components.catalog.names import NODE_SERVICE_ACCOUNT_ROLE
from tpuray.components.config import parse_stack_config
from tpuray.components.planning.cluster_plan import ClusterPlan, plan_cluster
from tpuray.components.planning.component_args import GkeClusterArgs
from tpuray.components.planning.stack_plan import plan_stack

OPS = {"cidr": "198.51.100.0/24", "name": "ops"}


def args(cluster: dict[str, Any] | None = None, **overrides: Any) -> GkeClusterArgs:
    base: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "cluster": {"name": "tpu", "masterAuthorizedNetworks": [OPS], **(cluster or {})},
        "slicePools": [{"name": "v6e", "generation": "v6e", "topology": "4x4"}],
    }
    base.update(overrides)
    return plan_stack(parse_stack_config(base), "test").gke


def plan(cluster: dict[str, Any] | None = None, **overrides: Any) -> ClusterPlan:
    return plan_cluster(args(cluster, **overrides))


# ---- network and NAT ----------------------------------------------------------------------------------
def test_new_network_is_created_and_nat_covers_all_its_subnets() -> None:
    p = plan()
    assert p.new_network is not None
    assert (p.new_network.vpc_name, p.new_network.subnet_name) == ("tpu-net", "tpu-subnet")
    assert p.existing_network is None and p.existing_subnetwork is None
    assert p.nat is not None and (p.nat.router_name, p.nat.nat_name) == ("tpu-router", "tpu-nat")
    assert p.nat.subnetworks == () and p.nat.source_ranges == "ALL_SUBNETWORKS_ALL_IP_RANGES"


def test_existing_network_is_joined_and_nat_covers_only_the_clusters_subnet() -> None:
    p = plan(network={"create": False, "name": "shared", "subnetwork": "gke"})
    assert p.new_network is None
    assert p.existing_network == "projects/tpuray-test-proj/global/networks/shared"
    assert p.existing_subnetwork == "projects/tpuray-test-proj/regions/us-east5/subnetworks/gke"
    # a shared network's other subnets keep their own egress
    assert p.nat is not None and p.nat.subnetworks == (p.existing_subnetwork,)
    assert p.nat.source_ranges == "LIST_OF_SUBNETWORKS"


def test_public_nodes_get_no_nat() -> None:
    p = plan({"privateNodes": False})
    assert p.nat is None and not p.private_nodes and not p.private_endpoint


def test_a_network_neither_created_nor_named_is_refused_naming_the_fields() -> None:
    a = args()
    bad = dataclasses.replace(a, network=dataclasses.replace(a.network, create=False, name=None, subnetwork=None))
    with pytest.raises(ValueError, match=r"network\.name and network\.subnetwork"):
        plan_cluster(bad)


# ---- control-plane endpoint ---------------------------------------------------------------------------
def test_public_endpoint_is_limited_to_the_authorized_networks() -> None:
    p = plan()
    assert not p.private_endpoint and not p.dns_endpoint_only
    assert [(n.cidr, n.name) for n in p.authorized_networks] == [("198.51.100.0/24", "ops")]


def test_private_endpoint() -> None:
    p = plan({"controlPlaneEndpoint": "private", "masterAuthorizedNetworks": []})
    assert p.private_nodes and p.private_endpoint and not p.dns_endpoint_only
    assert p.authorized_networks == ()  # no authorized-networks block at all


def test_a_private_endpoint_needs_private_nodes_even_if_the_args_skip_the_config() -> None:
    a = args({"controlPlaneEndpoint": "private"})
    public = dataclasses.replace(a, cluster=dataclasses.replace(a.cluster, private_nodes=False))
    assert not plan_cluster(public).private_endpoint


def test_dns_endpoint_turns_the_ip_endpoints_off() -> None:
    p = plan({"controlPlaneEndpoint": "dns", "masterAuthorizedNetworks": []})
    assert p.dns_endpoint_only and not p.private_endpoint


# ---- identity, maintenance, system pool ---------------------------------------------------------------
def test_node_identity_grants_one_project_role_and_reads_only_the_image_repositories() -> None:
    a = args()
    repos = [ArtifactRepository("img-proj", "us", "ray"), ArtifactRepository("img-proj", "europe", "ray")]
    p = plan_cluster(dataclasses.replace(a, image_repositories=repos))
    assert [(g.key, g.role) for g in p.project_roles] == [
        ("container-defaultnodeserviceaccount", NODE_SERVICE_ACCOUNT_ROLE)
    ]
    assert [(g.key, g.repository) for g in p.image_reads] == [
        ("img-proj-us-ray", repos[0]),
        ("img-proj-europe-ray", repos[1]),
    ]
    assert p.workload_pool == "tpuray-test-proj.svc.id.goog"


def test_maintenance_is_declared_only_when_a_window_or_exclusion_is_set() -> None:
    assert plan().maintenance is None
    window = {"start": "2026-01-03T01:00:00Z", "end": "2026-01-03T07:00:00Z", "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"}
    p = plan(maintenance={"window": window})
    assert p.maintenance is not None and p.maintenance.window is not None
    assert p.maintenance.window.recurrence == "FREQ=WEEKLY;BYDAY=SA,SU"


def test_system_pool_and_labels() -> None:
    p = plan({"systemNodes": 2, "systemMachineType": "n2-standard-8"})
    assert (p.system_pool.name, p.system_pool.machine_type, p.system_pool.nodes) == ("system", "n2-standard-8", 2)
    assert p.system_pool.labels == {"tpuray.io/role": "system"}
    assert p.resource_labels and p.resource_labels == args().resource_labels
    assert plan_cluster(dataclasses.replace(args(), resource_labels={})).resource_labels is None


def test_the_planner_imports_no_pulumi() -> None:
    code = (
        "import sys, tpuray.components.planning.cluster_plan\nprint(any(m.startswith('pulumi') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"
