"""The rules that span sections of a stack."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from packaging.version import Version

from tpuray.components.catalog.cloud_limits import cluster_size_problem, exclusion_span_problem, kueue_flavors_problem
from tpuray.components.catalog.gke_versions import gke_alias_for, gke_version_meets
from tpuray.components.catalog.images import image_backend, parse_image
from tpuray.components.catalog.names import SYSTEM_POOL, TPU_WEBHOOK_SOURCE
from tpuray.components.catalog.pins import WEBHOOK_GENERATION_FLOORS, WEBHOOK_IRONWOOD_CHART
from tpuray.components.catalog.resource_names import derived_bucket_name
from tpuray.components.catalog.runtimes import RUNTIMES
from tpuray.components.catalog.tpu_locations import location_problems
from tpuray.components.config.base import (
    ConfigError,
    Problem,
)
from tpuray.components.config.cluster import (
    ClusterConfig,
    is_production_stack,
)
from tpuray.components.config.maintenance import (
    utc_instant,
)
from tpuray.components.config.node_fit import head_fit_problems
from tpuray.components.config.serving import MAX_RAY_SERVICE_NAME
from tpuray.components.config.slice_pool import SlicePoolConfig, required_gke_version, slice_shape
from tpuray.components.config.stack_view import StackView, view_of_values
from tpuray.components.config.startup_rules import startup_rules
from tpuray.components.config.value_types import bucket_name_problem
from tpuray.components.config.workload import (
    TRAIN_BYTES_PER_PARAMETER,
    require_entrypoint_sharding,
)


def not_a_pool(name: str, view: StackView) -> str:
    """The message for a setting that names no pool of the stack: the pools it may name instead."""
    choices = view.pool_choices
    return f"{name!r} is not a slice pool" + (f"; valid choices: {', '.join(choices)}" if choices else "")


def control_plane_rules(view: StackView) -> list[Problem]:
    """A production control plane is private, DNS-only, or public to a non-empty list of networks.

    GKE hardening guide (https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster) and CIS GKE
    5.6.3/5.6.4; the policy rule ``gke-control-plane-not-public`` checks the same on the declared cluster.
    """
    cluster, stack = view.cluster, view.stack
    if cluster is None or not is_production_stack(stack) or cluster.control_plane_endpoint != "public":
        return []
    if cluster.master_authorized_networks:
        return []
    return [
        Problem(
            "cluster.masterAuthorizedNetworks",
            f"[gke-control-plane-not-public] production stack {stack!r} has a public control plane open to every "
            "address: list the networks allowed to reach it (never 0.0.0.0/0), or set "
            "cluster.controlPlaneEndpoint: private or dns",
        )
    ]


def monitoring_rules(view: StackView) -> list[Problem]:
    """Settings that name slice pools name pools of this stack, and an excluded pool can be told from a watched one."""
    found: list[Problem] = []
    monitoring, pools = view.monitoring, view.pools
    if monitoring is None:
        return found
    names = list(dict.fromkeys(view.pool_names))
    excluded = monitoring.idle_alert.exclude_pools
    if monitoring.enabled and monitoring.idle_alert.enabled and names and set(names) <= set(excluded):
        # An enabled alert that watches no pool would never fire, and look like one that watches them all.
        found.append(
            Problem(
                "monitoring.idleAlert.excludePools",
                f"excludes every slice pool ({', '.join(names)}): the alert would watch nothing; leave at least one "
                "pool out of the list, or set monitoring.idleAlert.enabled: false",
            )
        )
    watched = {slice_shape(p.tpu_slice): p.name for _, p in pools if p.name not in excluded}
    for i, name in enumerate(excluded):
        at = f"monitoring.idleAlert.excludePools[{i}]"
        pool = next((p for _, p in pools if p.name == name), None)
        if pool is None:
            if names and name not in names:
                found.append(Problem(at, not_a_pool(name, view)))
            continue
        other = watched.get(slice_shape(pool.tpu_slice))
        if other is not None:
            found.append(
                Problem(
                    at,
                    f"{name!r} has the slice shape of watched pool {other!r} ({pool.tpu_slice.generation} "
                    f"{pool.tpu_slice.topology}); TPU metrics carry the shape, not the pool, so the alert cannot "
                    f"leave one out: exclude both or neither",
                )
            )
    return found


KUEUE_RESERVED_GROUP = "head"
"""Kueue names the head's pod set ``head``; a worker group of that name is rejected (Kueue raycluster webhook)."""


