"""GKE's Cloud Storage FUSE profiles on the checkpoint and data mounts: the GKE version floor and the hand-tuned
options the config refuses beside a profile, the PersistentVolume and claim the plan declares (a profile applies
only to a PersistentVolume of its StorageClass), and the pod specs that still validate against the KubeRay CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kuberay_schema import schema_errors
from tests.support.plans import ROOT
from tests.support.stacks import prod_config, prod_problems, shipped_values, with_value
from tpuray.components.catalog.gke_versions import gke_alias_for
from tpuray.components.config import parse_stack_config
from tpuray.components.config.startup import GCSFUSE_PROFILES_MIN_GKE
from tpuray.components.planning.kuberay import ray_cluster_manifest, ray_job_manifest
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.planning.startup import FUSE_CACHE_VOLUME, first_step_waits, profile_claims
from tpuray.components.review.plan import render_stack

PROFILED = {"profile": "checkpointing", "profileScanGranted": True}


def profiled(
    name: str = "prod", version: str | None = gke_alias_for(GCSFUSE_PROFILES_MIN_GKE), **mounts: Any
) -> dict[str, Any]:
    """Stack ``name`` with ``mounts`` (checkpointMount, dataMount) replaced, on cluster version ``version``."""
    values = shipped_values(name)
    if version is not None:
        values = with_value(values, "cluster.minMasterVersion", version)
    for key, value in mounts.items():
        values = with_value(values, f"startup.{key}", value)
    return values


def volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod["volumes"] if v["name"] == name)


# ---- the config --------------------------------------------------------------------------------------------------
def test_a_profile_below_its_gke_version_is_refused_with_the_field_and_the_floor() -> None:
    # prod sets no minMasterVersion: the TPU pools need 1.33.0-gke.1712000, below the profiles' floor
    found = dict(prod_problems(profiled(version=None, checkpointMount=PROFILED)))
    assert list(found) == ["startup.checkpointMount.profile"]
    assert GCSFUSE_PROFILES_MIN_GKE in found["startup.checkpointMount.profile"]
    assert "1.33.0-gke.1712000" in found["startup.checkpointMount.profile"]
    assert "release channel REGULAR" in found["startup.checkpointMount.profile"]
    older = dict(prod_problems(profiled(version="1.35.0", dataMount={"bucket": "c0rpus", **PROFILED})))
    assert list(older) == ["startup.dataMount.profile"]


@pytest.mark.parametrize("version", [gke_alias_for(GCSFUSE_PROFILES_MIN_GKE), "1.35", "1.36.0", "1.36"])
def test_a_profile_on_a_version_that_ships_it_is_accepted(version: str) -> None:
    # "1.35" is an alias GKE resolves to its newest patch (config_types.gke_version_meets)
    c = prod_config(profiled(version=version, checkpointMount=PROFILED))
    assert c.startup.checkpoint_mount.profile == "checkpointing"


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ({"fileCacheCapacity": "100Gi"}, "fileCacheCapacity"),
        ({"fileCacheMedium": "memory"}, "fileCacheMedium"),
        ({"metadataCacheTtlSeconds": -1}, "metadataCacheTtlSeconds"),
        ({"metadataPrefetch": True}, "metadataPrefetch"),
        ({"fileCacheCapacity": "1Gi", "parallelDownloads": True}, "fileCacheCapacity"),
    ],
)
def test_a_profile_beside_hand_tuned_options_is_refused_naming_the_option(option: dict[str, Any], field: str) -> None:
    found = dict(prod_problems(profiled(checkpointMount={**PROFILED, **option})))
    assert list(found) == [f"startup.checkpointMount.{field}"]
    assert "gcsfusecsi-checkpointing" in found[f"startup.checkpointMount.{field}"]


def test_a_profile_needs_the_bucket_scan_granted_and_a_grant_needs_a_profile() -> None:
    found = dict(prod_problems(profiled(checkpointMount={"profile": "training"})))
    assert list(found) == ["startup.checkpointMount.profileScanGranted"]
    assert "roles/storage.legacyBucketReader" in found["startup.checkpointMount.profileScanGranted"]
    assert "container-engine-robot" in found["startup.checkpointMount.profileScanGranted"]
    alone = prod_problems(profiled(checkpointMount={"profileScanGranted": True}))
    assert [p for p, _ in alone] == ["startup.checkpointMount.profileScanGranted"]


def test_serving_and_unknown_profiles_are_refused() -> None:
    for name in ("serving", "aiml-training"):
        assert [p for p, _ in prod_problems(profiled(checkpointMount={**PROFILED, "profile": name}))] == [
            "startup.checkpointMount.profile"
        ]


# ---- the plan ----------------------------------------------------------------------------------------------------
def test_a_profiled_checkpoint_mount_is_a_claim_of_the_profile_class_in_a_valid_raycluster() -> None:
    c = prod_config(profiled(checkpointMount=PROFILED))
    params = plan_stack(c, "prod").ray.params
    manifest = ray_cluster_manifest(params)
    assert schema_errors(manifest) == []
    for pod in [manifest["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in manifest["spec"]["workerGroupSpecs"]
    ]:
        assert volume(pod, "checkpoints") == {
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": "checkpoints-gcsfuse", "readOnly": False},
        }
        assert all(v["name"] != FUSE_CACHE_VOLUME for v in pod["volumes"])  # the profile sizes the cache itself
    pv, pvc = profile_claims(params.startup, params.checkpoint_bucket, params.namespace)
    assert pv["kind"] == "PersistentVolume" and pvc["kind"] == "PersistentVolumeClaim"
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == "gcsfusecsi-checkpointing"
    assert pv["spec"]["csi"] == {"driver": "gcsfuse.csi.storage.gke.io", "volumeHandle": c.checkpoint_bucket}
    assert pv["spec"]["claimRef"] == {"namespace": params.namespace, "name": "checkpoints-gcsfuse"}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["metadata"]["namespace"] == params.namespace
    assert "uid=1000" in pv["spec"]["mountOptions"] and pv["spec"]["accessModes"] == ["ReadWriteMany"]


def test_a_profiled_data_mount_is_a_read_only_claim_in_a_valid_rayjob() -> None:
    values = profiled(
        "prod-dws", dataMount={"bucket": "tpuray-prod-corpus", "profile": "training", **{"profileScanGranted": True}}
    )
    c = parse_stack_config(values, stack="prod-dws")
    plan = plan_stack(c, "prod-dws")
    job = ray_job_manifest(plan.job)
    assert schema_errors(job) == []
    pod = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert volume(pod, "training-data")["persistentVolumeClaim"] == {
        "claimName": "training-data-gcsfuse",
        "readOnly": True,
    }
    assert "csi" in volume(pod, "checkpoints")  # the checkpoint mount keeps its hand-tuned inline volume
    params = plan.ray.params
    pv, pvc = profile_claims(params.startup, params.checkpoint_bucket, params.namespace)
    assert pv["spec"]["storageClassName"] == "gcsfusecsi-training" and pv["spec"]["csi"]["readOnly"] is True
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert "GKE profile training" in first_step_waits(c, c.workload_pool())["data"]


def test_the_program_declares_the_volume_and_claim_before_the_ray_cluster(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    doc["config"]["tpuray:cluster"]["minMasterVersion"] = gke_alias_for(GCSFUSE_PROFILES_MIN_GKE)
    doc["config"]["tpuray:startup"]["checkpointMount"] = PROFILED
    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    plan = render_stack("prod", ROOT, stack_file=stack_file)
    by_type = {r["type"]: r for r in plan.resources}
    pv = by_type["kubernetes:core/v1:PersistentVolume"]
    pvc = by_type["kubernetes:core/v1:PersistentVolumeClaim"]
    assert pv["inputs"]["spec"]["storageClassName"] == "gcsfusecsi-checkpointing"
    assert pvc["inputs"]["metadata"]["name"] == "checkpoints-gcsfuse"
    assert pv["options"]["deleteBeforeReplace"] and pvc["options"]["deleteBeforeReplace"]  # fixed names
    ray_cluster = by_type["kubernetes:ray.io/v1:RayCluster"]
    assert {pv["urn"], pvc["urn"]} <= set(ray_cluster["options"]["dependsOn"]), "the RayCluster waits for its claim"


def test_without_a_profile_nothing_changes() -> None:
    params = plan_stack(prod_config(shipped_values("prod")), "prod").ray.params
    assert profile_claims(params.startup, params.checkpoint_bucket, params.namespace) == []


def test_the_volume_and_claim_are_what_the_kubernetes_api_reads() -> None:
    """Each object round-trips through the Kubernetes client's own models unchanged: every field is one the API
    has, under its name (a misspelt one would be dropped), and the required ones are there (the models refuse a
    missing one)."""
    import json

    from kubernetes.client import ApiClient

    c = prod_config(profiled(checkpointMount=PROFILED, dataMount={"bucket": "tpuray-prod-corpus", **PROFILED}))
    params = plan_stack(c, "prod").ray.params
    objs = profile_claims(params.startup, params.checkpoint_bucket, params.namespace, {"app": "tpuray"})
    assert [o["kind"] for o in objs] == ["PersistentVolume", "PersistentVolumeClaim"] * 2
    api = ApiClient()
    for obj in objs:
        model = api.deserialize(json.dumps(obj), f"V1{obj['kind']}", "application/json")
        assert api.sanitize_for_serialization(model) == obj  # type: ignore[no-untyped-call]
