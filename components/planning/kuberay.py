"""KubeRay ``ray.io/v1`` RayCluster and RayJob manifests for TPU slices, as plain dicts.

Pure Python; imports no Pulumi. ``RayTpuCluster``/``RayTpuJob`` pass these dicts to
``pulumi_kubernetes.apiextensions.CustomResource`` unchanged, and ``tpuray plan`` can write them as YAML.

Every TPU fact of a worker group comes from the slice pool's :class:`~tpuray.components.catalog.topology.TpuSlice`:
``numOfHosts`` = hosts per slice, ``google.com/tpu`` = chips per host, the GKE node selectors, Ray's ``TPU``
resource and topology labels. The worker container sets no TPU environment: the GKE TPU device plugin sets
``TPU_ACCELERATOR_TYPE`` and ``TPU_TOPOLOGY`` in every container that requests ``google.com/tpu`` (spelling tpu7x
``tpu7x-<cores>``, where Ray writes ``v7x-<cores>``), and the TPU webhook injects ``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES`` and ``TPU_NAME``; a value set here would conflict with theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.container_paths import SHM_PATH
from tpuray.components.catalog.names import (
    GKE_NODEPOOL_LABEL,
    HEAD_PORTS,
    MAX_RUN_ENV,
    POOL_LABEL,
    RAY_ACCELERATOR_TYPE_LABEL,
    RAY_CLUSTER_LABEL,
    RAY_CLUSTER_POD_LABEL,
    RAY_NODE_PORTS,
    RAY_POD_TYPE_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_TPU_RESOURCE,
    RAY_TPU_RESOURCE_PER_CHIP_ENV,
    RAY_TRAIN_CALLBACKS_ENV,
    RAY_WORKER_PORT_RANGE,
    SUBMITTER_ROLE_LABEL,
    TORCH_TPU_ENV_CALLBACK,
    TPU_RESOURCE,
    WEBHOOK_POD_LABEL,
    WORKER_PORTS,
)
from tpuray.components.catalog.runtimes import RUNTIMES, RuntimeBackend
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import DEFAULT_JOB_TTL_SECONDS, SlicePoolConfig
from tpuray.components.config.startup import FuseMountConfig
from tpuray.components.planning.drain import DrainPlan, drain_plan, pre_stop_hook
from tpuray.components.planning.kuberay_checks import check_ray_cluster_spec, check_ray_job, raise_problems
from tpuray.components.planning.pod_security import (
    container_security_context,
    pod_security_context,
)
from tpuray.components.planning.ray_auth import RayAuth
from tpuray.components.planning.scheduling import PoolScheduling
from tpuray.components.planning.startup import CHECKPOINT_VOLUME, StartupPlan, fuse_volume, startup_pod_pieces

__all__ = [
    "API_VERSION",
    "CHECKPOINT_VOLUME",
    "SUBMITTER_REQUESTS",
    "RayClusterParams",
    "RayJobParams",
    "TpuWorkerGroup",
    "dashboard_service_name",
    "ray_cluster_manifest",
    "ray_cluster_spec",
    "ray_job_manifest",
    "ray_start_ports",
    "submitter_pod_template",
]

API_VERSION = "ray.io/v1"


@dataclass(frozen=True)
class TpuWorkerGroup:
    """One KubeRay worker group: the slices of one slice pool (a replica is one whole slice)."""

    name: str
    tpu_slice: TpuSlice
    replicas: int
    min_replicas: int
    max_replicas: int
    scheduling: PoolScheduling
    """The pool's node selector and tolerations."""
    drain: DrainPlan
    """The grace period and drain deadline of its pods (from the capacity type, planning.drain)."""
    max_run_seconds: int | None = None
    """The VMs' lifetime (the capacity's ``max_run_seconds``): passed to the workers as ``TPURAY_MAX_RUN_SECONDS``."""

    @classmethod
    def from_pool(cls, pool: SlicePoolConfig, scheduling: PoolScheduling) -> TpuWorkerGroup:
        """The group of ``pool``, autoscaling from its kept slices to all of them, on its ``scheduling``."""
        return cls(
            name=pool.name,
            tpu_slice=pool.tpu_slice,
            replicas=pool.slices,
            min_replicas=pool.min_slices,
            max_replicas=pool.slices,
            scheduling=scheduling,
            drain=drain_plan(pool.capacity),
            max_run_seconds=pool.capacity.max_run_seconds,
        )