def capacity_rules(view: StackView) -> list[Problem]:
    """Rules tying capacity types to Kueue, the job mode and maintenance."""
    found: list[Problem] = []
    pools, cluster, ray, kueue, maintenance = view.pools, view.cluster, view.ray, view.kueue, view.maintenance
    queued = [(i, p) for i, p in pools if p.capacity.needs_kueue]
    if kueue is not None and not kueue.enabled:
        for i, p in queued:
            found.append(
                Problem(
                    f"slicePools[{i}].capacity",
                    f"queued pool {p.name!r} is only reachable through Kueue (its ProvisioningRequest admission "
                    "check is what makes GKE create the nodes): set kueue.enabled: true",
                )
            )
        if ray is not None and ray.job_mode == "ephemeral":
            found.append(
                Problem(
                    "kueue.enabled",
                    "ray.jobMode ephemeral submits a suspended RayJob that only Kueue admits: set kueue.enabled: true",
                )
            )
    if ray is not None and ray.job_mode == "shared" and pools:
        target = view.workload_pool
        job_pool = next((p for _, p in pools if target is None or p.name == target), None)
        if job_pool is not None and not job_pool.capacity.in_shared_cluster:
            found.append(
                Problem(
                    "ray.jobMode",
                    f"the training job runs on queued pool {job_pool.name!r}, which only a Kueue-admitted RayJob "
                    "with its own cluster reaches: set ray.jobMode: ephemeral",
                )
            )
    if kueue is not None and kueue.enabled:
        if problem := kueue_flavors_problem(len(view.pool_names)):  # the CRD's list bound (cloud_limits)
            found.append(Problem("slicePools", problem))
        for i, p in pools:
            if p.name == KUEUE_RESERVED_GROUP:
                found.append(Problem(f"slicePools[{i}].name", "'head' is Kueue's name for the Ray head's pod set"))
    if cluster is not None:
        enrolled = cluster.release_channel != "UNSPECIFIED"
        for i, p in pools:
            if not p.auto_upgrade and enrolled:
                found.append(
                    Problem(
                        f"slicePools[{i}].autoUpgrade",
                        f"GKE keeps node auto-upgrade on in release channel {cluster.release_channel}: set "
                        "cluster.releaseChannel: UNSPECIFIED, or use maintenance exclusions instead",
                    )
                )
        for j, e in enumerate(maintenance.exclusions if maintenance is not None else []):
            start, end = utc_instant(e.start), utc_instant(e.end)
            if span := exclusion_span_problem(e.scope, start, end, cluster.release_channel):
                found.append(Problem(f"maintenance.exclusions[{j}].end", span))  # cloud_limits cites the spans
            if e.scope != "NO_UPGRADES" and not enrolled:
                found.append(
                    Problem(
                        f"maintenance.exclusions[{j}].scope",
                        f"{e.scope} needs a release channel; a cluster outside one can only use NO_UPGRADES",
                    )
                )
    return found


def max_nodes(cluster: ClusterConfig, pools: Iterable[SlicePoolConfig]) -> int:
    """The most nodes the cluster can grow to: the system pool, and every slice pool at its maximum size.

    A regional cluster's system pool has systemNodes per zone (three zones in most regions).
    """
    return cluster.system_nodes * (3 if cluster.regional else 1) + sum(p.slices * p.tpu_slice.hosts for p in pools)


