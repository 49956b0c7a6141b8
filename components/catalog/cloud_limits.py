"""Limits of GKE, Compute Engine and Kueue that a stack's values must meet, as data and pure checks.

Pure Python; imports no Pulumi. Each check returns a problem (a sentence naming the valid form and its public source)
or None; the config model calls them and puts the field in front.
"""

from __future__ import annotations

import calendar
from datetime import datetime

from packaging.version import Version

__all__ = [
    "ACCELERATOR_MACHINE_SERIES",
    "CPU_MACHINE_SERIES",
    "GKE_MAX_NODES_PER_CLUSTER",
    "KUEUE_API_FIRST_CHART",
    "KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP",
    "KUEUE_RENDERED_API",
    "RAY_OPERATOR_FIX",
    "cluster_size_problem",
    "env_token_problem",
    "exclusion_span_problem",
    "kueue_chart_problem",
    "kueue_flavors_problem",
    "ray_addon_problem",
    "system_machine_type_problem",
]

# ---- the system pool's machine type -------------------------------------------------------------------------
# https://cloud.google.com/compute/docs/machine-resource ("Machine families resource and comparison guide"): the
# machine series of Compute Engine, by family; the Compute API's Commitment.Type enum names the same series
# (GENERAL_PURPOSE_E2, _N2, _N2D, _N4, _C4, _T2D, COMPUTE_OPTIMIZED_C2D, _C3, _C3D, _H3, MEMORY_OPTIMIZED_M3, _X4,
# STORAGE_OPTIMIZED_Z3, ...). A machine type is <series>-<type>-<vCPUs> (or a shared-core f1-micro, g1-small,
# e2-micro/small/medium), so its series is the part before the first '-'; N1's custom types alone are named
# custom-<vCPUs>-<MiB> (https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type).
CPU_MACHINE_SERIES: frozenset[str] = frozenset(
    {
        # general-purpose
        "e2", "n1", "n2", "n2d", "n4", "n4a", "n4d", "c3", "c3d", "c4", "c4a", "c4d", "t2a", "t2d", "f1", "g1",
        # compute-optimized
        "c2", "c2d", "h3", "h4d",
        # memory-optimized
        "m1", "m2", "m3", "m4", "x4",
        # storage-optimized
        "z3",
    }
)  # fmt: skip
"""Series whose machines are CPU VMs: the ones the system pool (the Ray head, Kueue, the operators) can run on."""
ACCELERATOR_MACHINE_SERIES: frozenset[str] = frozenset(
    {"a2", "a3", "a4", "a4x", "g2", "g4", "ct4p", "ct5lp", "ct5p", "ct6e", "tpu7x"}
)
"""Accelerator-optimized series (GPU VMs and the TPU VMs GKE names ct*/tpu7x): never the CPU system pool."""


def system_machine_type_problem(machine_type: str) -> str | None:
    """Why ``machine_type`` cannot serve the CPU system pool, or None."""
    series = machine_type.split("-", 1)[0]
    if series in CPU_MACHINE_SERIES or series == "custom":
        return None
    if series in ACCELERATOR_MACHINE_SERIES:
        return (
            f"{machine_type} is an accelerator (GPU or TPU) machine type; the system pool runs the Ray head and the "
            "controllers on CPU, e.g. e2-standard-8 or n2-standard-8"
        )
    return (
        f"{machine_type}: no Compute Engine machine series {series!r} "
        f"(https://cloud.google.com/compute/docs/machine-resource); CPU series: {', '.join(sorted(CPU_MACHINE_SERIES))}"
    )


# ---- the Kueue chart ------------------------------------------------------------------------------------------
KUEUE_RENDERED_API = "kueue.x-k8s.io/v1beta2"
"""The API version of every Kueue object tpuray renders (``planning.kueue.API_VERSION``; a test keeps them equal)."""
KUEUE_API_FIRST_CHART: dict[str, str] = {
    # https://github.com/kubernetes-sigs/kueue/releases/tag/v0.15.0 (release issue kubernetes-sigs/kueue#7626, PR
    # #7304 "v1beta2: Expose the v1beta2 API for CRD serving"): v0.15.0 is the first release that serves v1beta2.
    "kueue.x-k8s.io/v1beta2": "0.15.0",
    "kueue.x-k8s.io/v1beta1": "0.1.0",
}
"""API version -> the first Kueue release (Helm chart version) whose CRDs serve it."""