@dataclass(frozen=True)
class RayClusterParams:
    """Everything a TPU RayCluster spec is rendered from; names are plain strings so the manifest is data."""

    name: str
    namespace: str
    ray_version: str
    head_image: str
    worker_image: str
    service_account: str
    """Kubernetes service account of the head (bound to a Google service account by Workload Identity)."""
    worker_service_account: str
    """Kubernetes service account of the TPU workers: the same Google service account, no Kubernetes Role."""
    groups: tuple[TpuWorkerGroup, ...]
    head_cpu: str
    head_memory: str
    worker_cpu: str
    worker_memory: str
    checkpoint_mount_path: str
    """Where the checkpoint bucket is mounted in every Ray pod (used only with ``checkpoint_bucket``)."""
    head_node_pool: str | None = None
    """GKE node pool of the head (the CPU system pool)."""
    checkpoint_bucket: str | None = None
    idle_timeout_seconds: int = 600
    labels: Mapping[str, str] = field(default_factory=dict)
    auth: RayAuth | None = None
    """Ray token authentication (every container, or KubeRay's authOptions)."""
    backend: RuntimeBackend = "xla"
    """The TPU runtime the workers run (``workload.backend``): ``torch_tpu`` runs one Ray worker per device."""
    startup: StartupPlan | None = None
    """The compile cache, its mount and the checkpoint mount's GCS FUSE caches (planning.startup)."""


@dataclass(frozen=True)
class RayJobParams:
    """A RayJob: on its own cluster (``cluster`` set) or on a running RayCluster (``cluster_selector`` set)."""

    name: str
    namespace: str
    entrypoint: str
    cluster: RayClusterParams | None = None
    cluster_selector: str | None = None
    """Name of a running RayCluster (``ray.io/cluster`` selector)."""
    shutdown_after_job_finishes: bool = True
    ttl_seconds_after_finished: int = DEFAULT_JOB_TTL_SECONDS
    backoff_limit: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    suspend: bool = False
    """Created suspended: Kueue admits it (unsuspends it) when the whole cluster fits its quota."""
    submitter_image: str | None = None
    """Image of the K8sJobMode submitter pod (the head's); set, tpuray renders a hardened submitter template."""
    auth: RayAuth | None = None
    """The target cluster's token: the submitter's ``ray job submit`` sends it."""


# ---- naming -------------------------------------------------------------------------------------------
def dashboard_service_name(cluster: str) -> str:
    """The head service KubeRay creates (``<cluster>-head-svc``): dashboard on 8265, client on 10001."""
    return f"{cluster}-head-svc"


# ---- pod pieces ---------------------------------------------------------------------------------------
def _volumes(p: RayClusterParams) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": SHM_PATH}]
    if p.checkpoint_bucket:
        m = p.startup.checkpoint_mount if p.startup else FuseMountConfig()
        volumes.append(fuse_volume(CHECKPOINT_VOLUME, p.checkpoint_bucket, m))
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": p.checkpoint_mount_path})
        # the compile cache's own bucket and the sidecar's file cache: GCS FUSE volumes too (the same annotation)
        _, extra_volumes, extra_mounts = startup_pod_pieces(p.startup)
        volumes, mounts = volumes + extra_volumes, mounts + extra_mounts
    return volumes, mounts


def _pod_metadata(p: RayClusterParams, extra_labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {**p.labels, **WEBHOOK_POD_LABEL, RAY_CLUSTER_POD_LABEL: p.name, **extra_labels}}
    if p.checkpoint_bucket:
        meta["annotations"] = {"gke-gcsfuse/volumes": "true"}  # asks GKE to inject the GCS FUSE sidecar
    return meta