def _gke_needs(pools: Sequence[tuple[int, SlicePoolConfig]], version: str) -> str:
    """What needs a GKE version above ``version``, pool by pool: its TPU generation or its capacity's feature."""
    needs = []
    for i, p in pools:
        if not gke_version_meets(version, p.tpu_slice.min_gke_version):
            needs.append(f"slicePools[{i}]: TPU {p.tpu_slice.generation} from {p.tpu_slice.min_gke_version}")
        m = p.capacity.gke_minimum
        if m is not None and not gke_version_meets(version, m.version):
            needs.append(f"slicePools[{i}].capacity: {m.what} from {m.version}")
    return "; ".join(needs)


def pool_rules(view: StackView) -> list[Problem]:
    """Zones, node pool names, versions and address room of the slice pools."""
    region, zone, zone_invalid, cluster, pools = view.region, view.zone, view.zone_invalid, view.cluster, view.pools
    network, project, checkpoints = view.network, view.project, view.checkpoints
    found: list[Problem] = []
    if region is not None and zone is not None and not zone.startswith(region + "-"):
        found.append(Problem("zone", f"{zone!r} is not in region {region!r}"))
    # A region or zone without TPUs, a pool in a zone without its generation (tpu_locations cites the page).
    found += [
        Problem(f, m) for f, m in location_problems(region, zone, [(i, p.name, p.generation, p.zone) for i, p in pools])
    ]
    if cluster is not None and not cluster.regional and zone is None and not zone_invalid:
        found.append(Problem("zone", "a zonal cluster (cluster.regional: false) needs a zone"))
    seen: set[str] = set()
    # Every GKE node pool name the stack derives, with the pool that owns it; the system pool is the cluster's.
    node_pools: dict[str, str] = {SYSTEM_POOL: "the system node pool"}
    for i, pool in pools:
        at = f"slicePools[{i}]"
        if pool.name in seen:
            found.append(Problem(f"{at}.name", f"duplicate pool name {pool.name!r}"))
        seen.add(pool.name)
        for node_pool in pool.node_pool_names:
            # https://github.com/pulumi/pulumi-gcp/issues/1510 quotes GKE's rule: [a-z](?:[-a-z0-9]{0,38}[a-z0-9])?
            if not _NODE_POOL_NAME.fullmatch(node_pool):
                found.append(Problem(f"{at}.name", f"node pool name {node_pool!r} is longer than 40 characters"))
            me = f"slicePools[{i}] ({pool.name})"
            owner = node_pools.setdefault(node_pool, me)
            if owner != me and not owner.endswith(f"({pool.name})"):  # same pool name: reported above
                found.append(Problem(f"{at}.name", f"node pool name {node_pool!r} is also used by {owner}"))
        if region is not None and pool.zone is not None and not pool.zone.startswith(region + "-"):
            found.append(Problem(f"{at}.zone", f"{pool.zone!r} is not in region {region!r}"))
        if cluster is not None and not cluster.regional and zone is not None and pool.zone not in (None, zone):
            found.append(
                Problem(
                    f"{at}.zone",
                    f"{pool.zone!r}: the zonal cluster lives in {zone!r} and its node pools too; set "
                    "cluster.regional: true to spread pools over the region's zones",
                )
            )
        if pool.tpu_slice.placement != "none" and (pool.zone or zone) is None and not zone_invalid:
            found.append(
                Problem(
                    f"{at}.zone",
                    f"a multi-host {pool.tpu_slice.topology} slice needs compact placement in a single zone: set "
                    "the pool's zone or the stack's zone",
                )
            )
        elif (pool.zone or zone) is None and not zone_invalid:
            # Without node locations a pool spans every zone of a regional cluster, and GKE applies the autoscaling
            # limits per zone: up to three times the slices, in zones that may not have the TPU at all.
            found.append(
                Problem(
                    f"{at}.zone",
                    f"TPU {pool.tpu_slice.generation} slices are zonal: set the pool's zone or the stack's zone",
                )
            )
    if pools and cluster is not None and cluster.min_master_version is not None:
        need = required_gke_version(p for _, p in pools)
        if not gke_version_meets(cluster.min_master_version, need):  # an alias (1.33) counts as its newest patch
            found.append(
                Problem(
                    "cluster.minMasterVersion",
                    f"{cluster.min_master_version} is older than {need}, which this stack's pools need "
                    f"({_gke_needs(pools, cluster.min_master_version)}): give {gke_alias_for(need)} or a later alias, "
                    "or leave it unset for the release channel's default",
                )
            )
    nodes = max_nodes(cluster, [p for _, p in pools]) if cluster is not None else None
    if nodes is not None and (problem := cluster_size_problem(nodes)):  # cloud_limits cites GKE's limit
        found.append(Problem("slicePools", problem))
    if network is not None and network.create and cluster is not None and nodes is not None:
        # Each node takes a /24 of the Pod range at GKE's default of 110 Pods per node
        # (https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr).
        room = ipaddress.ip_network(network.pods_cidr).num_addresses // 256
        if nodes > room:
            found.append(
                Problem(
                    "network.podsCidr",
                    f"{network.pods_cidr} holds {room} nodes (a /24 each), but the stack can grow to {nodes} nodes",
                )
            )
    if project is not None and cluster is not None and checkpoints is not None and checkpoints.bucket is None:
        problem = bucket_name_problem(derived_bucket_name(project, cluster.name))
        if problem:
            found.append(Problem("checkpoints.bucket", f"the default name does not work ({problem}); set one"))
    workload_pool, pool_names = view.workload_pool, view.pool_names
    if workload_pool is not None and pool_names and workload_pool not in pool_names:
        found.append(
            Problem(
                "workload.slicePool",
                not_a_pool(workload_pool, view),
            )
        )
    return found


