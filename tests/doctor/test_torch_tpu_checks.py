"""The doctor's checks of a stack's TPU runtime: the webhook serves the stack's generations, and a torch_tpu stack's
worker pods carry what Ray's own TorchTPU path needs from them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tpuray.components.catalog.names import POOL_LABEL, TORCH_TPU_ENV_CALLBACK, TPU_RESOURCE
from tpuray.components.config import StackConfig, load_stack_file
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.torch_tpu_checks import check_torch_tpu_env
from tpuray.components.doctor.webhook_checks import check_tpu_webhook_version

ROOT = Path(__file__).resolve().parents[2]
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


def runtime_checks(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    return [r for r in (check_tpu_webhook_version(cfg, objs), check_torch_tpu_env(cfg, objs)) if r is not None]


@pytest.fixture(scope="module")
def torch_tpu_stack() -> StackConfig:
    return load_stack_file(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml", "torch-tpu")


def _objects(webhook_tag: str | None, env: list[dict[str, str]] | None) -> ClusterObjects:
    """Fresh objects each call: the tests edit them."""
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


def _status(results: list[Any]) -> dict[str, str]:
    return {r.id: r.status for r in results}


def test_a_healthy_torch_tpu_cluster_passes(torch_tpu_stack: StackConfig) -> None:
    assert _status(runtime_checks(torch_tpu_stack, _objects("v1.3.1-gke.2", GOOD_ENV))) == {
        "tpu-webhook-version": "pass",
        "torch-tpu-env": "pass",
    }


def test_a_webhook_older_than_tpu7x_support_fails(torch_tpu_stack: StackConfig) -> None:
    (hook, _) = runtime_checks(torch_tpu_stack, _objects("v1.2.5-gke.0", GOOD_ENV))
    assert hook.status == "fail" and ">= 1.3.1" in hook.fact and "v1.2.5-gke.0" in hook.fact
    (missing, _) = runtime_checks(torch_tpu_stack, _objects(None, GOOD_ENV))
    assert missing.status == "fail"
    (unknown, _) = runtime_checks(torch_tpu_stack, _objects("latest", GOOD_ENV))
    assert unknown.status == "warn"


def test_worker_pods_without_the_callback_or_per_device_counting_fail(torch_tpu_stack: StackConfig) -> None:
    (_, no_callback) = runtime_checks(torch_tpu_stack, _objects("v1.3.1-gke.2", GOOD_ENV[1:]))
    assert no_callback.status == "fail" and "no RAY_TRAIN_CALLBACKS" in no_callback.fact
    (_, per_chip) = runtime_checks(torch_tpu_stack, _objects("v1.3.1-gke.2", GOOD_ENV[:1]))
    assert per_chip.status == "fail" and "RAY_TPU_RESOURCE_PER_CHIP is None" in per_chip.fact
    (_, no_pods) = runtime_checks(torch_tpu_stack, _objects("v1.3.1-gke.2", None))
    assert no_pods.status == "warn" and "unknown" in no_pods.fact


def test_an_xla_single_host_stack_has_neither_check() -> None:
    dev = load_stack_file(ROOT / "Pulumi.dev.yaml", "dev")
    assert runtime_checks(dev, _objects(None, None)) == []


def _image(**labels: str) -> Any:
    from tpuray.components.catalog import names
    from tpuray.components.doctor.image_checks import ImageVersions

    keys = {
        "ray": names.IMAGE_RAY_VERSION_LABEL,
        "torch": names.IMAGE_TORCH_VERSION_LABEL,
        "torch_xla": names.IMAGE_TORCH_XLA_VERSION_LABEL,
        "torch_tpu": names.IMAGE_TORCH_TPU_VERSION_LABEL,
        "libtpu": names.IMAGE_LIBTPU_VERSION_LABEL,
        "backend": names.IMAGE_BACKEND_LABEL,
    }
    return ImageVersions.from_labels({keys[k]: v for k, v in labels.items()}, "image")


def test_the_worker_image_is_checked_for_the_stack_s_runtime(torch_tpu_stack: StackConfig) -> None:
    from tpuray.components.doctor.image_checks import check_worker_image

    objs = _objects("v1.3.1-gke.2", GOOD_ENV)
    tpu_image = _image(ray="2.60.0", torch="2.13.0", torch_tpu="0.2.0", libtpu="0.0.52", backend="torch_tpu")
    (pair, ray) = check_worker_image(torch_tpu_stack, objs, tpu_image)
    assert (pair.id, pair.status, ray.status) == ("worker-torch-tpu", "pass", "pass")
    xla_image = _image(ray="2.60.0", torch="2.9.0", torch_xla="2.9.0", backend="xla")
    (pair, _) = check_worker_image(torch_tpu_stack, objs, xla_image)
    assert pair.status == "fail" and "xla image" in pair.fact
    old_torch = _image(ray="2.60.0", torch="2.9.0", torch_tpu="0.2.0", libtpu="0.0.52", backend="torch_tpu")
    (pair, _) = check_worker_image(torch_tpu_stack, objs, old_torch)
    assert pair.status == "fail" and "torch 2.9.0" in pair.fact
    dev = load_stack_file(ROOT / "Pulumi.dev.yaml", "dev")
    (pair, _) = check_worker_image(dev, objs, tpu_image)  # an xla stack given the torch_tpu image
    assert (pair.id, pair.status) == ("worker-torch-pair", "fail")