def _ports(pairs: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    return [{"name": n, "containerPort": port} for n, port in pairs]


def ray_start_ports() -> dict[str, str]:
    """``rayStartParams`` pinning every port Ray would otherwise pick at random (the NetworkPolicy allows these)."""
    lo, hi = RAY_WORKER_PORT_RANGE
    return {flag: str(port) for flag, port in RAY_NODE_PORTS} | {"min-worker-port": str(lo), "max-worker-port": str(hi)}


def _auth_env(p: RayClusterParams) -> list[dict[str, Any]]:
    return p.auth.container_env() if p.auth else []


def head_group_spec(p: RayClusterParams) -> dict[str, Any]:
    volumes, mounts = _volumes(p)
    resources = {"cpu": p.head_cpu, "memory": p.head_memory}
    # the head runs drivers too (a job submitted without entrypoint resources): the same TorchTPU env as the workers
    env = [*_auth_env(p), *torch_tpu_env(p)]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": p.service_account,
        "securityContext": pod_security_context(),
        "containers": [
            {
                "name": "ray-head",
                "image": p.head_image,
                "ports": _ports(HEAD_PORTS),
                "resources": {"requests": dict(resources), "limits": dict(resources)},
                "volumeMounts": mounts,
                "securityContext": container_security_context(),
                **({"env": env} if env else {}),
            }
        ],
        "volumes": volumes,
    }
    if p.head_node_pool:
        pod_spec["nodeSelector"] = {GKE_NODEPOOL_LABEL: p.head_node_pool}
    return {
        # ClusterIP only: the dashboard and client are reached through kubectl port-forward, never exposed.
        "serviceType": "ClusterIP",
        # num-cpus 0 keeps tasks, and the drivers of jobs that ask for a CPU (the stack's RayJob), off the head,
        # which has no TPU. A job submitted without entrypoint resources still runs its driver here: Ray's job
        # manager pins it to the head (ray/dashboard/modules/job/job_manager.py, _get_label_selector, Ray 2.60).
        # dashboard-host 0.0.0.0 so the submitter and port-forward reach it; token auth and the namespace's
        # NetworkPolicy decide who may (planning/network_policy.py).
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", **ray_start_ports()},
        "template": {"metadata": _pod_metadata(p, {}), "spec": pod_spec},
    }


def torch_tpu_env(p: RayClusterParams) -> list[dict[str, Any]]:
    """What every Ray pod of a ``torch_tpu`` stack needs for Ray's own TorchTPU path, in scripts that import
    nothing of tpuray: the callback that sets each worker's TorchTPU env (``tpuray.workloads.torch_tpu``), and, where
    a chip is two devices (tpu7x), Ray counting ``TPU`` per device, so that
    ``ScalingConfig(use_tpu=True, ..., resources_per_worker={"TPU": 1})`` means one worker per device.

    Both are read in the job's driver and the Ray Train controller beside it, wherever the driver runs: Ray Train
    V2 builds its callbacks from ``RAY_TRAIN_CALLBACKS`` in the process that calls ``fit()``
    (``_create_default_callbacks`` in ray/train/v2/api/data_parallel_trainer.py, Ray 2.60), and the controller,
    pinned to the driver's node, sizes the slice reservation by ``RAY_TPU_RESOURCE_PER_CHIP``
    (``SlicePlacementGroup`` in ray/util/tpu.py). A driver lands on a TPU worker when its job asks for a CPU (the
    head advertises none: the stack's RayJob), and on the head when it asks for nothing (Ray's job manager pins it
    there), so the head carries them too, and runs the worker image (``torch_tpu_head_image_rules`` in the config
    rules)."""
    if p.backend != "torch_tpu":
        return []
    env = [{"name": RAY_TRAIN_CALLBACKS_ENV, "value": TORCH_TPU_ENV_CALLBACK}]
    per_chip = {RUNTIMES[p.backend].ray_tpu_per_chip(g.tpu_slice) for g in p.groups}
    if per_chip != {1}:
        # one value per process in Ray 2.60: the config refuses a torch_tpu stack mixing 1- and 2-device chips
        env.append({"name": RAY_TPU_RESOURCE_PER_CHIP_ENV, "value": str(max(per_chip))})
    return env