def backend_rules(view: StackView) -> list[Problem]:
    """What the stack's TPU runtime (``workload.backend``) needs of its pools and its worker image."""
    if view.workload is None:
        return []
    backend = view.workload.backend
    found: list[Problem] = []
    runtime = RUNTIMES[backend]
    # one number per process in Ray 2.60 (RAY_TPU_RESOURCE_PER_CHIP): the stack's pools must agree on it
    per_chip = {runtime.ray_tpu_per_chip(p.tpu_slice): p for _, p in view.pools}
    if len(per_chip) > 1:
        gens = ", ".join(f"{p.name} ({p.generation}: {n} per chip)" for n, p in sorted(per_chip.items()))
        found.append(
            Problem(
                "workload.backend",
                f"torch_tpu runs one Ray worker per device, and Ray 2.60 counts TPU devices per chip with one "
                f"number per process (RAY_TPU_RESOURCE_PER_CHIP), but these pools differ: {gens}; put tpu7x pools "
                "in a stack of their own, or use backend xla",
            )
        )
    image = view.ray.worker_image if view.ray is not None else None
    tagged = image_backend(image) if image is not None else None
    if tagged is not None and tagged != backend:
        found.append(
            Problem(
                "ray.workerImage",
                f"{image} is a {tagged} worker image (its tag ends in "
                f"{RUNTIMES[tagged].tag_suffix}) but workload.backend is "
                f"{backend}: use the workloads/Dockerfile target of {backend} (tags ending in "
                f"{runtime.tag_suffix})",
            )
        )
    return found


def _trained_pool(view: StackView) -> SlicePoolConfig | None:
    """The pool the training job runs on (``workload.slicePool``, else the first pool), if it is valid on its own
    (when it is not, its own error says why)."""
    workload, pools = view.workload, view.pools
    if workload is None or not pools:
        return None
    if workload.slice_pool is None:
        return pools[0][1] if pools[0][0] == 0 else None
    return next((p for _, p in pools if p.name == workload.slice_pool), None)


