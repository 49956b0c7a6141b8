"""The rules of ``startup`` that read other sections of the stack (the worker image's registry, the cluster's GKE
version, the stack's project, the checkpoint bucket's mount), run with the other cross-section rules
(:data:`tpuray.components.config.rules.RULES`) before any cloud call."""

from __future__ import annotations

from dataclasses import dataclass

from tpuray.components.catalog.gke_versions import gke_alias_for, gke_version_key, gke_version_meets
from tpuray.components.catalog.images import parse_image
from tpuray.components.catalog.resource_names import derived_bucket_name
from tpuray.components.config.base import Problem
from tpuray.components.config.cluster import ClusterConfig
from tpuray.components.config.node_fit import file_cache_problems
from tpuray.components.config.ray import RayConfig
from tpuray.components.config.slice_pool import SlicePoolConfig, required_gke_version
from tpuray.components.config.stack_view import StackView
from tpuray.components.config.startup import (
    CONTAINER_FILE_SYSTEM_API,
    GCSFUSE_PROFILES,
    GCSFUSE_PROFILES_MIN_GKE,
    SECONDARY_BOOT_DISK_MIN_GKE,
    StartupConfig,
)
from tpuray.components.config.workload import CheckpointConfig

__all__ = ["mount_path_problems", "planned_mounts", "startup_rules"]


def _below(version: str, floor: str) -> bool:
    return gke_version_key(version) < gke_version_key(floor)


@dataclass(frozen=True)
class _Parts:
    """The sections the startup rules read, each valid."""

    startup: StartupConfig
    ray: RayConfig
    cluster: ClusterConfig
    checkpoints: CheckpointConfig
    project: str
    pools: tuple[tuple[int, SlicePoolConfig], ...]

    @property
    def master_version(self) -> str:
        """As the stack model's ``master_version``: ``cluster.minMasterVersion``, else what the TPU generations
        need."""
        return self.cluster.min_master_version or required_gke_version(p for _, p in self.pools)

    @property
    def checkpoint_bucket(self) -> str:
        """As the stack model's ``checkpoint_bucket``."""
        return self.checkpoints.bucket or derived_bucket_name(self.project, self.cluster.name)


def _parts(view: StackView) -> _Parts | None:
    """The sections the rules read, or None when one is not valid (its own error says why) or no pool is."""
    v = view
    if v.startup is None or v.ray is None or v.cluster is None or v.checkpoints is None or v.project is None:
        return None
    if not v.pools:
        return None
    return _Parts(v.startup, v.ray, v.cluster, v.checkpoints, v.project, v.pools)


def startup_rules(view: StackView) -> list[Problem]:
    """The rules of ``startup`` that read other sections, as :class:`Problem` values."""
    cfg = _parts(view)
    if cfg is None:
        return []
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
    found += file_cache_problems(cfg.ray, cfg.cluster, list(cfg.pools), s)
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


def planned_mounts(cfg: _Parts) -> list[tuple[str, str]]:
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


def mount_path_problems(cfg: _Parts) -> list[Problem]:
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


def _profile_problems(cfg: _Parts) -> list[Problem]:
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