def ray_tpu_resources(p: RayClusterParams, s: TpuSlice) -> int:
    """The ``TPU`` resources Ray advertises on one host of ``s``: devices under TorchTPU, chips otherwise (Kueue
    quota, ``google.com/tpu`` and cost stay in chips)."""
    return RUNTIMES[p.backend].ray_tpu_per_host(s)


def worker_group_spec(p: RayClusterParams, g: TpuWorkerGroup) -> dict[str, Any]:
    s = g.tpu_slice
    volumes, mounts = _volumes(p)
    tpu = str(s.chips_per_host)
    drain = g.drain
    env = [*_auth_env(p), *torch_tpu_env(p)]
    if g.max_run_seconds is not None:
        env = [*env, {"name": MAX_RUN_ENV, "value": str(g.max_run_seconds)}]
    env = [*env, *startup_pod_pieces(p.startup, worker=True)[0]]  # the compile cache's root and key image
    return {
        "groupName": g.name,
        "replicas": g.replicas,
        "minReplicas": g.min_replicas,
        "maxReplicas": g.max_replicas,
        "numOfHosts": s.hosts,
        "rayStartParams": ray_start_ports(),
        # Ray node labels (KubeRay >= 1.5 passes them to `ray start --labels`): select a slice shape in Ray code.
        "labels": {
            RAY_TOPOLOGY_LABEL: s.topology,
            RAY_POD_TYPE_LABEL: s.pod_type,
            RAY_ACCELERATOR_TYPE_LABEL: s.ray_accelerator_type,
            POOL_LABEL: g.name,
        },
        "resources": {RAY_TPU_RESOURCE: str(ray_tpu_resources(p, s))},
        "template": {
            "metadata": _pod_metadata(p, {POOL_LABEL: g.name}),
            "spec": {
                # Workers run user code: their own service account and no API token in the pod. Workload
                # Identity needs none (GKE's metadata server identifies the pod and mints the token itself:
                # https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity), nor does the GCS
                # FUSE driver, which gets its token from the kubelet.
                "serviceAccountName": p.worker_service_account,
                "automountServiceAccountToken": False,
                "securityContext": pod_security_context(),
                "nodeSelector": g.scheduling.pod_node_selector(),
                "tolerations": g.scheduling.k8s_tolerations(),
                "terminationGracePeriodSeconds": drain.grace_seconds,
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": p.worker_image,
                        "ports": _ports(WORKER_PORTS),
                        **({"env": env} if env else {}),
                        "resources": {
                            "requests": {"cpu": p.worker_cpu, "memory": p.worker_memory, TPU_RESOURCE: tpu},
                            "limits": {"cpu": p.worker_cpu, "memory": p.worker_memory, TPU_RESOURCE: tpu},
                        },
                        "volumeMounts": mounts,
                        "lifecycle": pre_stop_hook(drain),
                        "securityContext": container_security_context(),
                    }
                ],
                "volumes": volumes,
            },
        },
    }


def ray_cluster_spec(p: RayClusterParams) -> dict[str, Any]:
    """The RayCluster ``spec``: a CPU head and one TPU worker group per slice pool."""
    autoscale = any(g.min_replicas < g.max_replicas for g in p.groups)
    spec: dict[str, Any] = {
        "rayVersion": p.ray_version,
        "enableInTreeAutoscaling": autoscale,
        "headGroupSpec": head_group_spec(p),
        "workerGroupSpecs": [worker_group_spec(p, g) for g in p.groups],
    }
    if autoscale:
        spec["autoscalerOptions"] = {
            "upscalingMode": "Default",
            "idleTimeoutSeconds": p.idle_timeout_seconds,
            "securityContext": container_security_context(),  # the autoscaler sidecar of the head pod
        }
        if _auth_env(p):  # the autoscaler talks to the GCS, which then wants the token too
            spec["autoscalerOptions"]["env"] = _auth_env(p)
    if p.auth and p.auth.spec_options():
        spec["authOptions"] = p.auth.spec_options()
    return spec


