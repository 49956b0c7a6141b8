"""The pure KubeRay manifests: every TPU fact from the TpuSlice, schema-valid, and the KubeRay rules checked."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.kuberay_schema import schema_errors, tpu_chip_mismatches
from tests.support.slices import ALL_SLICES, pool, ray_params, slice_capacity_st, worker_group
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import (
    DEFAULT_JOB_TTL_SECONDS,
    ConfigError,
    WorkloadConfig,
    load_stack_file,
    parse_stack_config,
)
from tpuray.components.planning.entrypoint import train_entrypoint
from tpuray.components.planning.kuberay import (
    RayClusterParams,
    RayJobParams,
    TpuWorkerGroup,
    ray_cluster_manifest,
    ray_job_manifest,
    worker_group_spec,
)
from tpuray.components.planning.kuberay_checks import check_ray_cluster_spec, check_ray_job
from tpuray.components.planning.stack_plan import plan_stack

ROOT_DIR = Path(__file__).resolve().parents[2]

ROOT_STACKS = ("dev", "prod")


def params(*groups: TpuWorkerGroup, bucket: str | None = "ckpt-bucket") -> RayClusterParams:
    return ray_params(*groups, head_node_pool="system", checkpoint_bucket=bucket)


def group(s: TpuSlice, slices: int = 1, capacity: str = "on-demand") -> TpuWorkerGroup:
    return worker_group(pool(s, capacity, slices, name="tpu"))


def test_every_catalog_shape_renders_a_consistent_worker_group() -> None:
    p = params()
    for s in ALL_SLICES:
        g = worker_group_spec(p, group(s))
        container = g["template"]["spec"]["containers"][0]
        tpu = container["resources"]["limits"]["google.com/tpu"]
        assert g["numOfHosts"] * int(tpu) == s.chips, s
        assert g["numOfHosts"] == s.hosts and int(tpu) == s.chips_per_host
        assert container["resources"]["requests"]["google.com/tpu"] == tpu
        assert g["resources"] == {"TPU": tpu}
        assert g["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == s.gke_accelerator
        assert g["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == s.topology
        assert g["labels"]["ray.io/tpu-pod-type"] == s.pod_type
        assert g["labels"]["ray.io/accelerator-type"] == s.ray_accelerator_type
        # the GKE TPU device plugin sets TPU_ACCELERATOR_TYPE/TPU_TOPOLOGY itself (tpu7x as tpu7x-<cores>)
        assert not {e["name"] for e in container.get("env", [])} & {"TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY"}
        assert not check_ray_cluster_spec(
            {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}, "workerGroupSpecs": [g]}, "x"
        )


@settings(deadline=None, max_examples=60)  # no wall-clock bounds
@given(
    shapes=st.lists(st.tuples(slice_capacity_st, st.integers(1, 4)), min_size=1, max_size=3),
    bucket=st.sampled_from([None, "ckpt-bucket"]),
)
def test_rendered_clusters_and_jobs_are_schema_valid(
    shapes: list[tuple[tuple[TpuSlice, str], int]], bucket: str | None
) -> None:
    groups = [worker_group(pool(s, cap, n, name=f"tpu{i}")) for i, ((s, cap), n) in enumerate(shapes)]
    p = params(*groups, bucket=bucket)
    cluster = ray_cluster_manifest(p)
    assert schema_errors(cluster) == []
    assert tpu_chip_mismatches(cluster["spec"]) == []
    own = ray_job_manifest(RayJobParams(name="job", namespace="ray", entrypoint="python -m x", cluster=p))
    attached = ray_job_manifest(
        RayJobParams(
            name="job",
            namespace="ray",
            entrypoint="python -m x",
            cluster_selector="tpu-cluster",
            shutdown_after_job_finishes=False,
            ttl_seconds_after_finished=0,
        )
    )
    for job in (own, attached):
        assert schema_errors(job) == []
    assert tpu_chip_mismatches(own["spec"]["rayClusterSpec"]) == []
    assert attached["spec"]["clusterSelector"] == {"ray.io/cluster": "tpu-cluster"}
    assert (
        own["spec"]["shutdownAfterJobFinishes"] is True
        and own["spec"]["ttlSecondsAfterFinished"] == DEFAULT_JOB_TTL_SECONDS
    )


def test_schema_check_is_not_vacuous() -> None:
    m = ray_cluster_manifest(params(group(TpuSlice.parse("v6e", "4x4"))))
    bad = copy.deepcopy(m)
    bad["spec"]["workerGroupSpecs"][0]["numOfHost"] = 4  # a typo the API server would silently prune
    assert any("numOfHost" in e for e in schema_errors(bad))
    bad = copy.deepcopy(m)
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = "2"
    assert schema_errors(bad)
    bad = copy.deepcopy(m)
    del bad["spec"]["workerGroupSpecs"][0]["groupName"]
    assert schema_errors(bad)


def test_head_is_cluster_ip_on_the_system_pool_without_tpus() -> None:
    m = ray_cluster_manifest(params(group(TpuSlice.parse("v5e", "2x2"))))
    head = m["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    assert head["rayStartParams"]["num-cpus"] == "0"
    pod = head["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    assert "google.com/tpu" not in pod["containers"][0]["resources"]["limits"]
    assert {p["containerPort"] for p in pod["containers"][0]["ports"]} >= {6379, 8265, 10001}


def test_worker_pod_has_webhook_label_toleration_shm_and_checkpoints() -> None:
    m = ray_cluster_manifest(params(group(TpuSlice.parse("v5p", "4x4x4"), 2)))
    g = m["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"], g["numOfHosts"]) == (2, 0, 2, 16)
    meta, pod = g["template"]["metadata"], g["template"]["spec"]
    assert meta["labels"]["app.kubernetes.io/name"] == "kuberay"
    assert meta["annotations"] == {"gke-gcsfuse/volumes": "true"}
    assert {"key": "google.com/tpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert vols["checkpoints"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert vols["checkpoints"]["csi"]["volumeAttributes"]["bucketName"] == "ckpt-bucket"
    mounts = {v["name"]: v["mountPath"] for v in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "checkpoints": "/checkpoints"}
    assert pod["serviceAccountName"] == "ray-worker" and pod["automountServiceAccountToken"] is False
    assert m["spec"]["enableInTreeAutoscaling"] is True


def test_fixed_size_cluster_disables_the_autoscaler() -> None:
    g = worker_group(pool(TpuSlice.parse("v6e", "4x4"), autoscaling={"enabled": False}, slices=2))
    spec = ray_cluster_manifest(params(g))["spec"]
    assert spec["enableInTreeAutoscaling"] is False and "autoscalerOptions" not in spec
    assert spec["workerGroupSpecs"][0]["minReplicas"] == spec["workerGroupSpecs"][0]["maxReplicas"] == 2


def test_queued_pool_tolerates_the_queued_taint() -> None:
    g = worker_group_spec(params(), group(TpuSlice.parse("v6e", "4x4"), capacity="queued"))
    assert any(t["key"] == "cloud.google.com/gke-queued" for t in g["template"]["spec"]["tolerations"])


def _cluster_with(mutate: Any) -> list[str]:
    m = ray_cluster_manifest(params(group(TpuSlice.parse("v6e", "4x4"))))
    mutate(m["spec"])
    return check_ray_cluster_spec(m["spec"], "tpu-cluster")


def test_checks_catch_what_kuberay_and_the_tpu_webhook_reject() -> None:
    def hosts(spec: dict[str, Any]) -> None:
        spec["workerGroupSpecs"][0]["numOfHosts"] = 3

    def both(spec: dict[str, Any]) -> None:
        spec["workerGroupSpecs"][0]["rayStartParams"]["num-cpus"] = "1"

    def lb(spec: dict[str, Any]) -> None:
        spec["headGroupSpec"]["serviceType"] = "LoadBalancer"

    def label(spec: dict[str, Any]) -> None:
        spec["workerGroupSpecs"][0]["labels"]["bad key!"] = "x"

    for mutate, text in ((hosts, "16 chips"), (both, "both"), (lb, "LoadBalancer"), (label, "invalid label")):
        assert any(text in p for p in _cluster_with(mutate)), text
    with pytest.raises(ValueError, match="DNS-1035"):
        ray_cluster_manifest(RayClusterParams(**{**params().__dict__, "name": "Bad_Name"}))


def test_job_rules() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ray_job_manifest(RayJobParams(name="j", namespace="ray", entrypoint="x"))
    with pytest.raises(ValueError, match="backoffLimit"):
        ray_job_manifest(
            RayJobParams(
                name="j",
                namespace="ray",
                entrypoint="x",
                cluster_selector="c",
                shutdown_after_job_finishes=False,
                ttl_seconds_after_finished=0,
                backoff_limit=2,
            )
        )
    m = ray_job_manifest(
        RayJobParams(
            name="j",
            namespace="ray",
            entrypoint="x",
            cluster_selector="c",
            shutdown_after_job_finishes=False,
            ttl_seconds_after_finished=0,
        )
    )
    m["spec"]["ttlSecondsAfterFinished"] = 60
    assert any("shutdownAfterJobFinishes" in p for p in check_ray_job(m))


@pytest.mark.parametrize("stack", ROOT_STACKS)
def test_stack_entrypoint_parses_with_the_workload_cli(stack: str) -> None:
    train = pytest.importorskip("tpuray.workloads.train")
    from tests.support.paths import ROOT

    cfg = load_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    job = plan_stack(cfg, "test").manifests[-1]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "tpuray.workloads.train"]
    ns = train.build_parser().parse_args(argv[3:])
    target = cfg.workload_pool()
    assert TpuSlice.parse(ns.topology) == target.tpu_slice
    assert ns.num_slices == target.slices
    assert ns.checkpoint_dir.startswith(cfg.checkpoints.mount_path)
    # the workload settings cross as one value, and the trainer's model reads back exactly the stack's settings
    assert argv.count("--workload") == 1
    settings = train.settings(ns)
    assert settings.workload == cfg.workload
    assert settings.run.run_name == job["metadata"]["name"]
    # no setting of the workload model is also a flag of its own (written once: in the JSON value)
    assert not {"--steps", "--checkpoint-every", "--layers", "--d-model"} & set(argv)


def test_entrypoint_skips_unset_values() -> None:
    e = train_entrypoint(WorkloadConfig(), pool(TpuSlice.parse("v5e", "2x2")), "run", None)
    assert "dataset" not in e and "--checkpoint-dir" not in e


# ---- idle paid chips: an ephemeral job's cluster goes soon after the job ends --------------------------------------
def _dws(ray: dict[str, Any]) -> Any:
    cfg = load_stack_file(ROOT_DIR / "Pulumi.prod-dws.yaml")
    raw = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["ray"] = {**raw["ray"], **ray}
    return parse_stack_config(raw)


def test_an_ephemeral_job_releases_its_slices_within_a_minute_by_default() -> None:
    (job,) = plan_stack(load_stack_file(ROOT_DIR / "Pulumi.prod-dws.yaml"), "test").manifests
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["ttlSecondsAfterFinished"] == DEFAULT_JOB_TTL_SECONDS <= 60
    (job,) = plan_stack(_dws({"ttlSecondsAfterFinished": 0}), "test").manifests
    assert job["spec"]["ttlSecondsAfterFinished"] == 0
    assert schema_errors(job) == []


@pytest.mark.parametrize(
    ("ray", "message"),
    [
        ({"ttlSecondsAfterFinished": -1}, "ray.ttlSecondsAfterFinished"),
        ({"ttlSecondsAfterFinished": 86401}, "ray.ttlSecondsAfterFinished"),
        ({"jobMode": "shared", "ttlSecondsAfterFinished": 30}, "ray.ttlSecondsAfterFinished: applies only to"),
    ],
)
def test_the_ttl_key_is_validated_by_the_config_model(ray: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _dws(ray)
