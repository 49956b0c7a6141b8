"""KubeRay ``ray.io/v1`` RayCluster and RayJob manifests for TPU slices, as plain dicts.

Pure Python; imports no Pulumi. ``RayTpuCluster``/``RayTpuJob`` pass these dicts to
``pulumi_kubernetes.apiextensions.CustomResource`` unchanged, and ``tpuray plan`` can write them as YAML.

Every TPU fact of a worker group comes from the slice pool's :class:`~tpuray.components.topology.TpuSlice`:
``numOfHosts`` = hosts per slice, ``google.com/tpu`` = chips per host, the GKE node selectors, Ray's ``TPU``
resource and topology labels, and ``TPU_ACCELERATOR_TYPE``/``TPU_TOPOLOGY`` (the GKE TPU webhook injects
``TPU_WORKER_ID``/``TPU_WORKER_HOSTNAMES``/``TPU_NAME`` but not these two).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tpuray.components.config import Queued, SlicePoolConfig, StackConfig, WorkloadConfig
from tpuray.components.labels import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    POOL_LABEL,
    RAY_ACCELERATOR_TYPE_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_TOPOLOGY_LABEL,
    TPU_RESOURCE,
)
from tpuray.components.node_pool_plan import SYSTEM_POOL, TPU_TAINT
from tpuray.components.topology import TPU_MEGASCALE_PORT, TPU_SLICEBUILDER_PORT, TpuSlice

__all__ = [
    "API_VERSION",
    "CHECKPOINT_VOLUME",
    "RAY_SERVICE_ACCOUNT",
    "WEBHOOK_POD_LABEL",
    "RayClusterParams",
    "RayJobParams",
    "TpuWorkerGroup",
    "check_ray_cluster_spec",
    "check_ray_job",
    "dashboard_service_name",
    "headless_service_name",
    "ray_cluster_manifest",
    "ray_cluster_params",
    "ray_cluster_spec",
    "ray_job_manifest",
    "ray_job_params",
    "stack_manifests",
    "tpu_groups",
    "train_entrypoint",
]

API_VERSION = "ray.io/v1"
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
# Nodes of queued-provisioning pools carry this taint until a ProvisioningRequest claims them (GKE DWS docs).
GKE_QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"

WEBHOOK_POD_LABEL = {"app.kubernetes.io/name": "kuberay"}
"""The GKE TPU webhook only mutates pods with this label (KubeRay sets it too; set here so it is explicit)."""

CHECKPOINT_VOLUME = "checkpoints"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# Ray images run as uid 1000 (ray) in gid 100 (users); without these the FUSE mount is root-owned.
GCSFUSE_MOUNT_OPTIONS = "implicit-dirs,uid=1000,gid=100,file-mode=664,dir-mode=775"

# Ports the TPU runtime listens on in multi-host slices (KubeRay and GKE TPU samples): the slice builder
# and the multislice (megascale/DCN) transport.
TPU_RUNTIME_PORTS = (("tpu-slicebuilder", TPU_SLICEBUILDER_PORT), ("tpu-megascale", TPU_MEGASCALE_PORT))
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("metrics", 8080))
MAX_RAY_CLUSTER_NAME = 63  # KubeRay's MaxRayClusterNameLength


@dataclass(frozen=True)
class TpuWorkerGroup:
    """One KubeRay worker group: the slices of one slice pool (a replica is one whole slice)."""

    name: str
    tpu_slice: TpuSlice
    replicas: int
    min_replicas: int
    max_replicas: int
    queued: bool = False
    """Queued-provisioning pool: tolerate the ``gke-queued`` taint."""

    @classmethod
    def from_pool(cls, pool: SlicePoolConfig) -> TpuWorkerGroup:
        return cls(
            name=pool.name,
            tpu_slice=pool.tpu_slice,
            replicas=pool.slices,
            min_replicas=pool.min_slices,
            max_replicas=pool.slices,
            queued=isinstance(pool.capacity, Queued),
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
    """Kubernetes service account of every Ray pod (bound to a Google service account by Workload Identity)."""
    groups: tuple[TpuWorkerGroup, ...]
    head_cpu: str = "4"
    head_memory: str = "16Gi"
    worker_cpu: str = "8"
    worker_memory: str = "64Gi"
    head_node_pool: str | None = None
    """GKE node pool of the head (the CPU system pool)."""
    checkpoint_bucket: str | None = None
    checkpoint_mount_path: str = "/checkpoints"
    idle_timeout_seconds: int = 600
    labels: Mapping[str, str] = field(default_factory=dict)


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
    ttl_seconds_after_finished: int = 3600
    backoff_limit: int = 0
    active_deadline_seconds: int | None = None
    entrypoint_num_cpus: float = 1.0
    """The head advertises no CPUs, so a driver that asks for one runs on a worker (whose image has tpuray)."""
    submission_mode: Literal["K8sJobMode", "HTTPMode"] = "K8sJobMode"
    labels: Mapping[str, str] = field(default_factory=dict)


# ---- naming -------------------------------------------------------------------------------------------
def dashboard_service_name(cluster: str) -> str:
    """The head service KubeRay creates (``<cluster>-head-svc``): dashboard on 8265, client on 10001."""
    return f"{cluster}-head-svc"


def headless_service_name(cluster: str) -> str:
    """The service KubeRay creates for multi-host groups; the webhook's TPU_WORKER_HOSTNAMES point into it."""
    return f"{cluster}-headless"


