"""The one reader of a TPU slice from a node's labels or a worker's env (``tpuray.components.catalog.slice_labels``)."""

from __future__ import annotations

import pytest

from tests.support.slices import all_slices
from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    POD_TYPE_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
)
from tpuray.components.catalog.slice_labels import labels_of_env, slice_from_labels
from tpuray.components.catalog.topology import TopologyError, TpuSlice


# every catalog shape (the smallest dozen of each generation) in each of its machine types (a v5e/v6e 2x4 is one
# 8-chip VM or two 4-chip VMs)
@pytest.mark.parametrize("s", all_slices(per_generation=12), ids=str)
def test_every_shape_reads_back_from_ray_gke_and_tpuray_labels_and_env(s: TpuSlice) -> None:
    per_host = s.chips_per_host
    ray = {RAY_POD_TYPE_LABEL: s.pod_type, RAY_TOPOLOGY_LABEL: s.topology}
    assert slice_from_labels(ray, chips_per_host=per_host) == s
    gke = {GKE_ACCELERATOR_LABEL: s.gke_accelerator, GKE_TOPOLOGY_LABEL: s.topology}
    assert slice_from_labels(gke, machine_type=s.machine_type) == s
    assert slice_from_labels({GKE_TOPOLOGY_LABEL: s.topology}, machine_type=s.machine_type) == s
    assert (
        slice_from_labels({POD_TYPE_LABEL: s.pod_type, GKE_TOPOLOGY_LABEL: s.topology}, machine_type=s.machine_type)
        == s
    )
    env = {"TPU_ACCELERATOR_TYPE": s.pod_type, "TPU_TOPOLOGY": s.topology, "TPU_NAME": "slice-a", "TPU_WORKER_ID": "1"}
    labels = labels_of_env(env)
    assert (labels[RAY_SLICE_NAME_LABEL], labels[RAY_WORKER_ID_LABEL]) == ("slice-a", "1")
    assert slice_from_labels(labels, chips_per_host=per_host) == s


def test_chips_per_host_tell_the_two_2x4_machines_apart() -> None:
    labels = {RAY_POD_TYPE_LABEL: "v6e-8", RAY_TOPOLOGY_LABEL: "2x4"}
    assert not slice_from_labels(labels, chips_per_host=8).multi_host
    assert slice_from_labels(labels, chips_per_host=4).hosts == 2
    assert slice_from_labels(labels) == TpuSlice.parse("v6e", "2x4")  # Ray's reading: the one 8-chip VM


@pytest.mark.parametrize(
    ("labels", "kwargs", "field"),
    [
        ({}, {}, RAY_POD_TYPE_LABEL),
        ({"kubernetes.io/hostname": "n"}, {}, POD_TYPE_LABEL),
        ({RAY_POD_TYPE_LABEL: "v5x-8", RAY_TOPOLOGY_LABEL: "2x2"}, {}, RAY_POD_TYPE_LABEL),
        ({RAY_POD_TYPE_LABEL: "v5litepod-16", RAY_TOPOLOGY_LABEL: "3x3"}, {}, RAY_TOPOLOGY_LABEL),
        ({RAY_POD_TYPE_LABEL: "v5litepod-16", RAY_TOPOLOGY_LABEL: "2x2"}, {}, RAY_TOPOLOGY_LABEL),
        ({GKE_ACCELERATOR_LABEL: "tpu-v9-slice", GKE_TOPOLOGY_LABEL: "2x2"}, {}, GKE_ACCELERATOR_LABEL),
        ({GKE_ACCELERATOR_LABEL: "tpu-v5p-slice"}, {}, GKE_TOPOLOGY_LABEL),
        ({GKE_TOPOLOGY_LABEL: "2x2x2"}, {"machine_type": "ct5p-hightpu-4t"}, None),
        ({GKE_TOPOLOGY_LABEL: "9x9"}, {"machine_type": "ct6e-standard-4t"}, GKE_TOPOLOGY_LABEL),
        ({RAY_POD_TYPE_LABEL: "v5litepod-4", RAY_TOPOLOGY_LABEL: "2x2"}, {"chips_per_host": 3}, "chips per host"),
    ],
)
def test_errors_name_the_label(labels: dict[str, str], kwargs: dict[str, object], field: str | None) -> None:
    if field is None:
        assert slice_from_labels(labels, **kwargs)  # type: ignore[arg-type]
        return
    with pytest.raises(TopologyError) as err:
        slice_from_labels(labels, **kwargs)  # type: ignore[arg-type]
    assert field in err.value.field