def model_fit_rules(view: StackView) -> list[Problem]:
    """The model's training state, sharded as ``workload.parallelism`` says, fits each chip of the pool the job
    runs on, and one copy of the model's ``fsdp * tensor`` devices tiles a slice (the data axis takes the rest).
    Per chip: the per-device share (``training_state_bytes_per_chip``) times the mesh devices on a chip (two per
    tpu7x chip under TorchTPU, each holding its own share), against the chip's HBM."""
    workload, pool = view.workload, _trained_pool(view)
    if workload is None or pool is None:
        return []
    s, par = pool.tpu_slice, workload.parallelism
    devices = s.chips * workload.mesh_devices_per_chip(s)
    unit = "devices" if devices != s.chips else "chips"
    if devices % par.degree:
        return [
            Problem(
                "workload.parallelism",
                f"fsdp x tensor = {par.fsdp} x {par.tensor} = {par.degree} does not divide the {devices} {unit} of "
                f"a {s.generation} {s.topology} slice (pool {pool.name!r}); valid: fsdp x tensor a divisor of "
                f"{devices}, the data axis takes the rest",
            )
        ]
    need, chip = workload.training_state_bytes_per_chip(s), s.hbm_bytes_per_chip
    if need <= chip:
        return []
    sharding = (
        "replicated on every chip (data parallel)"
        if par.degree == 1
        else f"sharded fsdp={par.fsdp} x tensor={par.tensor}, the parameters no axis splits replicated"
    )
    return [
        Problem(
            "workload.model",
            f"does not fit: needs {need / 2**30:,.1f} GiB per chip, a {s.generation} chip has {chip / 2**30:g} GiB "
            f"({workload.model_parameters:,} parameters x {TRAIN_BYTES_PER_PARAMETER} bytes: fp32 weights, "
            f"gradients and AdamW's two moments, {sharding}, in pool {pool.name!r}, before activations): shard it "
            "(workload.parallelism.fsdp, e.g. fsdp: <chips of the slice>), make the model smaller (layers, dModel, "
            "vocabSize) or pick a generation with more HBM",
        )
    ]


def builtin_job_rules(view: StackView) -> list[Problem]:
    """What the stack's own training RayJob, the built-in GPT job, refuses when it starts on the cluster, refused
    here by the very function its CLI calls (``tpuray.workloads.gpt.cli``: its sharding on the ``--topology`` and
    ``--num-slices`` the RayJob passes, ``planning.entrypoint``), so the two never disagree;
    nothing when ``workload.entrypoint`` says the job is the user's own. A ``workload.parallelism`` that
    :func:`model_fit_rules` already refuses is not refused twice."""
    workload, pool = view.workload, _trained_pool(view)
    if workload is None or pool is None or workload.entrypoint is not None:
        return []
    if any(p.path == "workload.parallelism" for p in model_fit_rules(view)):
        return []
    par = workload.parallelism
    try:
        require_entrypoint_sharding(workload.backend, pool.tpu_slice, pool.slices, par.fsdp, par.tensor)
    except ConfigError as e:
        return [
            Problem(
                p.path, f"{p.message} (or, if the training job is your own, set workload.entrypoint to its command)"
            )
            for p in e.problems
        ]
    return []


def namespace_rules(view: StackView) -> list[Problem]:
    """Kueue and Ray each run in a namespace of their own."""
    if view.kueue is None or view.ray is None or view.kueue.namespace != view.ray.namespace:
        return []
    return [
        Problem(
            "kueue.namespace",
            f"{view.kueue.namespace!r} is Ray's namespace: Kueue's controller and webhook need their own "
            "(e.g. kueue-system)",
        )
    ]


def head_fit_rules(view: StackView) -> list[Problem]:
    """The Ray head fits a node of the system pool (``config.node_fit``): ray.headCpu, ray.headMemory against
    cluster.systemMachineType."""
    if view.ray is None or view.cluster is None:
        return []
    return head_fit_problems(view.ray, view.cluster, [p for _, p in view.pools], view.startup)