# ---- pod pieces ---------------------------------------------------------------------------------------
def _volumes(p: RayClusterParams) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if p.checkpoint_bucket:
        volumes.append(
            {
                "name": CHECKPOINT_VOLUME,
                "csi": {
                    "driver": GCSFUSE_DRIVER,
                    "volumeAttributes": {"bucketName": p.checkpoint_bucket, "mountOptions": GCSFUSE_MOUNT_OPTIONS},
                },
            }
        )
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": p.checkpoint_mount_path})
    return volumes, mounts


def _pod_metadata(p: RayClusterParams, extra_labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {**p.labels, **WEBHOOK_POD_LABEL, **extra_labels}}
    if p.checkpoint_bucket:
        meta["annotations"] = {"gke-gcsfuse/volumes": "true"}  # asks GKE to inject the GCS FUSE sidecar
    return meta


def _ports(pairs: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    return [{"name": n, "containerPort": port} for n, port in pairs]


def head_group_spec(p: RayClusterParams) -> dict[str, Any]:
    volumes, mounts = _volumes(p)
    resources = {"cpu": p.head_cpu, "memory": p.head_memory}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": p.service_account,
        "containers": [
            {
                "name": "ray-head",
                "image": p.head_image,
                "ports": _ports(HEAD_PORTS),
                "resources": {"requests": dict(resources), "limits": dict(resources)},
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if p.head_node_pool:
        pod_spec["nodeSelector"] = {GKE_NODEPOOL_LABEL: p.head_node_pool}
    return {
        # ClusterIP only: the dashboard and client are reached through kubectl port-forward, never exposed.
        "serviceType": "ClusterIP",
        # num-cpus 0 keeps tasks and job drivers off the head, which has no TPU and no tpuray workload image.
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
        "template": {"metadata": _pod_metadata(p, {}), "spec": pod_spec},
    }


def worker_group_spec(p: RayClusterParams, g: TpuWorkerGroup) -> dict[str, Any]:
    s = g.tpu_slice
    volumes, mounts = _volumes(p)
    tpu = str(s.chips_per_host)
    tolerations: list[dict[str, Any]] = [
        {"key": TPU_TAINT.key, "operator": "Equal", "value": TPU_TAINT.value, "effect": TPU_TAINT.k8s_effect}
    ]
    if g.queued:
        tolerations.append({"key": GKE_QUEUED_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    env = [
        {"name": "TPU_ACCELERATOR_TYPE", "value": s.pod_type},
        {"name": "TPU_TOPOLOGY", "value": s.topology},
    ]
    return {
        "groupName": g.name,
        "replicas": g.replicas,
        "minReplicas": g.min_replicas,
        "maxReplicas": g.max_replicas,
        "numOfHosts": s.hosts,
        "rayStartParams": {},
        # Ray node labels (KubeRay >= 1.5 passes them to `ray start --labels`): select a slice shape in Ray code.
        "labels": {
            RAY_TOPOLOGY_LABEL: s.topology,
            RAY_POD_TYPE_LABEL: s.pod_type,
            RAY_ACCELERATOR_TYPE_LABEL: s.ray_accelerator_type,
            POOL_LABEL: g.name,
        },
        "resources": {"TPU": tpu},
        "template": {
            "metadata": _pod_metadata(p, {POOL_LABEL: g.name}),
            "spec": {
                "serviceAccountName": p.service_account,
                "nodeSelector": {
                    GKE_ACCELERATOR_LABEL: s.gke_accelerator,
                    GKE_TOPOLOGY_LABEL: s.topology,
                    POOL_LABEL: g.name,
                },
                "tolerations": tolerations,
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": p.worker_image,
                        "ports": _ports(TPU_RUNTIME_PORTS),
                        "env": env,
                        "resources": {
                            "requests": {"cpu": p.worker_cpu, "memory": p.worker_memory, TPU_RESOURCE: tpu},
                            "limits": {"cpu": p.worker_cpu, "memory": p.worker_memory, TPU_RESOURCE: tpu},
                        },
                        "volumeMounts": mounts,
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
        spec["autoscalerOptions"] = {"upscalingMode": "Default", "idleTimeoutSeconds": p.idle_timeout_seconds}
    return spec


def ray_cluster_manifest(p: RayClusterParams) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayCluster",
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": dict(p.labels)},
        "spec": ray_cluster_spec(p),
    }
    _raise_problems("RayCluster", p.name, check_ray_cluster_spec(manifest["spec"], p.name))
    return manifest


def ray_job_manifest(j: RayJobParams) -> dict[str, Any]:
    if (j.cluster is None) == (j.cluster_selector is None):
        raise ValueError(f"RayJob {j.name}: set exactly one of cluster (its own RayCluster) and cluster_selector")
    spec: dict[str, Any] = {
        "entrypoint": j.entrypoint,
        "submissionMode": j.submission_mode,
        "entrypointNumCpus": j.entrypoint_num_cpus,
    }
    if j.cluster is not None:
        spec["rayClusterSpec"] = ray_cluster_spec(j.cluster)
        spec["shutdownAfterJobFinishes"] = j.shutdown_after_job_finishes
        if j.shutdown_after_job_finishes:
            spec["ttlSecondsAfterFinished"] = j.ttl_seconds_after_finished
        spec["backoffLimit"] = j.backoff_limit
    else:
        spec["clusterSelector"] = {"ray.io/cluster": str(j.cluster_selector)}
        # Rendered only when set, so that check_ray_job reports them: they do not apply to a cluster the job
        # does not own (KubeRay rejects backoffLimit > 0 here).
        if j.shutdown_after_job_finishes:
            spec["shutdownAfterJobFinishes"] = True
        if j.backoff_limit:
            spec["backoffLimit"] = j.backoff_limit
    if j.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = j.active_deadline_seconds
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": j.name, "namespace": j.namespace, "labels": dict(j.labels)},
        "spec": spec,
    }
    _raise_problems("RayJob", j.name, check_ray_job(manifest))
    return manifest


def train_entrypoint(workload: WorkloadConfig, pool: SlicePoolConfig, run_name: str, checkpoint_dir: str | None) -> str:
    """``python -m tpuray.workloads.train`` on ``pool``'s slice shape, data-parallel over its slices.

    Only flags that ``tpuray.workloads.train.build_parser`` accepts (a test parses the result with it).
    """
    flags: list[tuple[str, object | None]] = [
        ("--topology", str(pool.tpu_slice)),
        ("--num-slices", pool.slices),
        ("--steps", workload.steps),
        ("--batch-size-per-chip", workload.batch_size_per_chip),
        ("--seq-len", workload.seq_len),
        ("--learning-rate", workload.learning_rate),
        ("--vocab-size", workload.model.vocab_size),
        ("--layers", workload.model.layers),
        ("--d-model", workload.model.d_model),
        ("--heads", workload.model.heads),
        ("--backend", workload.backend),
        ("--dataset", workload.dataset),
        ("--checkpoint-every", workload.checkpoint_every),
        ("--checkpoint-dir", checkpoint_dir),
        ("--run-name", run_name),
    ]
    args = ["python", "-m", "tpuray.workloads.train"]
    for flag, value in flags:
        if value is not None:
            args += [flag, str(value)]
    return shlex.join(args)


def tpu_groups(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The worker groups of a RayCluster spec that request TPUs."""
    out = []
    for g in spec.get("workerGroupSpecs", []):
        containers = g["template"]["spec"]["containers"]
        if any(TPU_RESOURCE in c.get("resources", {}).get("limits", {}) for c in containers):
            out.append(g)
    return out


# ---- checks (a subset of KubeRay's webhook validation, plus the TPU webhook's slice rule) ---------------
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_problems(where: str, labels: Mapping[str, str]) -> list[str]:
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)))
            or len(name) > 63
            or not (_LABEL_NAME.match(name))
        ):
            problems.append(f"{where}: invalid label key {key!r}")
        if len(value) > 63 or (value and not _LABEL_NAME.match(value)):
            problems.append(f"{where}: invalid value {value!r} for label {key!r}")
    return problems


def check_ray_cluster_spec(spec: Mapping[str, Any], name: str) -> list[str]:
    """Problems KubeRay or the GKE TPU webhook would reject this RayCluster spec for (empty when fine)."""
    problems: list[str] = []
    if len(name) > MAX_RAY_CLUSTER_NAME or not _DNS1035.match(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label of at most {MAX_RAY_CLUSTER_NAME} chars")
    head = spec["headGroupSpec"]
    if not head["template"]["spec"].get("containers"):
        problems.append("headGroupSpec: needs at least one container")
    if head.get("serviceType", "ClusterIP") == "LoadBalancer":
        problems.append("headGroupSpec.serviceType: never LoadBalancer (the dashboard has no authentication)")
    seen: set[str] = set()
    for i, g in enumerate(spec.get("workerGroupSpecs", [])):
        at = f"workerGroupSpecs[{i}]"
        if g["groupName"] in seen:
            problems.append(f"{at}.groupName: duplicate {g['groupName']!r}")
        seen.add(g["groupName"])
        lo, hi, n = g.get("minReplicas", 0), g.get("maxReplicas", 0), g.get("replicas", 0)
        if not 0 <= lo <= hi:
            problems.append(f"{at}: minReplicas {lo} must be between 0 and maxReplicas {hi}")
        if not lo <= n <= hi:
            problems.append(f"{at}.replicas: {n} is outside [{lo}, {hi}]")
        starts = g.get("rayStartParams", {})
        if g.get("resources") and any(k in starts for k in ("num-cpus", "num-gpus", "memory", "resources")):
            problems.append(f"{at}: resources set both in rayStartParams and resources")
        if "labels" in starts:
            problems.append(f"{at}.rayStartParams.labels: use the group's labels field")
        problems += _label_problems(f"{at}.labels", g.get("labels", {}))
    for i, g in enumerate(spec.get("workerGroupSpecs", [])):
        if g not in tpu_groups(spec):
            continue
        problems += _tpu_group_problems(f"workerGroupSpecs[{i}]", g)
    return problems


def _tpu_group_problems(at: str, g: Mapping[str, Any]) -> list[str]:
    """The TPU webhook rejects a group whose numOfHosts * google.com/tpu differs from the topology's chips."""
    pod = g["template"]["spec"]
    selector = pod.get("nodeSelector", {})
    topology, accel = selector.get(GKE_TOPOLOGY_LABEL), selector.get(GKE_ACCELERATOR_LABEL)
    if not topology or not accel:
        return [f"{at}.template.spec.nodeSelector: needs {GKE_ACCELERATOR_LABEL} and {GKE_TOPOLOGY_LABEL}"]
    per_host = int(next(c["resources"]["limits"][TPU_RESOURCE] for c in pod["containers"]))
    hosts = int(g.get("numOfHosts", 1))
    chips = 1
    for d in str(topology).split("x"):
        chips *= int(d)
    problems = []
    if hosts * per_host != chips:
        problems.append(
            f"{at}: numOfHosts {hosts} x {TPU_RESOURCE} {per_host} = {hosts * per_host}, but topology {topology} "
            f"has {chips} chips"
        )
    for c in pod["containers"]:
        res = c.get("resources", {})
        if res.get("requests", {}).get(TPU_RESOURCE) != res.get("limits", {}).get(TPU_RESOURCE):
            problems.append(f"{at}.containers[{c['name']}]: {TPU_RESOURCE} requests and limits differ")
    if not any(t.get("key") == TPU_TAINT.key for t in pod.get("tolerations", [])):
        problems.append(f"{at}.template.spec.tolerations: missing the {TPU_TAINT.key} toleration")
    return problems


def check_ray_job(manifest: Mapping[str, Any]) -> list[str]:
    """Problems KubeRay's RayJob validation would report (empty when fine)."""
    spec = manifest["spec"]
    problems: list[str] = []
    selector = spec.get("clusterSelector") or {}
    if not selector and "rayClusterSpec" not in spec:
        problems.append("spec: one of rayClusterSpec or clusterSelector must be set")
    if selector:
        if not selector.get("ray.io/cluster"):
            problems.append("spec.clusterSelector: ray.io/cluster must name a RayCluster")
        if spec.get("backoffLimit", 0) > 0:
            problems.append("spec.backoffLimit: incompatible with clusterSelector")
        if spec.get("shutdownAfterJobFinishes"):
            problems.append("spec.shutdownAfterJobFinishes: the selected cluster is not the job's to shut down")
    if not spec.get("shutdownAfterJobFinishes") and spec.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append("spec.ttlSecondsAfterFinished: needs shutdownAfterJobFinishes")
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        problems.append("spec.activeDeadlineSeconds: must be positive")
    if spec.get("backoffLimit", 0) < 0:
        problems.append("spec.backoffLimit: must not be negative")
    if not spec.get("entrypoint"):
        problems.append("spec.entrypoint: empty")
    name = manifest["metadata"]["name"]
    if "rayClusterSpec" in spec:
        problems += [f"rayClusterSpec: {p}" for p in check_ray_cluster_spec(spec["rayClusterSpec"], name)]
    elif len(name) > MAX_RAY_CLUSTER_NAME or not _DNS1035.match(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    return problems


def _raise_problems(kind: str, name: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"{kind} {name}: " + "; ".join(problems))


# ---- a whole stack --------------------------------------------------------------------------------------
RAY_SERVICE_ACCOUNT = "ray"
"""Kubernetes service account of the Ray pods (bound to the Ray Google service account)."""


def ray_cluster_params(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> RayClusterParams:
    """The stack's RayCluster: a CPU head on the system pool and one TPU worker group per slice pool."""
    r = cfg.ray
    return RayClusterParams(
        name=cfg.cluster.name,
        namespace=r.namespace,
        ray_version=r.version,
        head_image=r.image,
        worker_image=r.worker_image or r.image,
        service_account=RAY_SERVICE_ACCOUNT,
        groups=tuple(TpuWorkerGroup.from_pool(p) for p in cfg.slice_pools),
        head_cpu=r.head_cpu,
        head_memory=r.head_memory,
        worker_cpu=r.worker_cpu,
        worker_memory=r.worker_memory,
        head_node_pool=SYSTEM_POOL,
        checkpoint_bucket=cfg.checkpoint_bucket,
        checkpoint_mount_path=cfg.checkpoints.mount_path,
        labels=dict(labels or {}),
    )


def ray_job_params(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> RayJobParams:
    """The stack's training job, submitted to the stack's running RayCluster (it does not own the TPUs)."""
    name = f"{cfg.cluster.name}-train"
    checkpoint_dir = f"{cfg.checkpoints.mount_path.rstrip('/')}/{name}"
    return RayJobParams(
        name=name,
        namespace=cfg.ray.namespace,
        entrypoint=train_entrypoint(cfg.workload, cfg.workload_pool(), name, checkpoint_dir),
        cluster_selector=cfg.cluster.name,
        shutdown_after_job_finishes=False,
        ttl_seconds_after_finished=0,
        backoff_limit=0,
        labels=dict(labels or {}),
    )


def stack_manifests(cfg: StackConfig, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every KubeRay manifest the stack declares, in declaration order (RayCluster, then RayJob)."""
    return [ray_cluster_manifest(ray_cluster_params(cfg, labels)), ray_job_manifest(ray_job_params(cfg, labels))]
