"""Which input changes make the provider replace a GKE node pool or cluster, as data.

Source: the ``ForceNew`` flags of the Terraform Google provider's ``resource_container_node_pool.go``,
``node_config.go`` and ``resource_container_cluster.go``, which pulumi-gcp 10.x wraps (the Python SDK carries
no schema). Where provider versions disagree we lean to warning: a false alarm costs a reviewer a glance, a
missed replacement costs a running TPU slice.

A path is the input path with list indices dropped, e.g. ``placementPolicy.tpuTopology``. A rule matches a
changed path when it is a prefix of it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RECREATES_NODES", "REPLACES", "replacement_reason"]

from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RESOURCE_POLICY

# node_config fields the provider updates in place; every other node_config field forces a new pool/cluster.
_NODE_CONFIG_IN_PLACE = frozenset(
    {
        "labels",
        "resourceLabels",
        "resourceManagerTags",
        "tags",
        "workloadMetadataConfig",
        "kubeletConfig",
        "linuxNodeConfig",
        "imageType",
        "loggingVariant",
    }
)

REPLACES: dict[str, tuple[str, ...]] = {
    NODE_POOL: (
        "name",
        "namePrefix",
        "project",
        "cluster",
        "location",
        "placementPolicy",  # the whole block, incl. type, policyName and tpuTopology
        "queuedProvisioning",
        "initialNodeCount",
        "maxPodsPerNode",
        "networkConfig.createPodRange",
        "networkConfig.podRange",
        "networkConfig.podIpv4CidrBlock",
        "networkConfig.additionalNodeNetworkConfigs",
        "networkConfig.additionalPodNetworkConfigs",
        "networkConfig.podCidrOverprovisionConfig",
        "networkConfig.subnetwork",
        "nodeConfig",  # except _NODE_CONFIG_IN_PLACE
    ),
    CLUSTER: (
        "name",
        "project",
        "location",
        "network",
        "subnetwork",
        "networkingMode",
        "datapathProvider",
        "clusterIpv4Cidr",
        "defaultMaxPodsPerNode",
        "description",
        "enableAutopilot",
        "enableKubernetesAlpha",
        "enableTpu",
        "initialNodeCount",
        "ipAllocationPolicy",
        "privateClusterConfig.enablePrivateNodes",
        "privateClusterConfig.masterIpv4CidrBlock",
        "privateClusterConfig.privateEndpointSubnetwork",
        "confidentialNodes",
        "nodeConfig",  # the default pool's; except _NODE_CONFIG_IN_PLACE
    ),
    # A workload policy (tpu7x placement) is immutable, and the pools naming it follow it.
    RESOURCE_POLICY: ("name", "project", "region", "workloadPolicy", "groupPlacementPolicy"),
}

RECREATES_NODES: dict[str, tuple[str, ...]] = {
    # Updated in place by the provider, but GKE moves the pool: every VM of the slice is recreated.
    NODE_POOL: ("nodeLocations", "nodeConfig.imageType"),
    CLUSTER: ("nodeLocations",),
}


def _matches(path: Sequence[str], rule: str) -> bool:
    parts = rule.split(".")
    return list(path[: len(parts)]) == parts


def replacement_reason(type_: str, path: Sequence[str], replace_on_changes: Sequence[str] = ()) -> str | None:
    """``"replace"`` if changing ``path`` replaces the resource, ``"recreates-nodes"`` if it is updated in place
    but recreates the pool's VMs, else None. ``replace_on_changes`` is the resource's own option."""
    if any(_matches(path, r) or r == "*" for r in replace_on_changes):
        return "replace"
    for rule in REPLACES.get(type_, ()):
        if _matches(path, rule):
            if rule == "nodeConfig" and len(path) > 1 and path[1] in _NODE_CONFIG_IN_PLACE:
                continue
            return "replace"
    if any(_matches(path, r) for r in RECREATES_NODES.get(type_, ())):
        return "recreates-nodes"
    return None
