"""The doctor's checks of a stack's TPU runtime: the webhook serves the stack's generations, and a torch_tpu stack's
worker pods carry what Ray's own TorchTPU path needs from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.doctor_objects import GOOD_ENV, cluster_objects
from tpuray.components.config import StackConfig, load_stack_file
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.torch_tpu_checks import check_torch_tpu_env
from tpuray.components.doctor.webhook_checks import check_tpu_webhook_version

ROOT = Path(__file__).resolve().parents[2]


def runtime_checks(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    return [r for r in (check_tpu_webhook_version(cfg, objs), check_torch_tpu_env(cfg, objs)) if r is not None]


@pytest.fixture(scope="module")
def torch_tpu_stack() -> StackConfig:
    return load_stack_file(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml", "torch-tpu")


def _status(results: list[Any]) -> dict[str, str]:
    return {r.id: r.status for r in results}


def test_a_healthy_torch_tpu_cluster_passes(torch_tpu_stack: StackConfig) -> None:
    assert _status(runtime_checks(torch_tpu_stack, cluster_objects("v1.3.1-gke.2", GOOD_ENV))) == {
        "tpu-webhook-version": "pass",
        "torch-tpu-env": "pass",
    }


def test_a_webhook_older_than_tpu7x_support_fails(torch_tpu_stack: StackConfig) -> None:
    (hook, _) = runtime_checks(torch_tpu_stack, cluster_objects("v1.2.5-gke.0", GOOD_ENV))
    assert hook.status == "fail" and ">= 1.3.1" in hook.fact and "v1.2.5-gke.0" in hook.fact
    (missing, _) = runtime_checks(torch_tpu_stack, cluster_objects(None, GOOD_ENV))
    assert missing.status == "fail"
    (unknown, _) = runtime_checks(torch_tpu_stack, cluster_objects("latest", GOOD_ENV))
    assert unknown.status == "warn"


def test_worker_pods_without_the_callback_or_per_device_counting_fail(torch_tpu_stack: StackConfig) -> None:
    (_, no_callback) = runtime_checks(torch_tpu_stack, cluster_objects("v1.3.1-gke.2", GOOD_ENV[1:]))
    assert no_callback.status == "fail" and "no RAY_TRAIN_CALLBACKS" in no_callback.fact
    (_, per_chip) = runtime_checks(torch_tpu_stack, cluster_objects("v1.3.1-gke.2", GOOD_ENV[:1]))
    assert per_chip.status == "fail" and "RAY_TPU_RESOURCE_PER_CHIP is None" in per_chip.fact
    (_, no_pods) = runtime_checks(torch_tpu_stack, cluster_objects("v1.3.1-gke.2", None))
    assert no_pods.status == "warn" and "unknown" in no_pods.fact


def test_an_xla_single_host_stack_has_neither_check() -> None:
    dev = load_stack_file(ROOT / "Pulumi.dev.yaml", "dev")
    assert runtime_checks(dev, cluster_objects(None, None)) == []


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

    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
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