def serving_rules(view: StackView) -> list[Problem]:
    """The Serve application runs on a slice pool of this stack that training does not use, and that pool holds
    its most slices. A queued pool cannot serve: only a Kueue-admitted RayJob makes GKE create its nodes."""
    serving, pools = view.serving, view.pools
    if serving is None:
        return []
    found: list[Problem] = []
    if view.cluster is not None and len(name := serving.service_name(view.cluster.name)) > MAX_RAY_SERVICE_NAME:
        found.append(
            Problem(
                "serving.name",
                f"the RayService {name!r} is {len(name)} characters and KubeRay takes at most "
                f"{MAX_RAY_SERVICE_NAME}: shorten serving.name (or cluster.name)",
            )
        )
    names = list(dict.fromkeys(view.pool_names))
    pool = next((p for _, p in pools if p.name == serving.slice_pool), None)
    if pool is None:
        if names and serving.slice_pool not in names:
            found.append(
                Problem(
                    "serving.slicePool",
                    not_a_pool(serving.slice_pool, view),
                )
            )
        return found  # a pool named but invalid on its own: its own error says why
    trained = view.workload_pool if view.workload_pool is not None else (names[0] if names else None)
    if view.workload is not None and trained == pool.name:
        others = [n for n in names if n != pool.name]
        found.append(
            Problem(
                "serving.slicePool",
                f"{pool.name!r} is the training workload's pool (workload.slicePool, else the first pool): serving "
                "and training do not share a slice pool; "
                + (f"choose another: {', '.join(others)}" if others else "add a slice pool for serving"),
            )
        )
    if serving.highest > pool.slices:
        found.append(
            Problem(
                "serving.maxSlices" if serving.max_slices is not None else "serving.replicas",
                f"{serving.highest} slices, but pool {pool.name!r} holds {pool.slices} "
                f"({pool.tpu_slice.pod_type} slices): give at most {pool.slices}, or raise slicePools.slices",
            )
        )
    if not pool.capacity.in_shared_cluster:
        found.append(
            Problem(
                "serving.slicePool",
                f"{pool.name!r} is a queued pool, whose nodes GKE creates only for a Kueue-admitted RayJob: a "
                "RayService there would wait forever; serve from an on-demand, spot, reservation or flex-start pool",
            )
        )
    return found


_NODE_POOL_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")


def torch_tpu_head_image_rules(view: StackView) -> list[Problem]:
    """A ``torch_tpu`` stack's head runs the worker image.

    A job submitted without entrypoint resources (``ray job submit -- python train.py``) runs its driver on the head:
    Ray's job manager pins it there (``_get_label_selector`` in ray/dashboard/modules/job/job_manager.py, Ray 2.60).
    Ray Train builds its callbacks in the driver, tpuray's TorchTPU env callback among them
    (``_initialize_env_callbacks``, ray/train/v2/_internal/callbacks/env_callback.py), and runs them in its controller
    on the same node; the driver's ``TorchTrainer`` imports torch. So the head needs tpuray, torch and the same
    tpuray as the workers, which is the worker image, whose runtime ``backend_rules`` checks.
    """
    if view.workload is None or view.ray is None or view.workload.backend != "torch_tpu":
        return []
    image, worker = view.ray.image, view.ray.worker_image
    why = "a torch_tpu job submitted without entrypoint resources runs its driver, which loads tpuray and torch, there"
    if worker is not None and worker != image:
        return [
            Problem(
                "ray.image",
                f"the head runs {image}, not the worker image: {why}: set ray.image to {worker}, drop ray.workerImage",
            )
        ]
    # No worker image: head and TPU workers run ray.image, which must then be torch_tpu's image. A tag says which
    # runtime it holds (catalog/images.py); a digest alone does not, and the doctor reads the image's label instead.
    tagged = image_backend(image)
    if worker is None and tagged != "torch_tpu" and not parse_image(image).pinned:
        torch_tpu = RUNTIMES["torch_tpu"]
        holds = f"a {tagged} image" if tagged else "no torch_tpu image (its tag does not say so)"
        return [
            Problem(
                "ray.image",
                f"workload.backend torch_tpu: the head and the TPU workers run ray.image, {image}, {holds}; the "
                f"workers need torch and torch_tpu, and {why}: build the {torch_tpu.image_target} target of "
                f"workloads/Dockerfile and set ray.image to it (a tag ending in {torch_tpu.tag_suffix}, or a digest)",
            )
        ]
    return []


