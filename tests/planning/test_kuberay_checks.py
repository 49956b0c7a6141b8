"""KubeRay's name limits, restated where tpuray checks a RayJob (``planning.kuberay_checks``) and where it
renders one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.stacks import queued_values
from tpuray.components.config import StackConfig
from tpuray.components.planning.kuberay import RayJobParams, ray_job_manifest
from tpuray.components.planning.kuberay_checks import MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME, check_ray_job
from tpuray.components.planning.stack_plan import plan_stack


def _job(name: str, cfg: StackConfig) -> dict[str, Any]:
    params = plan_stack(cfg, "test").job
    return ray_job_manifest(params.__class__(**{**params.__dict__, "name": "j"})) | {"metadata": {"name": name}}


def test_kuberay_name_limits() -> None:
    assert (MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME) == (53, 47)
    cfg = StackConfig.model_validate(queued_values())
    ok = _job("j" * MAX_RAY_JOB_NAME, cfg)
    assert not [p for p in check_ray_job(ok) if "metadata.name" in p]
    long = _job("j" * (MAX_RAY_JOB_NAME + 1), cfg)
    assert [p for p in check_ray_job(long) if p.startswith("metadata.name")]


def test_ray_job_manifest_refuses_a_48_character_name() -> None:
    cfg = StackConfig.model_validate(queued_values())
    params = plan_stack(cfg, "test").job
    with pytest.raises(ValueError, match="at most 47"):
        ray_job_manifest(RayJobParams(**{**params.__dict__, "name": "j" * 48}))