def kueue_chart_problem(chart_version: str, api_version: str = KUEUE_RENDERED_API) -> str | None:
    """Why the Kueue chart ``chart_version`` cannot take the objects tpuray renders, or None."""
    first = KUEUE_API_FIRST_CHART[api_version]
    if Version(chart_version) >= Version(first):
        return None
    return (
        f"Kueue {chart_version} does not serve {api_version}, the API of the ResourceFlavors, ClusterQueue and "
        f"LocalQueue tpuray renders: use chart {first} or later "
        f"(https://github.com/kubernetes-sigs/kueue/releases/tag/v{first})"
    )


# ---- the ClusterQueue's lists ---------------------------------------------------------------------------------
# Kueue v0.19.2's ClusterQueue CRD (config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml, v1beta1 and
# v1beta2 alike) bounds its lists: spec.resourceGroups maxItems 16, and in each group coveredResources maxItems 64,
# flavors maxItems 64, each flavor's resources maxItems 64; admissionChecksStrategy.admissionChecks maxItems 64. The
# API server refuses a longer list, so the ClusterQueue fails at `pulumi up`, after the node pools exist.
# tpuray renders one resource group covering cpu, memory and google.com/tpu (3 of 64), with one flavor for the
# system pool and one per slice pool, and at most one admission check per slice pool: the flavors are the one list
# a stack can overflow (a stack within it has at most 63 admission checks). A test reads the CRD for this number.
KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP = 64
"""``spec.resourceGroups[].flavors`` maxItems of Kueue's ClusterQueue CRD (v0.19.2)."""


def kueue_flavors_problem(slice_pools: int) -> str | None:
    """Why a Kueue stack of ``slice_pools`` pools cannot have its ClusterQueue (one flavor each, plus the system
    pool's, in one resource group), or None."""
    flavors = slice_pools + 1
    if flavors <= KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP:
        return None
    return (
        f"{slice_pools} slice pools with kueue.enabled make {flavors} ResourceFlavors in the ClusterQueue's one "
        f"resource group (one per pool and the system pool's); Kueue's CRD allows at most "
        f"{KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP} (ClusterQueue spec.resourceGroups[].flavors maxItems): use at most "
        f"{KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP - 1} slice pools in a Kueue stack, or split it into two stacks"
    )


# ---- cluster size ---------------------------------------------------------------------------------------------
# https://cloud.google.com/kubernetes-engine/quotas ("Limits per cluster"): a GKE Standard cluster has at most
# 15,000 nodes (GKE 1.18 and later; more than 5,000 needs a cluster size quota lifted by support). No quota request
# goes past 15,000, so a stack whose node pools can grow beyond it is refused whatever the project.
GKE_MAX_NODES_PER_CLUSTER = 15_000
GKE_QUOTAS_SOURCE = "https://cloud.google.com/kubernetes-engine/quotas"


def cluster_size_problem(max_nodes: int) -> str | None:
    """Why a cluster that can grow to ``max_nodes`` nodes exceeds GKE's per-cluster limit, or None."""
    if max_nodes <= GKE_MAX_NODES_PER_CLUSTER:
        return None
    return (
        f"the stack can grow to {max_nodes:,} nodes (the system pool plus every slice pool's slices x hosts at "
        f"their maximum); a GKE Standard cluster holds at most {GKE_MAX_NODES_PER_CLUSTER:,} nodes "
        f"({GKE_QUOTAS_SOURCE}): lower slicePools[].slices or split the pools over two stacks"
    )