# ---- what the pinned components need of each other (catalog/pins.py) -------------------------------------------
def tpu_webhook_pin_rules(view: StackView) -> list[Problem]:
    """A multi-host tpu7x pool needs a webhook chart that serves Ironwood, when the stack installs the webhook."""
    ray = view.ray
    if ray is None or ray.tpu_webhook.enabled is False:  # not installed by the stack: the doctor checks what runs
        return []
    ironwood = sorted(p.name for _, p in view.pools if p.generation == "tpu7x" and p.tpu_slice.multi_host)
    chart = ray.tpu_webhook.chart_version
    if not ironwood or Version(chart) >= Version(WEBHOOK_IRONWOOD_CHART):
        return []
    return [
        Problem(
            "ray.tpuWebhook.chartVersion",
            f"chart {chart} has no tpu7x support, and multi-host tpu7x pool(s) {', '.join(ironwood)} need it: the "
            f"first chart whose webhook serves Ironwood is {WEBHOOK_IRONWOOD_CHART} (webhook "
            f"{WEBHOOK_GENERATION_FLOORS['tpu7x']}; {TPU_WEBHOOK_SOURCE}); use {WEBHOOK_IRONWOOD_CHART} or later",
        )
    ]


def queued_job_slices_rules(view: StackView) -> list[Problem]:
    """The training job's queued pool holds one slice: one ProvisioningRequest is only known to fill one.

    The job's RayJob asks for all of its pool's slices at once, and Kueue v0.19.2 asks one ProvisioningRequest for a
    workload per admission check, one pod set per worker group, its count every pod of every slice
    (``pkg/controller/admissionchecks/provisioning/controller.go``, ``syncOwnedProvisionRequest``). Each slice of a
    pool is a node pool of its own. GKE's queued-provisioning page is written for GPUs
    (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest); its TPU tutorial asks for one v6e
    4x4 slice from one 4-node pool per RayJob (https://cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws),
    the ``queued-provisioning.gke.io`` class is GKE's own (the open cluster autoscaler's classes are only
    ``check-capacity`` and ``best-effort-atomic-scale-up``: kubernetes/autoscaler
    ``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go``), and xpk
    turns queued provisioning on only for single-slice GPU jobs (AI-Hypercomputer/xpk ``src/xpk/utils/kueue.py``,
    ``is_queued_cluster``; TPU flex-start goes without it). No public source shows GKE filling one request across
    several multi-host slices, so tpuray does not ask it to.
    """
    found: list[Problem] = []
    target = view.workload_pool
    for i, p in view.pools:
        if (target is None or p.name == target) and p.capacity.queued_provisioning and p.slices > 1:
            hosts = p.tpu_slice.hosts
            found.append(
                Problem(
                    f"slicePools[{i}].slices",
                    f"the training job on queued pool {p.name!r} would ask one ProvisioningRequest for all its "
                    f"{p.slices} slices ({p.slices * hosts} hosts in one pod set), and GKE documents queued "
                    "provisioning for TPUs one slice per request; no public source shows it filling one request "
                    "across several slices: set slices: 1, or capacity type flex-start (no ProvisioningRequest)",
                )
            )
        if target is None:
            break  # the job runs on the first pool
    return found


# ---- elastic training (workload.elastic) ------------------------------------------------------------------------
def _job_pool(view: StackView) -> tuple[int, SlicePoolConfig] | None:
    """The training job's pool with its index: ``workload.slicePool``, else the first pool (None where that pool
    is not valid on its own: its own error says why)."""
    target = view.workload_pool
    for i, p in view.pools:
        if (target is None and i == 0) or p.name == target:
            return i, p
    return None


