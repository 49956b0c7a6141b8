"""The rules that keep a stack's components agreeing with each other (catalog/pins.py): a webhook chart that serves
the stack's generations, a KubeRay chart whose feature gates tpuray knows, and a worker image for torch_tpu."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.catalog.pins import KUBERAY_CHART, TPU_WEBHOOK, WEBHOOK_IRONWOOD_CHART
from tpuray.components.config import ConfigError, parse_stack_config

TORCH_TPU_IMAGE = "us-docker.pkg.dev/tpuray-test-proj/tpuray/worker:0.1.0-torch-tpu"


def ironwood(**overrides: Any) -> dict[str, Any]:
    """A multi-host tpu7x stack (2x2x2: two hosts) in a zone that offers tpu7x."""
    v: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-central1",
        "zone": "us-central1-c",
        "slicePools": [{"name": "iw", "generation": "tpu7x", "topology": "2x2x2", "capacity": {"type": "spot"}}],
        "ray": {"image": TORCH_TPU_IMAGE},
        "workload": {"backend": "torch_tpu"},
    }
    v.update(overrides)
    return v


def problems_of(values: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values)
    return {path: message for path, message in e.value.problems}


@pytest.mark.parametrize("chart", ["0.2.6", "0.3.0", "0.1.0"])
def test_a_multi_host_tpu7x_stack_refuses_a_webhook_chart_without_ironwood(chart: str) -> None:
    found = problems_of(ironwood(ray={"image": TORCH_TPU_IMAGE, "tpuWebhook": {"chartVersion": chart}}))
    assert set(found) == {"ray.tpuWebhook.chartVersion"}
    assert (
        chart in found["ray.tpuWebhook.chartVersion"] and WEBHOOK_IRONWOOD_CHART in found["ray.tpuWebhook.chartVersion"]
    )


def test_the_webhook_chart_rule_holds_only_where_it_applies() -> None:
    assert parse_stack_config(ironwood()).ray.tpu_webhook.chart_version == TPU_WEBHOOK.chart
    # the stack does not install the webhook: what runs is the doctor's to check
    old_off = {"image": TORCH_TPU_IMAGE, "tpuWebhook": {"chartVersion": "0.2.6", "enabled": False}}
    assert parse_stack_config(ironwood(ray=old_off)).ray.tpu_webhook.chart_version == "0.2.6"
    # single-host tpu7x (2x2x1, one host) needs no webhook to serve Ironwood
    single = ironwood(ray={"image": TORCH_TPU_IMAGE, "tpuWebhook": {"chartVersion": "0.2.6"}})
    single["slicePools"][0]["topology"] = "2x2x1"
    assert parse_stack_config(single).ray.tpu_webhook.chart_version == "0.2.6"


def test_torch_tpu_without_a_torch_tpu_image_is_refused_naming_the_field() -> None:
    """No worker image: head and workers run ray.image, here Ray's stock image, which has no torch."""
    found = problems_of(ironwood(ray={}))
    assert set(found) == {"ray.image"}
    assert "rayproject/ray" in found["ray.image"] and "worker-torch-tpu" in found["ray.image"]
    xla = ironwood(ray={}, workload={"backend": "xla"})  # the xla backend is not this rule's
    assert parse_stack_config(xla).ray.worker_image is None


@pytest.mark.parametrize(("chart", "ok"), [(KUBERAY_CHART, True), ("1.6.0", True), ("1.7.3", True), ("1.8.0", False)])
def test_a_kuberay_chart_whose_gates_are_not_verified_is_refused(chart: str, ok: bool) -> None:
    values = ironwood(ray={"image": TORCH_TPU_IMAGE, "helmChartVersion": chart})
    if ok:
        assert parse_stack_config(values).ray.helm_chart_version == chart
    else:
        found = problems_of(values)
        assert set(found) == {"ray.helmChartVersion"} and "RayMultiHostIndexing=false" in found["ray.helmChartVersion"]
