"""What stands between a granted node pool and the first training step: the compile cache, how the worker image
reaches the TPU hosts, and how the GCS FUSE mounts read and write.

:class:`StartupConfig` is the ``tpuray:startup`` section. The rules that read other sections (the worker image's
registry, the cluster's GKE version, the stack's project) are cross-section rules
(:mod:`tpuray.components.config.startup_rules`), run before any cloud call.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from tpuray.components.config.base import ConfigModel, field_problem, pattern
from tpuray.components.config.value_types import BucketName, MountPath, ProjectId

__all__ = [
    "CONTAINER_FILE_SYSTEM_API",
    "GCSFUSE_PROFILES",
    "GCSFUSE_PROFILES_MIN_GKE",
    "SECONDARY_BOOT_DISK_MIN_GKE",
    "STREAMING_NODE_IMAGE",
    "CompileCacheConfig",
    "DataMountConfig",
    "FuseMountConfig",
    "ImagePullConfig",
    "StartupConfig",
]

# https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming ("Requirements"): Standard clusters run
# 1.18.6-gke.4801 or later (below every version the config accepts, so not checked), nodes use the Container-Optimized
# OS with containerd image, and images live in Artifact Registry (standard or remote repositories); images from other
# registries are pulled whole. The same list opens with "You must enable the Container File System API"
# (containerfilesystem.googleapis.com), which tpuray does not enable: no part of the stack enables APIs, so the stack
# file has to say the project has it on.
CONTAINER_FILE_SYSTEM_API = "containerfilesystem.googleapis.com"
"""The API image streaming needs enabled in the cluster's project (GKE's image streaming page, "Requirements")."""
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

_DISK_IMAGE = pattern(
    r"^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$",
    "projects/PROJECT_ID/global/images/IMAGE, e.g. projects/my-project/global/images/tpuray-preload",
)
_PREFIX = pattern(
    r"^[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?(/[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?){0,3}$",
    "one to four '/'-separated parts of lowercase letters, digits, '-', '_' and '.', each starting and ending with "
    "a letter or digit, e.g. 'compile-cache' or 'teams/ml/cache'",
)


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

    file_cache_capacity: (
        Annotated[
            str,
            Field(
                pattern=pattern(r"^(-1|[0-9]+(Mi|Gi|Ti))$", "a size in Mi, Gi or Ti, e.g. 100Gi, or -1 for no limit")
            ),
        ]
        | None
    ) = Field(default=None, description="file cache size (e.g. 100Gi, -1: unlimited); unset: no file cache")
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
