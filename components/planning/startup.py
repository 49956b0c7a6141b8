"""The start-up pieces of the Ray pods and TPU node pools: where the compile cache lives, how the worker image
reaches a new host, and the GCS FUSE caches of the checkpoint mount.

Pure Python; imports no Pulumi. :func:`startup_plan` reads the stack's ``startup`` section once;
:mod:`~tpuray.components.planning.kuberay` and :mod:`~tpuray.components.planning.node_pools` add what it says to
their manifests through the functions here, and ``tpuray plan`` prints :func:`first_step_waits` per pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuray.components.catalog.compile_cache_key import (
    CACHE_DIR_ENV,
    CACHE_URL_ENV,
    RUNTIME_FROM_IMAGE,
    WORKER_IMAGE_ENV,
    CompileCacheKey,
)
from tpuray.components.config.startup import (
    GCSFUSE_PROFILES,
    GCSFUSE_PROFILES_MIN_GKE,
    STREAMING_NODE_IMAGE,
    DataMountConfig,
    FuseMountConfig,
    ImagePullConfig,
)
from tpuray.components.planning.gcsfuse import GCSFUSE_DRIVER, GCSFUSE_MOUNT_OPTIONS

if TYPE_CHECKING:
    from tpuray.components.config import SlicePoolConfig, StackConfig

__all__ = [
    "CACHE_VOLUME",
    "CHECKPOINT_VOLUME",
    "FUSE_CACHE_VOLUME",
    "CompileCachePlan",
    "StartupPlan",
    "checkpoint_fuse_attributes",
    "first_step_waits",
    "fuse_volume",
    "node_pool_startup_fields",
    "profile_claims",
    "startup_markdown",
    "startup_plan",
    "startup_pod_pieces",
]

CACHE_VOLUME = "compile-cache"
CHECKPOINT_VOLUME = "checkpoints"
DATA_VOLUME = "training-data"
FUSE_CACHE_VOLUME = "gke-gcsfuse-cache"
"""The volume the GCS FUSE sidecar keeps its file cache in when the pod declares one (gcs-fuse-csi-driver
pkg/webhook/sidecar_spec.go, ``SidecarContainerCacheVolumeName``); otherwise the webhook adds an unsized one."""


@dataclass(frozen=True)
class CompileCachePlan:
    bucket: str
    prefix: str
    mount_path: str
    """Where the cache's bucket is mounted in the Ray pods (the checkpoint mount, or a mount of its own)."""
    own_bucket: bool
    """A bucket other than the checkpoint bucket: mounted on its own, the Ray service account granted on it."""

    @property
    def directory(self) -> str:
        """The cache root in the pods: PyTorch/XLA's cache directories go under it, one per key."""
        return f"{self.mount_path.rstrip('/')}/{self.prefix}"

    @property
    def url(self) -> str:
        """The same root in GCS: TorchTPU's tier-3 cache reads and writes it directly."""
        return f"gs://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class StartupPlan:
    backend: str
    worker_image: str
    compile_cache: CompileCachePlan | None
    images: ImagePullConfig
    checkpoint_mount: FuseMountConfig
    data_mount: DataMountConfig | None = None


def startup_plan(cfg: StackConfig) -> StartupPlan:
    c = cfg.startup.compile_cache
    cache = None
    if c.enabled:
        own = c.bucket is not None and c.bucket != cfg.checkpoint_bucket
        cache = CompileCachePlan(
            bucket=c.bucket or cfg.checkpoint_bucket,
            prefix=c.prefix,
            mount_path=c.mount_path if own else cfg.checkpoints.mount_path,
            own_bucket=own,
        )
    return StartupPlan(
        backend=cfg.workload.backend,
        worker_image=cfg.ray.worker_image or cfg.ray.image,
        compile_cache=cache,
        images=cfg.startup.images,
        checkpoint_mount=cfg.startup.checkpoint_mount,
        data_mount=cfg.startup.data_mount,
    )


def checkpoint_fuse_attributes(m: FuseMountConfig) -> tuple[dict[str, str], list[str]]:
    """The checkpoint volume's extra CSI ``volumeAttributes`` and mount options: the attributes the driver turns
    into gcsfuse flags (gcs-fuse-csi-driver pkg/csi_driver/utils.go, ``volumeAttributesToMountOptionsMapping``:
    fileCacheCapacity, fileCacheForRangeRead, metadataCacheTTLSeconds; gcsfuseMetadataPrefetchOnMount) and
    gcsfuse's ``file-cache:enable-parallel-downloads:true``."""
    attrs: dict[str, str] = {}
    options: list[str] = []
    if m.file_cache_capacity is not None:
        attrs["fileCacheCapacity"] = m.file_cache_capacity
        if m.file_cache_for_range_read:
            attrs["fileCacheForRangeRead"] = "true"
        if m.parallel_downloads:
            options.append("file-cache:enable-parallel-downloads:true")
    if m.metadata_cache_ttl_seconds is not None:
        attrs["metadataCacheTTLSeconds"] = str(m.metadata_cache_ttl_seconds)
    if m.metadata_prefetch:
        attrs["gcsfuseMetadataPrefetchOnMount"] = "true"
    return attrs, options


