"""Kueue's limits on a RayJob, restated where tpuray checks them (``planning.kueue_checks``): pod sets, the system
flavor's quota, and a queue label on a job for an existing cluster."""

from __future__ import annotations

import copy

from tests.support.slices import kueue_objects, kueue_of
from tests.support.stacks import queued_values
from tpuray.components.catalog.names import TPU_RESOURCE
from tpuray.components.catalog.quantity import parse_quantity
from tpuray.components.config import StackConfig
from tpuray.components.planning.kuberay import ray_job_manifest
from tpuray.components.planning.kueue_checks import MAX_POD_SETS, check_kueue_ray_job
from tpuray.components.planning.stack_plan import plan_stack


def test_kueue_admits_up_to_18_pod_sets() -> None:
    cfg = StackConfig.model_validate(queued_values())
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
    cfg = StackConfig.model_validate(queued_values())
    plan = kueue_of(cfg)
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    spec = job["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    submitter = spec["submitterPodTemplate"]["spec"]["containers"][0]["resources"]["requests"]
    cq = kueue_objects(plan, "ClusterQueue")[0]
    system = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == plan.system_flavor)
    quota = {r["name"]: r["nominalQuota"] for r in system["resources"]}
    assert quota[TPU_RESOURCE] == 0
    # every admitted job (at most one per slice) needs its head plus its submitter on the system flavor
    jobs = sum(p.slices for p in cfg.slice_pools)
    for res in ("cpu", "memory"):
        need = (parse_quantity(head[res]) + parse_quantity(submitter[res])) * jobs
        assert parse_quantity(quota[res]) == need, res


def test_queue_labelled_job_on_an_existing_cluster_is_refused_as_tpurays_rule() -> None:
    cfg = StackConfig.model_validate(queued_values())
    job = ray_job_manifest(plan_stack(cfg, "test").job)
    both = copy.deepcopy(job)
    both["spec"]["clusterSelector"] = {"ray.io/cluster": "x"}
    assert any("(Kueue)" in p for p in check_kueue_ray_job(both))  # Kueue's webhook refuses this one
    selector_only = copy.deepcopy(both)
    del selector_only["spec"]["rayClusterSpec"]
    problems = check_kueue_ray_job(selector_only)
    assert any("tpuray's rule" in p for p in problems)  # Kueue accepts it but ignores the queue label
    assert not any("(Kueue)" in p for p in problems)