# ---- maintenance exclusions -------------------------------------------------------------------------------------
# https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions : a NO_UPGRADES
# exclusion lasts at most 30 days (config.py checks it); a NO_MINOR_UPGRADES or NO_MINOR_OR_NODE_UPGRADES exclusion
# may last until the end of support of the cluster's minor version, and no longer. Which minor version the cluster
# runs when the exclusion starts is only known at apply time, so the static bound is the longest support any minor
# version gets (https://cloud.google.com/kubernetes-engine/versioning): 14 months of standard support, and up to 24
# months in the EXTENDED channel (extended support). An exclusion longer than that is refused by GKE whatever the
# version; a shorter one may still outlive a given version's support, which `tpuray doctor` can only tell live.
STANDARD_SUPPORT_MONTHS = 14
EXTENDED_SUPPORT_MONTHS = 24


def _add_months(t: datetime, months: int) -> datetime:
    month = t.month - 1 + months
    year, month = t.year + month // 12, month % 12 + 1
    return t.replace(year=year, month=month, day=min(t.day, calendar.monthrange(year, month)[1]))


def exclusion_span_problem(scope: str, start: datetime, end: datetime, release_channel: str) -> str | None:
    """Why a ``scope`` exclusion from ``start`` to ``end`` is longer than GKE allows in ``release_channel``."""
    if scope not in ("NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"):
        return None
    months = EXTENDED_SUPPORT_MONTHS if release_channel == "EXTENDED" else STANDARD_SUPPORT_MONTHS
    if end <= _add_months(start, months):
        return None
    kind = "extended support (EXTENDED channel)" if months == EXTENDED_SUPPORT_MONTHS else "standard support"
    return (
        f"a {scope} exclusion ends at the latest when the cluster's minor version leaves support, and no minor "
        f"version has more than {months} months of {kind} (https://cloud.google.com/kubernetes-engine/versioning): "
        f"end it by {_add_months(start, months):%Y-%m-%dT%H:%M:%SZ}"
    )


# ---- token auth on the GKE Ray add-on ---------------------------------------------------------------------------
# Ray's token auth can reach the KubeRay operator two ways, and on the GKE Ray add-on neither is
# safe for a RayJob:
# - KubeRay sends the token on its own dashboard calls (the RayJob's status, GetJobInfo) only when the RayCluster has
#   spec.authOptions.mode: token (KubeRay v1.7 ray-operator/controllers/ray/utils/util.go
#   GetRayDashboardClientFunc). With the token in env variables only, those calls get 401 and the RayJob ends Failed
#   although Ray runs.
# - authOptions needs KubeRay >= 1.6: an older CRD prunes the field and the cluster runs with no auth at all
#   (https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html). GKE publishes no KubeRay
#   version for its Ray Operator add-on: its release notes and the add-on pages
#   (https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/how-to/enable-ray-on-gke) name a minimum GKE
#   version, never the KubeRay it runs, so no GKE version guarantees >= 1.6.
# Which one holds cannot be known statically, so the add-on is refused for a RayJob (every tpuray stack renders
# one) and for authOptions; the KubeRay Helm chart, whose version the stack pins, does both.
RAY_OPERATOR_FIX = "set ray.operator: helm (the default): KubeRay ray.helmChartVersion with authOptions"
"""How to fix every stack the add-on rule refuses."""
_STATUS_NEEDS_AUTH_OPTIONS = (
    "KubeRay sends the Ray token on its RayJob status calls only with authOptions (env variables only: 401, the "
    "RayJob ends Failed)"
)


def ray_addon_problem(operator: str) -> str | None:
    """Why the GKE Ray add-on (``operator == "addon"``) cannot run a tpuray stack, or None: every stack runs a RayJob
    (KubeRay polls its status from the Ray dashboard, with the token only through ``authOptions``)."""
    if operator != "addon":
        return None
    return (
        f"the GKE Ray add-on cannot run a RayJob: {_STATUS_NEEDS_AUTH_OPTIONS}; an add-on KubeRay < 1.6 "
        f"(GKE does not publish its version) drops authOptions and runs Ray without auth: {RAY_OPERATOR_FIX}"
    )


def env_token_problem(*, auth_options: bool) -> str | None:
    """Why the stack's RayJob cannot run with the Ray token in env variables only (``auth_options`` off), or None."""
    if auth_options:
        return None
    return f"{_STATUS_NEEDS_AUTH_OPTIONS}: leave ray.authOptions unset (on) with ray.operator: helm"
