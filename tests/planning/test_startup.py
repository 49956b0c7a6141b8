"""The start-up section: the compile cache key, the image pull path, the tuned GCS FUSE mounts, and the inputs the
config refuses before any cloud call."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.kuberay_schema import schema_errors
from tests.support.stacks import prod_config, prod_problems, shipped_values, with_value
from tpuray.components.catalog.compile_cache_key import CACHE_DIR_ENV, CACHE_URL_ENV, WORKER_IMAGE_ENV, CompileCacheKey
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.planning.kuberay import ray_cluster_manifest, ray_job_manifest
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.planning.startup import FUSE_CACHE_VOLUME, first_step_waits

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
AR_WORKER = "us-docker.pkg.dev/tpuray-prod-project/tpuray/worker@"


def worker_env(config: StackConfig) -> dict[str, str]:
    spec = ray_cluster_manifest(plan_stack(config, "prod").ray.params)["spec"]
    env = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].get("env", [])
    return {e["name"]: e["value"] for e in env if "value" in e}


def cache_key(config: StackConfig) -> str:
    return first_step_waits(config, config.workload_pool())["compile_cache"]


# ---- the key ---------------------------------------------------------------------------------------------------
def test_the_key_follows_the_image_digest_and_the_slice_shape_not_the_learning_rate() -> None:
    base = with_value(shipped_values("prod"), "ray.workerImage", AR_WORKER + DIGEST_A)
    key = cache_key(prod_config(base))
    assert "aaaaaaaaaaaaaaaa" in key and "v5p-128-4x4x4-x2" in key
    assert cache_key(prod_config(with_value(base, "workload.learningRate", 1e-4))) == key
    assert worker_env(prod_config(with_value(base, "workload.learningRate", 1e-4))) == worker_env(prod_config(base))
    other_image = prod_config(with_value(base, "ray.workerImage", AR_WORKER + DIGEST_B))
    assert cache_key(other_image) != key and "bbbbbbbbbbbbbbbb" in cache_key(other_image)
    assert worker_env(other_image)[WORKER_IMAGE_ENV] == AR_WORKER + DIGEST_B
    pools = copy.deepcopy(base["slicePools"])
    pools[0]["topology"] = "2x2x4"
    other_shape = prod_config(with_value(base, "slicePools", pools))
    assert cache_key(other_shape) != key and "v5p-32-2x2x4-x2" in cache_key(other_shape)
    pools[0]["topology"], pools[0]["slices"] = "4x4x4", 1
    # a multislice program differs (one slice: prod's elastic bounds go too, a one-slice pool has none)
    fixed = {k: v for k, v in base["workload"].items() if k != "elastic"}
    one_slice = with_value(with_value(base, "slicePools", pools), "workload", fixed)
    assert "v5p-128-4x4x4-x1" in cache_key(prod_config(one_slice))


def test_the_key_is_backend_runtime_shape_image() -> None:
    s = TpuSlice.parse("v5e:2x2")
    a = CompileCacheKey("xla", "torch_xla-2.9.0+libtpu-0.0.21", AR_WORKER + DIGEST_A, s, 1)
    assert a.path == "xla-torch_xla-2.9.0+libtpu-0.0.21/v5litepod-4-2x2-x1/aaaaaaaaaaaaaaaa"
    keys = {
        a.path,
        CompileCacheKey("torch_tpu", a.runtime, a.image, s, 1).path,
        CompileCacheKey("xla", "torch_xla-2.10.0+libtpu-0.0.21", a.image, s, 1).path,
        CompileCacheKey("xla", a.runtime, a.image, TpuSlice.parse("v5e:2x4"), 1).path,
        CompileCacheKey("xla", a.runtime, a.image, s, 2).path,
        CompileCacheKey("xla", a.runtime, None, s, 1).path,
        CompileCacheKey("xla", a.runtime, "rayproject/ray:2.60.0-py311", s, 1).path,
    }
    assert len(keys) == 7  # each part changes the directory


def test_workers_get_the_cache_root_and_the_image_and_the_head_does_not() -> None:
    c = prod_config(shipped_values("prod"))
    env = worker_env(c)
    assert env[CACHE_DIR_ENV] == "/checkpoints/compile-cache"
    assert env[CACHE_URL_ENV] == f"gs://{c.checkpoint_bucket}/compile-cache"
    head = ray_cluster_manifest(plan_stack(c, "prod").ray.params)["spec"]["headGroupSpec"]
    assert CACHE_DIR_ENV not in str(head)
    off = prod_config(with_value(shipped_values("prod"), "startup.compileCache.enabled", False))
    assert CACHE_DIR_ENV not in worker_env(off) and "off" in cache_key(off)


# ---- the bucket and its identity ------------------------------------------------------------------------------
def test_a_cache_bucket_in_another_project_without_access_is_refused_with_the_field() -> None:
    values = with_value(
        shipped_values("prod"), "startup.compileCache", {"bucket": "shared-xla-cache", "bucketProject": "other-proj"}
    )
    found = prod_problems(values)
    assert [p for p, _ in found] == ["startup.compileCache.bucket"]
    assert "other-proj" in found[0][1] and "accessGranted" in found[0][1]
    granted = prod_config(with_value(values, "startup.compileCache.accessGranted", True))
    plan = plan_stack(granted, "prod")
    assert plan.ray.compile_cache_bucket is None  # tpuray grants nothing in another project
    assert worker_env(granted)[CACHE_DIR_ENV] == "/compile-cache/compile-cache"


def test_a_cache_bucket_of_its_own_is_mounted_and_granted() -> None:
    c = prod_config(with_value(shipped_values("prod"), "startup.compileCache.bucket", "tpuray-prod-xla-cache"))
    plan = plan_stack(c, "prod")
    assert plan.ray.compile_cache_bucket == "tpuray-prod-xla-cache"
    pod = ray_cluster_manifest(plan.ray.params)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == "compile-cache")
    assert vol["csi"]["volumeAttributes"]["bucketName"] == "tpuray-prod-xla-cache"
    assert {"name": "compile-cache", "mountPath": "/compile-cache"} in pod["containers"][0]["volumeMounts"]
    assert worker_env(c)[CACHE_URL_ENV] == "gs://tpuray-prod-xla-cache/compile-cache"


# ---- images ---------------------------------------------------------------------------------------------------
def test_streaming_a_non_artifact_registry_image_is_refused_with_the_field() -> None:
    values = with_value(shipped_values("prod"), "ray.workerImage", f"docker.io/acme/worker@{DIGEST_A}")
    found = prod_problems(values)
    assert [p for p, _ in found] == ["startup.images.streaming"]
    assert "Artifact Registry" in found[0][1]
    assert prod_config(with_value(values, "startup.images.streaming", False)).startup.images.streaming is False


def test_streaming_without_the_container_file_system_api_is_refused_with_the_field_and_the_command() -> None:
    """Image streaming needs containerfilesystem.googleapis.com, which tpuray does not enable: the stack file says
    the project has it on, or streaming is refused before any cloud call."""
    values = with_value(shipped_values("prod"), "startup.images.containerFileSystemApiEnabled", False)
    found = prod_problems(values)
    assert [p for p, _ in found] == ["startup.images.containerFileSystemApiEnabled"]
    assert "gcloud services enable containerfilesystem.googleapis.com --project=tpuray-prod-project" in found[0][1]
    # without streaming the API is not needed; with it and the API on, the stack is valid
    assert not prod_config(with_value(values, "startup.images.streaming", False)).startup.images.streaming
    assert prod_config(shipped_values("prod")).startup.images.container_file_system_api_enabled


def test_a_preloaded_disk_needs_its_gke_version_and_names_it() -> None:
    from tpuray.components.catalog.gke_versions import gke_version_key
    from tpuray.components.config.startup import SECONDARY_BOOT_DISK_MIN_GKE

    # every TPU generation tpuray serves needs a newer GKE than secondary boot disks do: the floor holds today,
    # and the rule is what keeps it when an older version is ever accepted
    c = prod_config(shipped_values("prod-dws"))
    assert gke_version_key(c.master_version) >= gke_version_key(SECONDARY_BOOT_DISK_MIN_GKE)
    assert c.startup.images.preloaded_disk_image is not None
    bad = with_value(shipped_values("prod-dws"), "startup.images.preloadedDiskImage", "tpuray-worker")
    assert [p for p, _ in prod_problems(bad)] == ["startup.images.preloadedDiskImage"]


def test_prod_pools_stream_and_prod_dws_pools_preload_the_worker_image() -> None:
    prod = plan_stack(prod_config(shipped_values("prod")), "prod")
    for node_pool in (np for p in prod.pools for np in p.node_pools):
        assert node_pool.image_streaming and node_pool.image_type == "COS_CONTAINERD"
        assert node_pool.secondary_boot_disk is None
    dws = plan_stack(parse_stack_config(shipped_values("prod-dws"), stack="prod-dws"), "prod-dws")
    for node_pool in (np for p in dws.pools for np in p.node_pools):
        assert node_pool.secondary_boot_disk == "projects/tpuray-prod-project/global/images/tpuray-worker-0-1-0"
    dev = plan_stack(parse_stack_config(shipped_values("dev"), stack="dev"), "dev")
    assert all(np.image_type is None and not np.image_streaming for p in dev.pools for np in p.node_pools)


# ---- GCS FUSE ---------------------------------------------------------------------------------------------------
def test_prod_checkpoint_mount_is_tuned_and_still_a_valid_raycluster() -> None:
    manifest = ray_cluster_manifest(plan_stack(prod_config(shipped_values("prod")), "prod").ray.params)
    assert schema_errors(manifest) == []
    pod = manifest["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    attrs = next(v for v in pod["volumes"] if v["name"] == "checkpoints")["csi"]["volumeAttributes"]
    assert attrs["fileCacheCapacity"] == "100Gi" and attrs["metadataCacheTTLSeconds"] == "-1"
    assert attrs["fileCacheForRangeRead"] == "true"
    assert "file-cache:enable-parallel-downloads:true" in attrs["mountOptions"].split(",")
    assert {"name": FUSE_CACHE_VOLUME, "emptyDir": {"sizeLimit": "100Gi"}} in pod["volumes"]


def test_a_data_mount_is_read_only_tuned_granted_and_valid_in_the_rayjob() -> None:
    data = {
        "bucket": "tpuray-prod-corpus",
        "fileCacheCapacity": "200Gi",
        "fileCacheMedium": "memory",
        "parallelDownloads": True,
        "metadataPrefetch": True,
    }
    # 200Gi in memory fits no e2-standard-8 beside the head (config.node_fit): a system node of 256 GiB holds it
    values = with_value(shipped_values("prod-dws"), "cluster.systemMachineType", "n2-highmem-32")
    c = parse_stack_config(with_value(values, "startup.dataMount", data), stack="prod-dws")
    plan = plan_stack(c, "prod-dws")
    assert plan.ray.data_bucket == "tpuray-prod-corpus"
    job = ray_job_manifest(plan.job)
    assert schema_errors(job) == []
    pod = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == "training-data")
    assert vol["csi"]["readOnly"] is True
    assert vol["csi"]["volumeAttributes"]["gcsfuseMetadataPrefetchOnMount"] == "true"
    assert {"name": "training-data", "mountPath": "/data", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    # one sidecar file cache per pod, sized for the larger mount, in memory as asked
    assert {"name": FUSE_CACHE_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "200Gi"}} in pod["volumes"]
    assert "gs://tpuray-prod-corpus read-only at /data" in first_step_waits(c, c.workload_pool())["data"]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("startup.checkpointMount", {"parallelDownloads": True}, "startup.checkpointMount.parallelDownloads"),
        ("startup.checkpointMount", {"fileCacheCapacity": "lots"}, "startup.checkpointMount.fileCacheCapacity"),
        ("startup.dataMount", {"bucket": "corpus", "mountPath": "/checkpoints/data"}, "startup.dataMount.mountPath"),
        ("startup.dataMount", {"bucket": "corpus", "bucketProject": "other-proj"}, "startup.dataMount.bucket"),
        ("startup.compileCache", {"bucketProject": "other-proj"}, "startup.compileCache.bucketProject"),
        ("startup.images", {"preloadedDiskImage": "projects/p/images/x"}, "startup.images.preloadedDiskImage"),
    ],
)
def test_bad_startup_input_names_its_field(path: str, value: Any, field: str) -> None:
    assert field in [p for p, _ in prod_problems(with_value(shipped_values("prod"), path, value))]


def test_plan_says_per_pool_what_the_first_step_waits_for() -> None:
    c = parse_stack_config(shipped_values("prod-dws"), stack="prod-dws")
    waits = first_step_waits(c, c.slice_pools[1])
    assert waits["image"].startswith("preloaded from disk image projects/tpuray-prod-project/global/images/")
    assert "/compile-cache/xla-{runtime}/v6e-16-4x4-x1/tag-" in waits["compile_cache"]
    assert "pin it by digest" in waits["compile_cache"]  # the worker image is a tag here
    assert "fileCacheCapacity=100Gi" in waits["checkpoints"]
    dev = parse_stack_config(shipped_values("dev"), stack="dev")
    assert first_step_waits(dev, dev.slice_pools[0])["image"] == "pulled whole onto every host"
