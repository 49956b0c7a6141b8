"""KubeRay v1.7.0's clusterSelector rules (``ValidateRayJobSpec``), each refused before anything is declared."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.planning.kuberay import RayJobParams, ray_job_manifest
from tpuray.components.planning.kuberay_checks import check_ray_job


def _attached() -> dict[str, Any]:
    return ray_job_manifest(
        RayJobParams(
            name="job",
            namespace="ray",
            entrypoint="python -m x",
            cluster_selector="tpu-cluster",
            shutdown_after_job_finishes=False,
            ttl_seconds_after_finished=0,
        )
    )


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("suspend", True, "spec.suspend: the clusterSelector mode does not support suspend (KubeRay >= 1.4)"),
        (
            "submissionMode",
            "SidecarMode",
            "spec.submissionMode: SidecarMode does not support clusterSelector (KubeRay >= 1.5)",
        ),
        ("backoffLimit", 2, "spec.backoffLimit: incompatible with clusterSelector (KubeRay >= 1.6)"),
    ],
)
def test_a_rayjob_on_an_existing_cluster_breaks_one_kuberay_rule(field: str, value: Any, problem: str) -> None:
    job = _attached()
    assert check_ray_job(job) == []
    job["spec"][field] = value
    assert problem in check_ray_job(job)
