"""The limits the cloud, KubeRay and Kueue enforce, restated where tpuray checks them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from tests.components.catalog import kueue_of
from tests.components.test_kueue import base, by_kind
from tpuray.components.catalog.names import TPU_RESOURCE
from tpuray.components.catalog.quantity import parse_quantity
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import StackConfig
from tpuray.components.config.value_types import GceName, GkeVersion, ImageRef, MachineType, ProjectId, Zone
from tpuray.components.planning.kuberay import RayJobParams, ray_job_manifest
from tpuray.components.planning.kuberay_checks import MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME, check_ray_job
from tpuray.components.planning.kueue_checks import MAX_POD_SETS, check_kueue_ray_job
from tpuray.components.planning.stack_plan import plan_stack


# ---- strings: full match, no control characters ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "good"),
    [
        (Zone, "us-east5-a"),
        (GceName, "net-1"),
        (ProjectId, "tpuray-proj"),
        (MachineType, "e2-standard-8"),
        (GkeVersion, "1.31.2-gke.1115000"),
        (ImageRef, "rayproject/ray:2.60.0-py312"),
    ],
)
@pytest.mark.parametrize("suffix", ["\n", "\r", "\x1b[0m", "\u2028", "\x00"])
def test_value_types_refuse_trailing_newlines_and_control_characters(kind: Any, good: str, suffix: str) -> None:
    adapter = TypeAdapter(kind)
    assert adapter.validate_python(good) == good
    with pytest.raises(ValidationError):
        adapter.validate_python(good + suffix)
    with pytest.raises(ValidationError):
        adapter.validate_python(good[:3] + suffix + good[3:])


@pytest.mark.parametrize("bad", ["1.99.0-gke.1", "01.031", "2.31", "1.031.2", "1.31.02", "1.31.2-gke.0", "1.3"])
def test_impossible_gke_versions_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="GKE version"):
        TypeAdapter(GkeVersion).validate_python(bad)


# ---- catalog ---------------------------------------------------------------------------------------------------
def test_v5p_largest_slice_is_96_cubes() -> None:
    assert TpuSlice.parse("v5p", "16x16x24").chips == 6144
    with pytest.raises(ValueError, match="limit of 96"):
        TpuSlice.parse("v5p", "16x20x24")  # 120 cubes: in the 8960-chip pod, but no job may be scheduled on it


def test_tpu7x_has_a_one_chip_single_host_machine_type() -> None:
    s = TpuSlice.parse("tpu7x", "1x1x1")
    assert (s.chips, s.hosts, s.machine_type) == (1, 1, "tpu7x-standard-1t")


# ---- KubeRay name limits ---------------------------------------------------------------------------------------
def _job(name: str, cfg: StackConfig) -> dict[str, Any]:
    params = plan_stack(cfg, "test").job
    return ray_job_manifest(params.__class__(**{**params.__dict__, "name": "j"})) | {"metadata": {"name": name}}


def test_kuberay_name_limits() -> None:
    assert (MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME) == (53, 47)
    cfg = StackConfig.model_validate(base())
    ok = _job("j" * MAX_RAY_JOB_NAME, cfg)
    assert not [p for p in check_ray_job(ok) if "metadata.name" in p]
    long = _job("j" * (MAX_RAY_JOB_NAME + 1), cfg)
    assert [p for p in check_ray_job(long) if p.startswith("metadata.name")]


def test_ray_job_manifest_refuses_a_48_character_name() -> None:
    cfg = StackConfig.model_validate(base())
    params = plan_stack(cfg, "test").job
    with pytest.raises(ValueError, match="at most 47"):
        ray_job_manifest(RayJobParams(**{**params.__dict__, "name": "j" * 48}))


# ---- Kueue -----------------------------------------------------------------------------------------------------
def test_kueue_admits_up_to_18_pod_sets() -> None:
    cfg = StackConfig.model_validate(base())
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    assert MAX_POD_SETS == 18
    groups = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    for n, refused in ((16, False), (17, True)):  # head + n groups + the K8sJobMode submitter
        j = copy.deepcopy(job)
        j["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
            {**copy.deepcopy(groups[0]), "groupName": f"g{i}"} for i in range(n)
        ]
        assert bool([p for p in check_kueue_ray_job(j) if "pod sets" in p]) == refused, n


def test_system_quota_counts_the_submitter_template_the_job_carries() -> None:
    cfg = StackConfig.model_validate(base())
    plan = kueue_of(cfg)
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    spec = job["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    submitter = spec["submitterPodTemplate"]["spec"]["containers"][0]["resources"]["requests"]
    cq = by_kind(plan, "ClusterQueue")[0]
    system = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == plan.system_flavor)
    quota = {r["name"]: r["nominalQuota"] for r in system["resources"]}
    assert quota[TPU_RESOURCE] == 0
    # every admitted job (at most one per slice) needs its head plus its submitter on the system flavor
    jobs = sum(p.slices for p in cfg.slice_pools)
    for res in ("cpu", "memory"):
        need = (parse_quantity(head[res]) + parse_quantity(submitter[res])) * jobs
        assert parse_quantity(quota[res]) == need, res


def test_queue_labelled_job_on_an_existing_cluster_is_refused_as_tpurays_rule() -> None:
    cfg = StackConfig.model_validate(base())
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    both = copy.deepcopy(job)
    both["spec"]["clusterSelector"] = {"ray.io/cluster": "x"}
    assert any("(Kueue)" in p for p in check_kueue_ray_job(both))  # Kueue's webhook refuses this one
    selector_only = copy.deepcopy(both)
    del selector_only["spec"]["rayClusterSpec"]
    problems = check_kueue_ray_job(selector_only)
    assert any("tpuray's rule" in p for p in problems)  # Kueue accepts it but ignores the queue label
    assert not any("(Kueue)" in p for p in problems)