def ray_cluster_manifest(p: RayClusterParams) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayCluster",
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": dict(p.labels)},
        "spec": ray_cluster_spec(p),
    }
    raise_problems("RayCluster", p.name, check_ray_cluster_spec(manifest["spec"], p.name))
    return manifest


SUBMITTER_REQUESTS: Mapping[str, str] = {"cpu": "500m", "memory": "512Mi"}
"""Requests of the submitter pod tpuray renders. Kueue sizes the submitter pod set from ``submitterPodTemplate``
when the RayJob carries one (kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go), so the system
flavor's quota (planning/kueue.py) is derived from these, not from KubeRay's 200Mi default."""


def submitter_pod_template(j: RayJobParams) -> dict[str, Any]:
    """The K8sJobMode submitter pod: KubeRay fills in the ``ray job submit`` command and its own variables; the
    template makes the pod meet ``restricted`` (KubeRay's default submitter sets no securityContext), carries the
    token, and the label the NetworkPolicy lets reach the head's job API."""
    container: dict[str, Any] = {
        "name": "ray-job-submitter",
        "image": j.submitter_image,
        "resources": {"requests": dict(SUBMITTER_REQUESTS), "limits": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": container_security_context(),
    }
    if j.auth:
        container["env"] = j.auth.env()
    return {
        "metadata": {"labels": {**j.labels, **SUBMITTER_ROLE_LABEL}},
        # `ray job submit` talks to the dashboard over HTTP only: no Kubernetes API token in the pod
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(),
            "containers": [container],
        },
    }


SUBMISSION_MODE = "K8sJobMode"
"""KubeRay runs ``ray job submit`` in a submitter pod, whose template tpuray hardens (:func:`submitter_pod_template`)
when the job names an image."""
ENTRYPOINT_NUM_CPUS = 1.0
"""KubeRay's submitter passes it as ``ray job submit --entrypoint-num-cpus`` (``BuildJobSubmitCommand`` in
ray-operator/controllers/ray/common/job.go, KubeRay v1.7.0); the head advertises no CPUs, so the driver runs on a
TPU worker pod, beside the chips, instead of on the head, where a job asking for nothing would run it."""


def ray_job_manifest(j: RayJobParams) -> dict[str, Any]:
    if (j.cluster is None) == (j.cluster_selector is None):
        raise ValueError(f"RayJob {j.name}: set exactly one of cluster (its own RayCluster) and cluster_selector")
    spec: dict[str, Any] = {
        "entrypoint": j.entrypoint,
        "submissionMode": SUBMISSION_MODE,
        "entrypointNumCpus": ENTRYPOINT_NUM_CPUS,
    }
    if j.cluster is not None:
        spec["rayClusterSpec"] = ray_cluster_spec(j.cluster)
        spec["shutdownAfterJobFinishes"] = j.shutdown_after_job_finishes
        if j.shutdown_after_job_finishes:
            spec["ttlSecondsAfterFinished"] = j.ttl_seconds_after_finished
        spec["backoffLimit"] = j.backoff_limit
    else:
        spec["clusterSelector"] = {RAY_CLUSTER_LABEL: str(j.cluster_selector)}
        # Rendered only when set, so that check_ray_job reports them: they do not apply to a cluster the job
        # does not own (KubeRay rejects backoffLimit > 0 here).
        if j.shutdown_after_job_finishes:
            spec["shutdownAfterJobFinishes"] = True
        if j.backoff_limit:
            spec["backoffLimit"] = j.backoff_limit
    if j.suspend:
        spec["suspend"] = True
    if j.submitter_image:
        spec["submitterPodTemplate"] = submitter_pod_template(j)
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": j.name, "namespace": j.namespace, "labels": dict(j.labels)},
        "spec": spec,
    }
    raise_problems("RayJob", j.name, check_ray_job(manifest))
    return manifest
