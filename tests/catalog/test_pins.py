"""The pinned components agree: the gates tpuray sets on KubeRay suit the TPU webhook it installs, and every reader
takes its version from the one table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpuray.components.catalog import pins
from tpuray.components.config import StackConfig, parse_stack_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_operator_never_runs_indexing_with_a_webhook_that_strands_its_pods() -> None:
    gates = {g.name: g.enabled for g in pins.KUBERAY_FEATURE_GATES}
    indexing = gates.get(pins.MULTI_HOST_INDEXING, pins.multi_host_indexing_default(pins.KUBERAY_CHART))
    shipped, floor = pins.release_key(pins.TPU_WEBHOOK.release), pins.release_key(pins.WEBHOOK_INDEXING_RELEASE)
    assert shipped is not None and floor is not None
    assert not indexing or shipped >= floor
    assert gates[pins.MULTI_HOST_INDEXING] is False  # the webhook shipped today is older than the fix
    assert pins.helm_feature_gates() == [{"name": "RayMultiHostIndexing", "enabled": False}]
    assert all(g.why for g in pins.KUBERAY_FEATURE_GATES)


def test_the_webhook_image_is_its_release() -> None:
    assert pins.release_key(pins.TPU_WEBHOOK.image_tag) == pins.release_key(pins.TPU_WEBHOOK.release)


@pytest.mark.parametrize(
    ("version", "default"),
    [("1.4.2", False), ("v1.5.2", False), ("1.6.0", True), ("v1.7.0", True), ("1.8.0", None), ("latest", None)],
)
def test_the_indexing_gate_default_follows_features_go(version: str, default: bool | None) -> None:
    assert pins.multi_host_indexing_default(version) is default


def test_the_config_defaults_are_the_pins() -> None:
    cfg: StackConfig = parse_stack_config(
        {"project": "tpuray-test-proj", "region": "us-east5", "zone": "us-east5-a", "slicePools": [
            {"name": "one", "generation": "v5e", "topology": "2x2"}
        ]}
    )  # fmt: skip
    assert cfg.ray.helm_chart_version == pins.KUBERAY_CHART
    assert cfg.ray.tpu_webhook.chart_version == pins.TPU_WEBHOOK.chart
    assert cfg.ray.tpu_webhook.cert_manager.chart_version == pins.CERT_MANAGER_CHART
    assert cfg.kueue.chart_version == pins.KUEUE_CHART


def test_fetch_crds_fetches_the_pinned_releases() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fetch_crds", ROOT / "tools" / "fetch_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fetched = (module.KUBERAY, module.KUEUE, module.GMP)
    assert fetched == tuple(f"v{v}" for v in (pins.KUBERAY_CHART, pins.KUEUE_CHART, pins.GMP_RELEASE))
    assert set(module.FILES) == {"kuberay-crds", "kueue-crds", "gmp-crds"}
