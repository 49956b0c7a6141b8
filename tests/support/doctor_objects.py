"""Cluster objects built in memory for the doctor's runtime checks (the KubeRay operator, the TPU webhook, TPU
worker pods with their env), where :mod:`tests.support.doctor_snapshots` writes whole snapshot directories."""

from __future__ import annotations

import copy
from typing import Any

from tpuray.components.catalog.names import POOL_LABEL, TORCH_TPU_ENV_CALLBACK, TPU_RESOURCE
from tpuray.components.doctor.reader import ClusterObjects

WEBHOOK_IMAGE = "us-docker.pkg.dev/ai-on-gke/kuberay-tpu-webhook/tpu-webhook"
OPERATOR: dict[str, Any] = {
    "metadata": {"namespace": "kuberay-system", "name": "kuberay-operator"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "kuberay-operator",
                        "image": "quay.io/kuberay/operator:v1.7.0",
                        "args": ["--feature-gates=RayMultiHostIndexing=false"],
                    }
                ]
            }
        }
    },
    "status": {"readyReplicas": 1},
}
"""The operator as the stack installs it: its release turns RayMultiHostIndexing off."""


def cluster_objects(webhook_tag: str | None, env: list[dict[str, str]] | None) -> ClusterObjects:
    """The operator, the TPU webhook at ``webhook_tag`` (none when None) and four running TPU workers of the
    ``ironwood`` pool with ``env`` (no worker when None). Fresh objects each call: the tests edit them."""
    deployments: list[dict[str, Any]] = [copy.deepcopy(OPERATOR)]
    if webhook_tag is not None:
        hook = {"name": "kuberay-tpu-webhook", "image": f"{WEBHOOK_IMAGE}:{webhook_tag}"}
        deployments.append(
            {
                "metadata": {"namespace": "ray-system", "name": "kuberay-tpu-webhook"},
                "spec": {"template": {"spec": {"containers": [hook]}}},
                "status": {"readyReplicas": 1},
            }
        )
    pods = []
    if env is not None:
        container: dict[str, Any] = {
            "name": "ray-worker",
            "env": copy.deepcopy(env),
            "resources": {"limits": {TPU_RESOURCE: "4"}},
        }
        pods = [
            {
                "metadata": {"namespace": "ray", "name": f"w{i}", "labels": {POOL_LABEL: "ironwood"}},
                "spec": {"containers": [copy.deepcopy(container)]},
                "status": {"phase": "Running"},
            }
            for i in range(4)
        ]
    return ClusterObjects((), tuple(pods), tuple(deployments), (), (), "v1.34.1-gke.1829001", "test")


GOOD_ENV = [
    {"name": "RAY_TRAIN_CALLBACKS", "value": TORCH_TPU_ENV_CALLBACK},
    {"name": "RAY_TPU_RESOURCE_PER_CHIP", "value": "2"},
]
"""The TorchTPU env the check passes on a worker: the env callback and the Ray TPU resource per chip."""
