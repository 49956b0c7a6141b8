"""What stands between a granted node pool and the first training step: the compile cache, how the worker image
reaches the TPU hosts, and how the GCS FUSE mounts read and write.

:class:`StartupConfig` is the ``tpuray:startup`` section. The rules that read other sections (the worker image's
registry, the cluster's GKE version, the stack's project) are :func:`startup_problems`, which the stack model runs,
before any cloud call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from tpuray.components.catalog.gke_versions import gke_alias_for, gke_version_key, gke_version_meets
from tpuray.components.catalog.images import parse_image
from tpuray.components.config.base import ConfigModel, Problem, field_problem
from tpuray.components.config.node_fit import file_cache_problems
from tpuray.components.config.value_types import BucketName, MountPath, ProjectId

if TYPE_CHECKING:
    from tpuray.components.config.stack import StackConfig

__all__ = [
    "CONTAINER_FILE_SYSTEM_API",
    "GCSFUSE_PROFILES",
    "GCSFUSE_PROFILES_MIN_GKE",
    "IMAGE_STREAMING_MIN_GKE",
    "SECONDARY_BOOT_DISK_MIN_GKE",
    "CompileCacheConfig",
    "DataMountConfig",
    "FuseMountConfig",
    "ImagePullConfig",
    "StartupConfig",
    "mount_path_problems",
    "planned_mounts",
    "startup_problems",
]

# https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming ("Requirements"): Standard clusters run
# 1.18.6-gke.4801 or later, nodes use the Container-Optimized OS with containerd image, and images live in
# Artifact Registry (standard or remote repositories); images from other registries are pulled whole. The same list
# opens with "You must enable the Container File System API" (containerfilesystem.googleapis.com), which tpuray does
# not enable: no part of the stack enables APIs, so the stack file has to say the project has it on.
IMAGE_STREAMING_MIN_GKE = "1.18.6-gke.4801"
CONTAINER_FILE_SYSTEM_API = "containerfilesystem.googleapis.com"
"""The API image streaming needs enabled in the cluster's project (GKE's image streaming page, "Requirements")."""
"""Below every version the config accepts (``config_types.gke_version_key``: minors 24 and up), so no stack can
miss it: written down, not checked."""
# https://cloud.google.com/kubernetes-engine/docs/how-to/data-container-image-preloading ("Overview"): Standard
# clusters configure node pools with secondary boot disks starting in 1.28.3-gke.1067000.
SECONDARY_BOOT_DISK_MIN_GKE = "1.28.3-gke.1067000"
# GKE's Cloud Storage FUSE profiles are StorageClasses GKE installs (labelled gke-gcsfuse/profile=true), one per
# workload, each with its gcsfuse `profile:aiml-<name>` mount option and the parameters GKE sizes the caches from
# (gcs-fuse-csi-driver deploy/base/setup/storageclass.yaml). They apply only to a PersistentVolume of that class:
# the driver skips the profile of an inline (ephemeral) volume (pkg/profiles/recommender.go, BuildProfileConfig:
# "Skip the profiles feature for ephemeral volumes") and strips a `profile` mount option passed by hand
# (pkg/csi_driver/utils.go, generateDisallowedFlagsMap). GKE ships them from 1.35.1-gke.1616000
# (https://cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/gcsfuse-profiles; the same floor in
# GoogleCloudPlatform/cluster-toolkit, minGCSFuseProfileGKEVersion). `serving` (Anywhere Cache, the bucket in the
# cluster's region) is for model serving, not a training stack's mounts.
GCSFUSE_PROFILES_MIN_GKE = "1.35.1-gke.1616000"
GCSFUSE_PROFILES = {"training": "gcsfusecsi-training", "checkpointing": "gcsfusecsi-checkpointing"}
"""A mount's ``profile`` and the StorageClass GKE installs for it."""
GcsFuseProfile = Literal["training", "checkpointing"]
STREAMING_NODE_IMAGE = "COS_CONTAINERD"
"""The node image both need (containerd on Container-Optimized OS); tpuray sets it on the pools that use them."""

