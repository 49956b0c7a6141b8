"""The emulated GKE TPU device plugin endpoint: the plugin's metric names and labels, as Ray's reporter agent
reads them (its own parser, against the endpoint over HTTP)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tpuray.components.catalog import metric_names as mn
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.device_plugin import ChipUsage, EmulatedDevicePlugin, exposition, instance_id

SLICE = TpuSlice.parse("v5p:2x2x2")  # two hosts of four chips: host 1's runtime metrics number chips 4..7


@pytest.fixture
def plugin() -> Iterator[EmulatedDevicePlugin]:
    usage = [ChipUsage(10.0 * (i + 1), 1000 * (i + 1)) for i in range(SLICE.chips_per_host)]
    p = EmulatedDevicePlugin(SLICE, "s0", 1, usage=lambda: usage)
    yield p
    p.close()


def test_exposition_has_the_plugins_names_and_labels(plugin: EmulatedDevicePlugin) -> None:
    body = urllib.request.urlopen(f"http://{plugin.address}{mn.TPU_DEVICE_PLUGIN_METRICS_PATH}").read().decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert set(families) == {*mn.DP_CHIP_METRICS, *mn.DP_NODE_METRICS}
    inst = instance_id("s0", 1)
    for name in mn.DP_CHIP_METRICS:
        samples = families[name].samples
        assert all(set(s.labels) == set(mn.DP_CHIP_LABELS) for s in samples)
        assert all(s.labels[mn.DP_MAKE_LABEL] == mn.DP_MAKE for s in samples)
        assert {s.labels[mn.DP_MODEL_LABEL] for s in samples} == {SLICE.gke_accelerator}
        assert {s.labels[mn.DP_TOPOLOGY_LABEL] for s in samples} == {SLICE.topology}
    runtime = {s.labels[mn.DP_ACCELERATOR_ID_LABEL] for s in families[mn.DP_DUTY_CYCLE].samples}
    host = {s.labels[mn.DP_ACCELERATOR_ID_LABEL] for s in families[mn.DP_TENSORCORE_UTILIZATION].samples}
    assert runtime == {f"{inst}-{i}" for i in range(4, 8)} and host == {f"{inst}-{i}" for i in range(4)}
    for name in mn.DP_NODE_METRICS:
        assert all(set(s.labels) == set(mn.DP_NODE_LABELS) for s in families[name].samples)


def test_rays_reporter_agent_reads_one_entry_per_chip(
    plugin: EmulatedDevicePlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.dashboard.modules.reporter import reporter_agent as ra

    monkeypatch.setattr(ra, "TPU_DEVICE_PLUGIN_ADDR", plugin.address)
    monkeypatch.setattr(ra, "enable_tpu_usage_check", True)
    chips = ra.ReporterAgent._get_tpu_usage()
    assert [c["index"] for c in chips] == list(range(SLICE.chips_per_host))
    assert [c["duty_cycle"] for c in chips] == [10.0, 20.0, 30.0, 40.0]
    assert [c["tensorcore_utilization"] for c in chips] == [10.0, 20.0, 30.0, 40.0]
    assert [c["memory_used"] for c in chips] == [1000, 2000, 3000, 4000]
    assert all(c["memory_total"] == plugin.memory_total_bytes > 0 for c in chips)
    assert {c["tpu_type"] for c in chips} == {SLICE.gke_accelerator}


def test_idle_chips_have_only_node_series() -> None:
    idle = [ChipUsage(0.0, 0, bound=False)] * SLICE.chips_per_host
    text = exposition(SLICE, "s0", 0, idle, 1 << 30)
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    assert all(not families[n] for n in (*mn.DP_CHIP_METRICS, *mn.DP_RUNTIME_NODE_METRICS))
    assert all(len(families[n]) == SLICE.chips_per_host for n in mn.DP_HOST_NODE_METRICS)
    with pytest.raises(ValueError, match="4 chips"):
        exposition(SLICE, "s0", 0, idle[:3], 1 << 30)