def elastic_rules(view: StackView) -> list[Problem]:
    """``workload.elastic``'s bounds are whole slices of the job's pool, and a slice the job loses can come back.

    Ray Train 2.60 resizes a TPU job by whole slices only (``ScalingConfig._validate_tpu_config`` refuses bounds
    that are not multiples of a slice's workers; ``ElasticScalingPolicy._get_strict_tpu_worker_count`` counts intact
    slices), so a one-slice pool has nothing to shrink to. A capacity type whose lost slice cannot return
    (``CapacityType.lost_slice_returns``) would leave the job smaller for the rest of its run.
    """
    elastic = view.workload.elastic if view.workload is not None else None
    found = _job_pool(view)
    if elastic is None or found is None:
        return []
    i, pool = found
    at, lo, hi = "workload.elastic", *elastic.bounds(pool.slices)
    if pool.slices == 1:
        return [
            Problem(
                at,
                f"pool {pool.name!r} holds one slice: elastic training grows and shrinks by whole slices and needs a "
                f"pool of at least two; remove workload.elastic, or raise slicePools[{i}].slices",
            )
        ]
    problems: list[Problem] = []
    if not pool.tpu_slice.multi_host:
        # "Multislice only supports multi-host TPU slice node pools"
        # (https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice); tpu_scaling_config refuses it too
        problems.append(
            Problem(
                at,
                f"pool {pool.name!r}'s {pool.tpu_slice} is a single-host slice, and GKE Multislice joins only "
                "multi-host slices into one job: elastic training needs a multi-host topology; remove "
                "workload.elastic, or use a multi-host topology",
            )
        )
    if hi > pool.slices:
        problems.append(
            Problem(
                f"{at}.maxSlices",
                f"{hi} exceeds pool {pool.name!r}'s {pool.slices} slices; valid: 1 to {pool.slices}, or unset",
            )
        )
    elif lo > pool.slices:
        problems.append(
            Problem(
                f"{at}.minSlices",
                f"{lo} exceeds pool {pool.name!r}'s {pool.slices} slices; valid: 1 to {pool.slices - 1}",
            )
        )
    elif lo == hi:
        problems.append(
            Problem(
                f"{at}.minSlices",
                f"{lo} equals the most slices ({hi}): the job would never resize; valid: 1 to {hi - 1}, or remove "
                "workload.elastic for a fixed size",
            )
        )
    cap = pool.capacity
    if not cap.lost_slice_returns:
        problems.append(
            Problem(
                at,
                f"pool {pool.name!r} is {cap.type} capacity, where a lost slice cannot come back: "
                f"{cap.lost_slice_return}; train elastically on on-demand, spot, reservation or flex-start capacity, "
                "or remove workload.elastic",
            )
        )
    return problems


RULES: tuple[Callable[[StackView], list[Problem]], ...] = (
    pool_rules,
    control_plane_rules,
    capacity_rules,
    monitoring_rules,
    model_fit_rules,
    builtin_job_rules,
    namespace_rules,
    backend_rules,
    head_fit_rules,
    serving_rules,
    torch_tpu_head_image_rules,
    tpu_webhook_pin_rules,
    queued_job_slices_rules,
    elastic_rules,
    startup_rules,  # last, as the stack model ran them: they read the worker image, GKE version and mounts
)
"""Every cross-section rule, each taking the one :class:`StackView`, in the order their problems are listed."""


def stack_rules(view: StackView) -> list[Problem]:
    """Every cross-section problem of ``view``, as :class:`Problem` values (one validation path: the model's
    validator and :func:`rules_of_valid_parts` both call this)."""
    return [p for rule in RULES for p in rule(view)]


def rules_of_valid_parts(values: Mapping[str, Any], stack: str | None = None) -> list[Problem]:
    """The cross-section rules run over whatever parts of an invalid stack are valid on their own.

    pydantic skips a model's own after-validator once any field fails, so without this a type error in one
    section would hide a zone or version problem in another until the first was fixed.
    """
    return stack_rules(view_of_values(values, stack))
