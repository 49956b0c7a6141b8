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

__all__ = ["NOT_ROLLED_OUT", "RECREATES_NODES", "REPLACES", "replacement_reason"]

from tpuray.components.config.capacity import CAPACITY_CLASSES
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_CLUSTER, RAY_JOB, RESOURCE_POLICY

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
    # Updated in place by the provider, but GKE moves the pool: every VM of the slice is recreated. A node system
    # configuration change (kubeletConfig, linuxNodeConfig) is rolled out by recreating the pool's nodes too
    # (https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config, "Before you begin").
    NODE_POOL: ("nodeLocations", "nodeConfig.imageType", "nodeConfig.kubeletConfig", "nodeConfig.linuxNodeConfig"),
    CLUSTER: ("nodeLocations",),
}


# KubeRay updates these custom resources in place, but what changes is only the object: running pods keep what they
# were started with. KubeRay never recreates a RayCluster's head or worker pods when their template changes
# (maintainer's answer, https://github.com/ray-project/kuberay/issues/3840; spec.upgradeStrategy Recreate, KubeRay
# >= 1.6, which tpuray does not set, would recreate every pod at once), and a RayJob passes no change to its
# cluster nor runs its entrypoint again (https://github.com/ray-project/kuberay/pull/1776). So every spec change
# but the ones below only reaches pods created later.
NOT_ROLLED_OUT: dict[str, tuple[str, ...]] = {RAY_CLUSTER: ("spec",), RAY_JOB: ("spec",)}
_ROLLED_OUT = {
    # scaling: KubeRay creates or deletes pods to match
    RAY_CLUSTER: ("spec.workerGroupSpecs.replicas", "spec.workerGroupSpecs.minReplicas",
                  "spec.workerGroupSpecs.maxReplicas", "spec.workerGroupSpecs.suspend", "spec.suspend"),
    RAY_JOB: ("spec.suspend",),  # Kueue's admission: KubeRay creates or deletes the job's cluster
}  # fmt: skip


def _replacing(type_: str) -> tuple[str, ...]:
    """:data:`REPLACES` of the type, and for a node pool the inputs each capacity type sets that replace it (its
    ``replacing_inputs``: ``queuedProvisioning``, and ``nodeConfig`` fields the rule above already covers), read
    from the registry at call time so a registered capacity type is covered too."""
    rules = REPLACES.get(type_, ())
    if type_ == NODE_POOL:
        rules += tuple(dict.fromkeys(f for c in CAPACITY_CLASSES.values() for f in c.replacing_inputs))
    return rules


def _matches(path: Sequence[str], rule: str) -> bool:
    parts = rule.split(".")
    return list(path[: len(parts)]) == parts


def replacement_reason(type_: str, path: Sequence[str], replace_on_changes: Sequence[str] = ()) -> str | None:
    """``"replace"`` if changing ``path`` replaces the resource, ``"recreates-nodes"`` if it is updated in place
    but recreates the pool's VMs, ``"not-rolled-out"`` if the object is updated but its running pods are not (a
    Ray custom resource), else None. ``replace_on_changes`` is the resource's own option."""
    if any(_matches(path, r) or r == "*" for r in replace_on_changes):
        return "replace"
    for rule in _replacing(type_):
        if _matches(path, rule):
            if rule == "nodeConfig" and len(path) > 1 and path[1] in _NODE_CONFIG_IN_PLACE:
                continue
            return "replace"
    if any(_matches(path, r) for r in RECREATES_NODES.get(type_, ())):
        return "recreates-nodes"
    stale = any(_matches(path, r) for r in NOT_ROLLED_OUT.get(type_, ()))
    if stale and not any(_matches(path, r) for r in _ROLLED_OUT.get(type_, ())):
        return "not-rolled-out"
    return None