def _claim_name(volume: str) -> str:
    return f"{volume}-gcsfuse"


def fuse_volume(volume: str, bucket: str, m: FuseMountConfig, *, read_only: bool = False) -> dict[str, Any]:
    """A Ray pod's GCS FUSE volume of ``bucket``: inline (CSI ephemeral) with the hand-tuned options, or, with a
    ``profile``, the claim of :func:`profile_claims` (a profile applies only to a PersistentVolume of its class)."""
    if m.profile is not None:
        return {"name": volume, "persistentVolumeClaim": {"claimName": _claim_name(volume), "readOnly": read_only}}
    attrs, options = checkpoint_fuse_attributes(m)
    csi: dict[str, Any] = {"driver": GCSFUSE_DRIVER}
    if read_only:
        csi["readOnly"] = True
    joined = ",".join([GCSFUSE_MOUNT_OPTIONS, *options])
    csi["volumeAttributes"] = {"bucketName": bucket, "mountOptions": joined, **attrs}
    return {"name": volume, "csi": csi}


def _profiled_mounts(plan: StartupPlan, checkpoint_bucket: str | None) -> list[tuple[str, str, FuseMountConfig, bool]]:
    mounts: list[tuple[str, str, FuseMountConfig, bool]] = []
    if checkpoint_bucket:
        mounts.append((CHECKPOINT_VOLUME, checkpoint_bucket, plan.checkpoint_mount, False))
    if plan.data_mount is not None:
        mounts.append((DATA_VOLUME, plan.data_mount.bucket, plan.data_mount, True))
    return [x for x in mounts if x[2].profile is not None]


