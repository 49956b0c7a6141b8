"""The doctor against the pins the stack's components must agree on: a KubeRay operator that indexes multi-host
pods (RayMultiHostIndexing, read from its --feature-gates or its release's default) with a TPU webhook older than
the release that reads those labels strands every multi-host replica; and round 4 of inputs the checks misread."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.doctor_objects import GOOD_ENV, OPERATOR, cluster_objects
from tpuray.components.catalog.names import POOL_LABEL
from tpuray.components.catalog.pins import WEBHOOK_INDEXING_RELEASE
from tpuray.components.config import StackConfig, load_stack_file
from tpuray.components.doctor.checks import run_checks
from tpuray.components.doctor.image_checks import check_worker_image
from tpuray.components.doctor.kuberay_checks import check_kuberay_operator
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.torch_tpu_checks import check_torch_tpu_env
from tpuray.components.doctor.webhook_checks import check_tpu_webhook_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def torch_tpu_stack() -> StackConfig:
    return load_stack_file(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml", "torch-tpu")


def _operator(image: str = "quay.io/kuberay/operator:v1.7.0", args: list[str] | None = None) -> dict[str, Any]:
    op = copy.deepcopy(OPERATOR)
    container = op["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    if args is None:
        del container["args"]
    else:
        container["args"] = args
    return op


def _with_operator(objs: ClusterObjects, operator: dict[str, Any]) -> ClusterObjects:
    rest = [d for d in objs.deployments if d["metadata"]["name"] != "kuberay-operator"]
    return replace(objs, deployments=(operator, *rest))


# ---- the operator's indexing gate against the webhook's release ------------------------------------------------
@pytest.mark.parametrize(
    ("image", "args", "webhook", "status"),
    [
        ("quay.io/kuberay/operator:v1.7.0", None, "v1.3.1-gke.2", "fail"),  # the 1.7 default: on
        ("quay.io/kuberay/operator:v1.6.1", None, "v1.3.1-gke.2", "fail"),  # on since 1.6 (Beta)
        ("quay.io/kuberay/operator:v1.5.2", None, "v1.3.1-gke.2", "pass"),  # off in 1.5 (Alpha)
        ("quay.io/kuberay/operator:v1.7.0", ["--feature-gates=RayMultiHostIndexing=true"], "v1.3.1-gke.2", "fail"),
        (
            "quay.io/kuberay/operator:v1.7.0",
            ["--feature-gates", "RayCronJob=true,RayMultiHostIndexing=F"],
            "v1.3.1-gke.2",
            "pass",
        ),
        ("quay.io/kuberay/operator:v1.7.0", ["--feature-gates=RayMultiHostIndexing=false"], "v1.3.1-gke.2", "pass"),
        (  # a flag given twice keeps the last, a gate named twice too
            "quay.io/kuberay/operator:v1.7.0",
            [
                "--feature-gates=RayMultiHostIndexing=false",
                "-feature-gates=RayMultiHostIndexing=false,RayMultiHostIndexing=1",
            ],
            "v1.3.1-gke.2",
            "fail",
        ),
        ("quay.io/kuberay/operator:v1.7.0", None, "v1.3.2-gke.0", "pass"),  # the webhook that reads the labels
        ("quay.io/kuberay/operator:v1.9.0", None, "v1.3.1-gke.2", "warn"),  # its default is not known
        ("quay.io/kuberay/operator:v1.7.0", ["--feature-gates=RayMultiHostIndexing=maybe"], "v1.3.1-gke.2", "warn"),
    ],
)
def test_an_indexing_operator_with_an_older_webhook_fails_naming_both_versions(
    torch_tpu_stack: StackConfig, image: str, args: list[str] | None, webhook: str, status: str
) -> None:
    objs = _with_operator(cluster_objects(webhook, GOOD_ENV), _operator(image, args))
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None
    assert result.status == status, result.fact
    if status == "fail":
        assert webhook in result.fact and image.rsplit(":", 1)[1] in result.fact
        assert "RayMultiHostIndexing" in result.fact and WEBHOOK_INDEXING_RELEASE in result.fact
        assert "RayMultiHostIndexing gate off" in result.fix


def test_the_operator_s_gates_are_read_from_its_own_container(torch_tpu_stack: StackConfig) -> None:
    """A sidecar listed first (a service mesh's) says nothing of the operator's version or gates."""
    op = _operator(args=["--feature-gates=RayMultiHostIndexing=false"])
    sidecar = {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.24.0", "args": ["--feature-gates=X=true"]}
    op["spec"]["template"]["spec"]["containers"].insert(0, sidecar)
    objs = _with_operator(cluster_objects("v1.3.1-gke.2", GOOD_ENV), op)
    hook = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert hook is not None and hook.status == "pass" and "RayMultiHostIndexing=false" in hook.fact
    kuberay = check_kuberay_operator(torch_tpu_stack, objs)
    assert kuberay.status == "pass" and "v1.7.0" in kuberay.fact and "1.24.0" not in kuberay.fact


_GATE_OFF = "--feature-gates=RayMultiHostIndexing=false"


@pytest.mark.parametrize(
    ("command", "args", "status", "said"),
    [
        (None, [_GATE_OFF], "pass", "RayMultiHostIndexing=false"),
        (["/manager"], [_GATE_OFF], "pass", "RayMultiHostIndexing=false"),  # what the chart renders
        (["/manager", _GATE_OFF], [], "pass", "RayMultiHostIndexing=false"),  # command's own args come first
        # Go's flag parsing stops after "--" and at the first non-flag argument: the gate keeps its default
        (None, ["--", _GATE_OFF], "fail", "its default"),
        (None, ["--enable-metrics=true", "serve", _GATE_OFF], "fail", "its default"),
        # a non-boolean flag takes the next argument whatever it is; a boolean one never does
        (None, ["--watch-namespace", _GATE_OFF], "fail", "its default"),
        (None, ["--enable-metrics", _GATE_OFF], "pass", "RayMultiHostIndexing=false"),
        (None, ["--feature-gates=AllBeta=false"], "pass", "AllBeta=false, and RayMultiHostIndexing is Beta"),
        # what the operator exits on: no gate runs, so the doctor cannot pass it
        (None, ["--feature-gates=RayMultiHostIndexing=tRUE"], "warn", "invalid value of RayMultiHostIndexing=tRUE"),
        (None, [_GATE_OFF + ",RayAutoscalerV3=true"], "warn", "unrecognized feature gate: RayAutoscalerV3"),
        (None, ["--leader-elect", _GATE_OFF], "warn", "flag provided but not defined: -leader-elect"),
        (None, ["--feature-gates"], "warn", "flag needs an argument: -feature-gates"),
        (["/bin/sh", "-c", "/manager " + _GATE_OFF], [], "warn", "not /manager: its flags are not read"),
    ],
)
def test_the_operator_s_command_line_is_read_as_go_parses_it(
    torch_tpu_stack: StackConfig, command: list[str] | None, args: list[str], status: str, said: str
) -> None:
    """KubeRay v1.7.0 parses its arguments with Go's flag package (``ray-operator/main.go``, ``flag.Parse``) and
    the gates with featuregate's ``Set``; with webhook 1.3.1, the indexing gate on fails, off passes, and an
    operator that exits on its arguments is unknown (warn), never a pass."""
    op = _operator(args=args)
    if command is not None:
        op["spec"]["template"]["spec"]["containers"][0]["command"] = command
    result = check_tpu_webhook_version(torch_tpu_stack, _with_operator(cluster_objects("v1.3.1-gke.2", GOOD_ENV), op))
    assert result is not None
    assert (result.status, said in result.fact) == (status, True), result.fact


@pytest.mark.parametrize(
    ("image", "label", "status", "said"),
    [
        ("quay.io/kuberay/operator:v1.6.2", "v1.7.0", "warn", "label says v1.7.0, which the image does not run"),
        ("quay.io/kuberay/operator:v1.7.0", "v1.7.0", "pass", "image quay.io/kuberay/operator:v1.7.0"),
        ("quay.io/kuberay/operator@sha256:" + "cd" * 32, "v1.7.0", "warn", "no tag, no version to read"),
        ("quay.io/kuberay/operator:latest", None, "warn", "tag latest, no version to read"),
    ],
)
def test_the_operator_s_version_is_its_image_s_never_its_label(
    torch_tpu_stack: StackConfig, image: str, label: str | None, status: str, said: str
) -> None:
    """Helm's image.tag can run a v1.6.2 image under a v1.7.0 chart, whose app.kubernetes.io/version label still
    says v1.7.0: the image is what runs. A label that disagrees warns; an image with no version is unknown."""
    op = _operator(image, [])
    if label is not None:
        op["metadata"]["labels"] = {"app.kubernetes.io/version": label}
    result = check_kuberay_operator(torch_tpu_stack, _with_operator(cluster_objects("v1.3.1-gke.2", GOOD_ENV), op))
    assert (result.status, said in result.fact) == (status, True), result.fact


# ---- round 4: what the checks misread ----------------------------------------------------------------------------
def _webhook(objs: ClusterObjects) -> dict[str, Any]:
    return next(d for d in objs.deployments if d["metadata"]["name"] == "kuberay-tpu-webhook")


def test_a_webhook_with_no_ready_replica_fails(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
    _webhook(objs)["status"] = {"replicas": 1, "readyReplicas": 0}
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail" and "no ready replica" in result.fact
    del _webhook(objs)["status"]["readyReplicas"]  # what the API server returns when none is ready
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail"


def test_the_webhook_version_is_read_from_its_container_by_name(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.2.5-gke.0", GOOD_ENV)  # too old for tpu7x
    containers = _webhook(objs)["spec"]["template"]["spec"]["containers"]
    containers.insert(0, {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.24.0"})
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail" and "v1.2.5-gke.0" in result.fact


def test_the_configured_namespace_s_webhook_is_read_before_a_stale_one(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
    stale = copy.deepcopy(_webhook(objs))
    stale["metadata"]["namespace"] = "old-webhook"
    stale["spec"]["template"]["spec"]["containers"][0]["image"] = "us-docker.pkg.dev/x/y/tpu-webhook:v1.2.4-gke.0"
    objs = replace(objs, deployments=(stale, *objs.deployments))
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None and result.status == "pass" and "ray-system/kuberay-tpu-webhook" in result.fact


def test_a_tag_pinned_by_digest_is_read_from_the_tag(torch_tpu_stack: StackConfig) -> None:
    digest = "sha256:" + "ab" * 32
    objs = cluster_objects(f"v1.3.1-gke.2@{digest}", GOOD_ENV)
    result = check_tpu_webhook_version(torch_tpu_stack, objs)
    assert result is not None and result.status == "pass" and "runs v1.3.1-gke.2" in result.fact
    objs = _with_operator(objs, _operator(f"quay.io/kuberay/operator:v1.7.0@{digest}", []))
    kuberay = check_kuberay_operator(torch_tpu_stack, objs)
    assert kuberay.status == "pass" and "runs v1.7.0" in kuberay.fact
    result = check_tpu_webhook_version(torch_tpu_stack, objs)  # and its default gate: on
    assert result is not None and result.status == "fail"


def test_a_tpu7x_worker_without_its_pool_label_or_per_chip_count_fails(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV[:1])  # the callback, no RAY_TPU_RESOURCE_PER_CHIP
    for pod in objs.pods:
        del pod["metadata"]["labels"][POOL_LABEL]
    result = check_torch_tpu_env(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail"
    assert "RAY_TPU_RESOURCE_PER_CHIP is None" in result.fact and f"{POOL_LABEL} is missing" in result.fact
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)  # the env right, the label gone: still not the stack's pod
    for pod in objs.pods:
        del pod["metadata"]["labels"][POOL_LABEL]
    result = check_torch_tpu_env(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail" and f"{POOL_LABEL} is missing" in result.fact


def test_the_env_is_read_from_the_tpu_container_not_a_sidecar(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.3.1-gke.2", [])
    for pod in objs.pods:
        pod["spec"]["containers"].insert(0, {"name": "sidecar", "image": "busybox", "env": GOOD_ENV})
    result = check_torch_tpu_env(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail"


def test_finished_pods_of_an_old_job_are_not_checked(torch_tpu_stack: StackConfig) -> None:
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
    old = copy.deepcopy(objs.pods[0])
    old["metadata"]["name"] = "old-job-worker"
    old["spec"]["containers"][0]["env"] = []
    old["status"] = {"phase": "Succeeded"}
    objs = replace(objs, pods=(*objs.pods, old))
    result = check_torch_tpu_env(torch_tpu_stack, objs)
    assert result is not None and result.status == "pass" and "4 worker pod(s)" in result.fact
    old["status"] = {"phase": "Running"}  # the same pod, running: it counts
    result = check_torch_tpu_env(torch_tpu_stack, objs)
    assert result is not None and result.status == "fail" and "old-job-worker" in result.fact


def test_an_xla_image_fails_a_torch_tpu_stack_whatever_its_annotations_say(torch_tpu_stack: StackConfig) -> None:
    from tpuray.components.catalog.names import (
        IMAGE_BACKEND_LABEL,
        IMAGE_LIBTPU_VERSION_LABEL,
        IMAGE_RAY_VERSION_LABEL,
        IMAGE_TORCH_TPU_VERSION_LABEL,
        IMAGE_TORCH_VERSION_LABEL,
    )

    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
    annotations = {
        IMAGE_RAY_VERSION_LABEL: "2.60.0",
        IMAGE_TORCH_VERSION_LABEL: "2.13.0",
        IMAGE_TORCH_TPU_VERSION_LABEL: "0.2.0",
        IMAGE_LIBTPU_VERSION_LABEL: "0.0.52",
        IMAGE_BACKEND_LABEL: "torch_tpu",
    }
    for pod in objs.pods:
        pod["metadata"]["annotations"] = dict(annotations)
        pod["spec"]["containers"][0]["image"] = "us-docker.pkg.dev/p/tpuray/worker:0.1.0-torch-tpu"
    (pair, _) = check_worker_image(torch_tpu_stack, objs, None)
    assert pair.status == "pass", pair.fact
    for pod in objs.pods:
        pod["spec"]["containers"][0]["image"] = "us-docker.pkg.dev/p/tpuray/worker:0.1.0-xla"
    (pair, _) = check_worker_image(torch_tpu_stack, objs, None)
    assert pair.status == "fail" and "tagged xla" in pair.fact


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda objs: _webhook(objs)["spec"]["template"]["spec"]["containers"][0].update(image={"tag": "v1"}),
         "spec.template.spec.containers[0].image is a JSON object, not a string"),
        (lambda objs: _webhook(objs)["status"].update(readyReplicas="1"), "status.readyReplicas is a JSON string"),
        (lambda objs: objs.pods[0]["spec"]["containers"][0]["env"].append({"name": "X", "value": 3}),
         "spec.containers[0].env[2].value is a JSON number, not a string"),
        (lambda objs: objs.pods[0]["status"].update(phase=["Running"]), "status.phase is a JSON array"),
        (lambda objs: objs.deployments[0]["spec"]["template"]["spec"]["containers"][0].update(args="--x"),
         "spec.template.spec.containers[0].args is a JSON string, not an array"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_type_fails_its_check_naming_the_object_and_field(
    torch_tpu_stack: StackConfig, edit: Any, named: str
) -> None:
    objs = cluster_objects("v1.3.1-gke.2", GOOD_ENV)
    edit(objs)
    results = run_checks(torch_tpu_stack, objs)
    failed = [r for r in results if r.status == "fail" and named in r.fact]
    assert failed, [r.fact for r in results if r.status != "pass"]