_DISK_IMAGE = r"^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_PREFIX = r"^[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?(/[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?){0,3}$"


class CompileCacheConfig(ConfigModel):
    """A persistent compile cache per stack: PyTorch/XLA's ``initialize_cache`` directory or TorchTPU's tier-3
    cache root, under ``<bucket>/<prefix>/<key>`` (the key: backend, runtime version, image, slice shape)."""

    enabled: bool = True
    bucket: BucketName | None = Field(
        default=None, description="bucket of the cache; defaults to the checkpoint bucket (already mounted)"
    )
    bucket_project: ProjectId | None = Field(
        default=None, description="project of `bucket`; defaults to the stack's project"
    )
    access_granted: bool = Field(
        default=False,
        description="`bucket` is another project's: its owner has granted the stack's Ray service account "
        "roles/storage.objectUser on it (tpuray grants it only on buckets of the stack's project)",
    )
    prefix: Annotated[str, Field(pattern=_PREFIX)] = "compile-cache"
    mount_path: MountPath = Field(
        default="/compile-cache", description="where a cache bucket of its own is mounted in the Ray pods"
    )


class ImagePullConfig(ConfigModel):
    """How the worker image reaches a new TPU host: pulled whole (default), streamed, or preloaded on a disk."""

    streaming: bool = Field(
        default=False, description="GKE image streaming (gcfsConfig) on the TPU node pools; Artifact Registry images"
    )
    container_file_system_api_enabled: bool = Field(
        default=False,
        description="the project has the Container File System API (containerfilesystem.googleapis.com) on, which "
        "image streaming needs and tpuray does not enable (gcloud services enable containerfilesystem.googleapis.com)",
    )
    preloaded_disk_image: Annotated[str, Field(pattern=_DISK_IMAGE)] | None = Field(
        default=None,
        description="a disk image holding the worker image (projects/<project>/global/images/<name>, built with "
        "GKE's gke-disk-image-builder): a secondary boot disk in CONTAINER_IMAGE_CACHE mode on every TPU node",
    )


_TUNED_OPTIONS = (
    "fileCacheCapacity",
    "fileCacheMedium",
    "fileCacheForRangeRead",
    "parallelDownloads",
    "metadataCacheTtlSeconds",
    "metadataPrefetch",
)
"""The hand-tuned options of a mount, which a ``profile`` replaces."""


class FuseMountConfig(ConfigModel):
    """The GCS FUSE CSI driver's caches for one mount (volume attributes and mount options of
    https://cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/cloud-storage-fuse-csi-driver-perf)."""

    file_cache_capacity: Annotated[str, Field(pattern=r"^(-1|\d+(Mi|Gi|Ti))$")] | None = Field(
        default=None, description="file cache size (e.g. 100Gi, -1: unlimited); unset: no file cache"
    )
    file_cache_medium: Literal["disk", "memory"] = Field(
        default="disk", description="the cache volume: the node's boot disk (emptyDir) or memory (tmpfs)"
    )
    file_cache_for_range_read: bool = False
    parallel_downloads: bool = Field(
        default=False, description="download large files in parallel chunks into the file cache"
    )
    metadata_cache_ttl_seconds: Annotated[int, Field(ge=-1, le=31_536_000)] | None = Field(
        default=None, description="stat and type cache TTL (-1: never expire: objects nobody else writes)"
    )
    metadata_prefetch: bool = Field(default=False, description="list the bucket at mount time to warm the cache")
    profile: GcsFuseProfile | None = Field(
        default=None,
        description="GKE's Cloud Storage FUSE profile (training or checkpointing; GKE 1.35.1-gke.1616000 or later): "
        "GKE sizes the caches from the bucket and the node, in place of the options above",
    )
    profile_scan_granted: bool = Field(
        default=False,
        description="with `profile`: the cluster's GKE service agent holds storage.buckets.get and "
        "storage.objects.list on the bucket (GKE scans it to size the caches)",
    )

    @model_validator(mode="after")
    def _profile_or_options(self) -> FuseMountConfig:
        if self.profile is None:
            if self.profile_scan_granted:
                raise field_problem("profileScanGranted", "says GKE's bucket scan is granted: set profile")
            return self
        # The profile's StorageClass sets these itself (the file cache sized from the node's memory, metadata cache
        # TTL -1, prefetch on mount), and a profiled mount is a PersistentVolume that carries none of them: any of
        # them the file sets, even to its default (fileCacheMedium: disk), would be dropped without a word.
        said = {to_camel(name) for name in self.model_fields_set}
        tuned = {k: k in said for k in _TUNED_OPTIONS}
        if clash := [k for k, v in tuned.items() if v]:
            raise field_problem(
                clash[0],
                f"profile {self.profile} sizes the file and metadata caches and picks their medium itself (GKE's "
                f"{GCSFUSE_PROFILES[self.profile]} StorageClass); set either profile or the hand-tuned options "
                f"({', '.join(clash)}), not both",
            )
        return self

    @model_validator(mode="after")
    def _cache_needs(self) -> FuseMountConfig:
        if self.parallel_downloads and self.file_cache_capacity is None:
            raise field_problem("parallelDownloads", "downloads go into the file cache: set fileCacheCapacity")
        if self.file_cache_for_range_read and self.file_cache_capacity is None:
            raise field_problem("fileCacheForRangeRead", "needs a file cache: set fileCacheCapacity")
        return self


class DataMountConfig(FuseMountConfig):
    """A training data bucket, mounted read-only in every Ray pod (``workload.dataset`` may point into it)."""

    bucket: BucketName
    bucket_project: ProjectId | None = Field(default=None, description="project of `bucket`; defaults to the stack's")
    access_granted: bool = Field(
        default=False,
        description="`bucket` is another project's: its owner has granted the Ray service account "
        "roles/storage.objectViewer on it",
    )
    mount_path: MountPath = "/data"


class StartupConfig(ConfigModel):
    """The compile cache, the image pull path and the tuned GCS FUSE mounts."""

    compile_cache: CompileCacheConfig = CompileCacheConfig()
    images: ImagePullConfig = ImagePullConfig()
    checkpoint_mount: FuseMountConfig = FuseMountConfig()
    data_mount: DataMountConfig | None = Field(
        default=None, description="a training data bucket mounted read-only (GCS FUSE, tuned like checkpointMount)"
    )


def _below(version: str, floor: str) -> bool:
    return gke_version_key(version) < gke_version_key(floor)


def startup_problems(cfg: StackConfig) -> list[Problem]:
    """The rules of ``startup`` that read other sections, as :class:`Problem` values."""
    s, found = cfg.startup, []
    worker_image = cfg.ray.worker_image or cfg.ray.image
    version = cfg.master_version
    where = "cluster.minMasterVersion" if cfg.cluster.min_master_version else "the version the TPU pools need"
    if s.images.streaming and parse_image(worker_image).artifact_repository is None:
        found.append(
            Problem(
                "startup.images.streaming",
                f"image streaming serves Artifact Registry images only, and the worker image {worker_image} is "
                "not one (<location>-docker.pkg.dev/<project>/<repository>/<image>): push it there, or use "
                "startup.images.preloadedDiskImage",
            )
        )
    if s.images.streaming and not s.images.container_file_system_api_enabled:
        found.append(
            Problem(
                "startup.images.containerFileSystemApiEnabled",
                f"image streaming needs the Container File System API ({CONTAINER_FILE_SYSTEM_API}) enabled in project "
                f"{cfg.project} (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, "
                "Requirements), and tpuray enables no APIs: run `gcloud services enable "
                f"{CONTAINER_FILE_SYSTEM_API} --project={cfg.project}`, then set containerFileSystemApiEnabled: true; "
                "or set streaming: false",
            )
        )
    if s.images.preloaded_disk_image is not None and _below(version, SECONDARY_BOOT_DISK_MIN_GKE):
        found.append(
            Problem(
                "startup.images.preloadedDiskImage",
                f"secondary boot disks need GKE {SECONDARY_BOOT_DISK_MIN_GKE} or later; {where} is {version}: set "
                f"cluster.minMasterVersion to {gke_alias_for(SECONDARY_BOOT_DISK_MIN_GKE)} or later",
            )
        )
    found += _profile_problems(cfg)
    found += mount_path_problems(cfg)
    found += file_cache_problems(cfg.ray, cfg.cluster, list(enumerate(cfg.slice_pools)), s)
    c = s.compile_cache
    owner = c.bucket_project or cfg.project
    if c.enabled and c.bucket is not None and owner != cfg.project and not c.access_granted:
        found.append(
            Problem(
                "startup.compileCache.bucket",
                f"{c.bucket} is in project {owner}, not the stack's ({cfg.project}): tpuray grants the Ray service "
                "account access only in its own project, so the workers could not read or write it. Have its owner "
                "grant roles/storage.objectUser to the Ray service account and set accessGranted: true, or leave "
                "bucket unset (the checkpoint bucket)",
            )
        )
    if c.bucket_project is not None and c.bucket is None:
        found.append(Problem("startup.compileCache.bucketProject", "names the project of `bucket`: set bucket"))
    d = s.data_mount
    if d is not None:
        owner = d.bucket_project or cfg.project
        if owner != cfg.project and not d.access_granted:
            found.append(
                Problem(
                    "startup.dataMount.bucket",
                    f"{d.bucket} is in project {owner}, not the stack's ({cfg.project}): tpuray grants the Ray "
                    "service account access only in its own project. Have its owner grant roles/storage.objectViewer "
                    "to the Ray service account and set accessGranted: true",
                )
            )
    return found


def planned_mounts(cfg: StackConfig) -> list[tuple[str, str]]:
    """Every bucket mount path the Ray pods get, with the field that sets it: the checkpoint bucket (always), the
    compile cache's own bucket (when it is not the checkpoint bucket), the data bucket (``planning.startup``)."""
    out = [("checkpoints.mountPath", cfg.checkpoints.mount_path)]
    c = cfg.startup.compile_cache
    if c.enabled and c.bucket is not None and c.bucket != cfg.checkpoint_bucket:
        out.append(("startup.compileCache.mountPath", c.mount_path))
    if cfg.startup.data_mount is not None:
        out.append(("startup.dataMount.mountPath", cfg.startup.data_mount.mount_path))
    return out


def _norm(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p)


def mount_path_problems(cfg: StackConfig) -> list[Problem]:
    """The mount paths of one pod are unique and none lies in another: the API server refuses a pod with two
    volumeMounts at one path (kubernetes pkg/apis/core/validation/validation.go, validateVolumeMounts: "must be
    unique"), and a bucket mounted inside another hides that part of the outer bucket, its mount point made in a
    FUSE mount (read-only for the data bucket). Each path is clear of the image's and Ray's own by its type
    (``MountPath``, ``catalog.container_paths``)."""
    found = []
    mounts = planned_mounts(cfg)
    for i, (field, path) in enumerate(mounts):
        for other, other_path in mounts[:i]:
            a, b = _norm(path), _norm(other_path)
            if a == b:
                found.append(
                    Problem(
                        field,
                        f"{path} is also {other}: two volumes mounted at one path, and the API server refuses the "
                        "pod; give each mount a path of its own (e.g. /checkpoints, /compile-cache, /data)",
                    )
                )
            elif a.startswith(b + "/") or b.startswith(a + "/"):
                inner, outer = (field, other) if a.startswith(b + "/") else (other, field)
                found.append(
                    Problem(
                        field,
                        f"{path} and {other} {other_path} are nested: {inner} would hide part of {outer}'s bucket; "
                        "give each mount a path of its own, side by side (e.g. /checkpoints and /data)",
                    )
                )
    return found


def _profile_problems(cfg: StackConfig) -> list[Problem]:
    """A GCS FUSE profile needs a GKE version that ships its StorageClass, and GKE's bucket scan to be granted."""
    found = []
    mounts = [("startup.checkpointMount", cfg.startup.checkpoint_mount, cfg.checkpoint_bucket)]
    if cfg.startup.data_mount is not None:
        mounts.append(("startup.dataMount", cfg.startup.data_mount, cfg.startup.data_mount.bucket))
    version = cfg.master_version
    for where, m, bucket in mounts:
        if m.profile is None:
            continue
        # an alias (1.35) counts as its newest patch, as GKE resolves it (config_types.gke_version_meets)
        if not gke_version_meets(version, GCSFUSE_PROFILES_MIN_GKE):
            source = (
                f"cluster.minMasterVersion is {version}"
                if cfg.cluster.min_master_version
                else f"cluster.minMasterVersion is unset, and the version the TPU pools need is {version}"
            )
            found.append(
                Problem(
                    f"{where}.profile",
                    f"GKE installs the {GCSFUSE_PROFILES[m.profile]} StorageClass from {GCSFUSE_PROFILES_MIN_GKE}; "
                    f"{source}: set cluster.minMasterVersion to {gke_alias_for(GCSFUSE_PROFILES_MIN_GKE)} or later "
                    f"(offered in release channel {cfg.cluster.release_channel}), or drop profile and tune the mount "
                    "by hand "
                    "(fileCacheCapacity, metadataCacheTtlSeconds, ...)",
                )
            )
        if not m.profile_scan_granted:
            found.append(
                Problem(
                    f"{where}.profileScanGranted",
                    f"GKE scans gs://{bucket} to size a profile's caches, as the cluster's GKE service agent "
                    "(service-<project number>@container-engine-robot.iam.gserviceaccount.com), and holds the Ray "
                    "pods until it has; tpuray cannot name that account (its program reads no project number). Grant "
                    f"it roles/storage.legacyBucketReader on gs://{bucket} (storage.buckets.get and "
                    "storage.objects.list) and set profileScanGranted: true",
                )
            )
    return found