def profile_claims(
    plan: StartupPlan | None, checkpoint_bucket: str | None, namespace: str, labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The PersistentVolume and PersistentVolumeClaim of every mount with a GCS FUSE ``profile``: the volume names
    the bucket (``volumeHandle``) and the profile's StorageClass, and is bound to the claim in the Ray namespace
    (the shape of gcs-fuse-csi-driver examples/gcsfuse-profiles/pv-pvc-deployment.yaml)."""
    if plan is None:
        return []
    out: list[dict[str, Any]] = []
    for volume, bucket, m, read_only in _profiled_mounts(plan, checkpoint_bucket):
        assert m.profile is not None
        storage_class = GCSFUSE_PROFILES[m.profile]
        claim = _claim_name(volume)
        pv_name = f"{namespace}-{claim}"  # PersistentVolumes are cluster-wide: the namespace keeps stacks apart
        access = ["ReadOnlyMany"] if read_only else ["ReadWriteMany"]
        capacity = {"storage": "5Gi"}  # Kubernetes requires one; the CSI driver ignores it (a bucket has no size)
        meta_labels = dict(labels or {})
        csi: dict[str, Any] = {"driver": GCSFUSE_DRIVER, "volumeHandle": bucket}
        if read_only:
            csi["readOnly"] = True
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "labels": meta_labels},
                "spec": {
                    "accessModes": access,
                    "capacity": capacity,
                    "persistentVolumeReclaimPolicy": "Retain",  # never touches the bucket; says so
                    "storageClassName": storage_class,
                    # the class adds its profile:aiml-<name> option; these keep the files the Ray user's
                    "mountOptions": GCSFUSE_MOUNT_OPTIONS.split(","),
                    "claimRef": {"namespace": namespace, "name": claim},
                    "csi": csi,
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace, "labels": meta_labels},
                "spec": {
                    "accessModes": access,
                    "resources": {"requests": capacity},
                    "storageClassName": storage_class,
                    "volumeName": pv_name,
                },
            }
        )
    return out


def _capacity_mib(m: FuseMountConfig) -> float:
    c = m.file_cache_capacity or "0Mi"
    return float("inf") if c == "-1" else int(c[:-2]) * {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}[c[-2:]]


def startup_pod_pieces(
    plan: StartupPlan | None, *, worker: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The extra ``(env, volumes, volumeMounts)`` of a Ray pod: the cache's location and the worker image (the
    key's image part) for a TPU worker (``worker``), the cache bucket's own mount, the file cache's medium."""
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if plan is None:
        return env, volumes, mounts
    cache = plan.compile_cache
    if cache is not None:
        if worker:
            env += [
                {"name": CACHE_DIR_ENV, "value": cache.directory},
                {"name": CACHE_URL_ENV, "value": cache.url},
                {"name": WORKER_IMAGE_ENV, "value": plan.worker_image},
            ]
        if cache.own_bucket:
            volumes.append(
                {
                    "name": CACHE_VOLUME,
                    "csi": {
                        "driver": GCSFUSE_DRIVER,
                        "volumeAttributes": {"bucketName": cache.bucket, "mountOptions": GCSFUSE_MOUNT_OPTIONS},
                    },
                }
            )
            mounts.append({"name": CACHE_VOLUME, "mountPath": cache.mount_path})
    d = plan.data_mount
    if d is not None:
        volumes.append(fuse_volume(DATA_VOLUME, d.bucket, d, read_only=True))
        mounts.append({"name": DATA_VOLUME, "mountPath": d.mount_path, "readOnly": True})
    # one file cache per pod (the sidecar's), sized by the larger of the two mounts' capacities
    m = max(
        [x for x in (plan.checkpoint_mount, d) if x is not None and x.file_cache_capacity is not None],
        key=_capacity_mib,
        default=None,
    )
    if m is not None and m.file_cache_capacity is not None:
        # The sidecar's file cache, sized: on the node's disk, or in memory (counted in the pod's memory). The
        # driver's own e2e tests declare it so (gcs-fuse-csi-driver test/e2e/specs, OverrideGCSFuseCache).
        empty_dir: dict[str, Any] = {"medium": "Memory"} if m.file_cache_medium == "memory" else {}
        if m.file_cache_capacity != "-1":
            empty_dir["sizeLimit"] = m.file_cache_capacity
        volumes.append({"name": FUSE_CACHE_VOLUME, "emptyDir": empty_dir})
    return env, volumes, mounts


def node_pool_startup_fields(images: ImagePullConfig | None) -> dict[str, Any]:
    """The ``NodePoolSpec`` fields of the image pull path: streaming, the preloaded disk, the node image."""
    if images is None:
        return {}
    uses = images.streaming or images.preloaded_disk_image is not None
    return {
        "image_streaming": images.streaming,
        "secondary_boot_disk": images.preloaded_disk_image,
        "image_type": STREAMING_NODE_IMAGE if uses else None,
    }


def first_step_waits(cfg: StackConfig, pool: SlicePoolConfig) -> dict[str, str]:
    """What a new slice of ``pool`` waits for before its first step: the image pull path, the compile cache key
    (cold on the first run of a key, warm after), the data and checkpoint mounts."""
    plan = startup_plan(cfg)
    images = plan.images
    if images.preloaded_disk_image is not None:
        pull = f"preloaded from disk image {images.preloaded_disk_image} (secondary boot disk)"
        if images.streaming:
            pull += "; streamed if the disk lacks it"
    elif images.streaming:
        pull = "streamed (GKE image streaming, Artifact Registry)"
    else:
        pull = "pulled whole onto every host"
    if plan.compile_cache is None:
        cache = "off: every start compiles every program"
    else:
        key = CompileCacheKey(plan.backend, RUNTIME_FROM_IMAGE, plan.worker_image, pool.tpu_slice, pool.slices)
        root = plan.compile_cache.url
        cache = f"{root}/{key.path}: cold on the first run of this key, warm on every later run and restart"
        if key.image is not None and "@" not in key.image:
            cache += " (the image is a tag: a moved tag keeps its key; pin it by digest)"
    d = plan.data_mount
    if d is not None:
        data = f"gs://{d.bucket} read-only at {d.mount_path} ({_tuned(d)})"
    else:
        data = "no data mount" + ("" if cfg.workload.dataset else " (synthetic tokens)")
    if cfg.workload.dataset:
        data += f"; dataset {cfg.workload.dataset}"
    return {
        "image": pull,
        "compile_cache": cache,
        "checkpoints": f"gs://{cfg.checkpoint_bucket} at {cfg.checkpoints.mount_path} "
        f"({_tuned(plan.checkpoint_mount)})",
        "data": data,
    }


def _tuned(m: FuseMountConfig) -> str:
    if m.profile is not None:
        return (
            f"GKE profile {m.profile}: StorageClass {GCSFUSE_PROFILES[m.profile]} sizes the caches from the bucket "
            f"scan and the node, GKE {GCSFUSE_PROFILES_MIN_GKE} or later; the pods wait for the scan"
        )
    attrs, options = checkpoint_fuse_attributes(m)
    return ", ".join([f"{k}={v}" for k, v in sorted(attrs.items())] + options) or "no file or metadata cache"


def startup_markdown(cfg: StackConfig) -> str:
    """``startup.md`` of a plan: per slice pool, what its first step waits for."""
    lines = ["# What the first step waits for", ""]
    for pool in cfg.slice_pools:
        lines.append(f"## {pool.name} ({pool.tpu_slice}, {pool.slices} slice{'s' if pool.slices > 1 else ''})")
        lines.append("")
        lines += [f"- {what}: {text}" for what, text in first_step_waits(cfg, pool).items()]
        lines.append("")
    return "\n".join(lines)
