"""The Ray pods fit their nodes, every mount path is a path of its own, and a memory file cache fits its node: each
refused at ``tpuray config check`` naming the field, before any pod is refused or left pending on the cluster.

GKE's reservations are the plan-node-sizes page's (``tpuray.components.catalog.machine_types``); the paths the
image and Ray use are ``tpuray.components.catalog.container_paths``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.stacks import minimal_values
from tpuray.components.catalog.container_paths import RESERVED_PATHS, reserved_path_clash
from tpuray.components.catalog.machine_shapes import MachineShape, machine_shape
from tpuray.components.catalog.machine_types import (
    DAEMONSET_HEADROOM,
    allocatable,
    gke_reserved_cpu_millicores,
    gke_reserved_memory_mib,
    image_streaming_reserved_memory_mib,
    schedulable,
)
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.config import ConfigError, load_stack_file, parse_stack_config

ROOT = Path(__file__).resolve().parents[2]


def problems_of(values: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values)
    return {path: message for path, message in e.value.problems}


def prod_values(**edits: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    values: dict[str, Any] = {k.removeprefix("tpuray:"): v for k, v in doc["config"].items()}
    for section, fields in edits.items():
        values[section] = {**values.get(section, {}), **fields}
    return values


# ---- the catalog's arithmetic ------------------------------------------------------------------------------------
def test_gke_reservations_follow_the_page_tier_by_tier() -> None:
    # memory: 25% of 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128
    assert gke_reserved_memory_mib(32 * 1024) == round((1 + 0.8 + 0.8 + 0.06 * 16) * 1024)
    assert gke_reserved_memory_mib(256 * 1024) == round((1 + 0.8 + 0.8 + 0.06 * 112 + 0.02 * 128) * 1024)
    assert gke_reserved_memory_mib(512) == 255  # below 1 GiB
    # CPU: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4
    assert gke_reserved_cpu_millicores(1) == 60
    assert gke_reserved_cpu_millicores(8) == 60 + 10 + 10 + 10
    assert gke_reserved_cpu_millicores(208) == 60 + 10 + 10 + round(2.5 * 204)
    # image streaming, on top: 10% of 4 GiB, 8% of the next 4, 4% of the next 8, 2.4% of the next 112, 0.8% above
    assert image_streaming_reserved_memory_mib(32 * 1024) == round((0.4 + 0.32 + 0.32 + 0.024 * 16) * 1024)
    assert image_streaming_reserved_memory_mib(448 * 1024) == round(
        (0.4 + 0.32 + 0.32 + 0.024 * 112 + 0.008 * 320) * 1024
    )
    assert image_streaming_reserved_memory_mib(512) == 0  # below 1 GiB


def test_an_e2_standard_8_offers_pods_7910m_and_about_28_3_gib() -> None:
    a = allocatable("e2-standard-8")
    assert a is not None and a.cpu_millicores == 7910 and a.tpu == 0
    assert round(a.memory_mib / 1024, 1) == 28.3  # 32 GiB - 3.56 GiB reserved - 100 MiB eviction threshold
    s = schedulable("e2-standard-8")
    assert s == a.minus(DAEMONSET_HEADROOM)


def test_every_tpu_host_offers_its_chips() -> None:
    for g in GENERATIONS:
        for machine, chips in g.machine_types.items():
            a = allocatable(machine)
            assert a is not None and a.tpu == chips and a.cpu_millicores > 0, machine
    # the Compute API's machineTypes list: ct6e-standard-8t has 360 vCPUs and 1440 GiB, tpu7x-standard-1t 56 and 240
    assert machine_shape("ct6e-standard-8t") == MachineShape(360, 1440 * 1024, 8)
    assert machine_shape("tpu7x-standard-1t") == MachineShape(56, 240 * 1024, 1)


@pytest.mark.parametrize("machine", ["c4d-standard-8", "e2-medium", "m3-ultramem-32", "zz-standard-8", "e2-standard"])
def test_an_unknown_machine_type_is_unknown(machine: str) -> None:
    assert machine_shape(machine) is None and allocatable(machine) is None


# ---- the head against its system node ----------------------------------------------------------------------------
def test_the_head_shipped_in_prod_until_now_is_refused_naming_both_fields() -> None:
    """headCpu 8 and headMemory 32Gi on e2-standard-8: the combination the prod stacks shipped."""
    found = problems_of(prod_values(ray={"headCpu": "8", "headMemory": "32Gi"}))
    assert set(found) == {"ray.headCpu", "ray.headMemory"}
    assert "e2-standard-8" in found["ray.headCpu"] and "cluster.systemMachineType" in found["ray.headCpu"]
    assert "7410m" in found["ray.headCpu"] and "27999Mi" in found["ray.headMemory"]


def test_a_larger_system_machine_type_takes_the_same_head() -> None:
    values = prod_values(ray={"headCpu": "8", "headMemory": "32Gi"}, cluster={"systemMachineType": "e2-standard-16"})
    assert parse_stack_config(values).ray.head_cpu == "8"


@pytest.mark.parametrize("stack", ["dev", "prod", "prod-dws"])
def test_the_shipped_stacks_heads_fit(stack: str) -> None:
    load_stack_file(ROOT / f"Pulumi.{stack}.yaml")


def test_an_unknown_system_machine_type_is_refused_as_unknown() -> None:
    found = problems_of(minimal_values(cluster={"systemMachineType": "c4d-standard-8"}))
    assert "not a machine type tpuray knows" in found["cluster.systemMachineType"]
    assert "nearest valid types: " in found["cluster.systemMachineType"]


def test_the_autoscaler_sidecar_counts_where_a_pool_scales() -> None:
    """A head that fits only without KubeRay's autoscaler (500m) is refused once a shared-cluster pool scales."""
    head = {"headCpu": "7000m", "headMemory": "8Gi"}  # 7410m - 250m (GCS FUSE sidecar) = 7160m of room
    kept = minimal_values(ray=head)
    kept["slicePools"][0]["autoscaling"] = {"enabled": False}
    parse_stack_config(kept)
    assert "ray.headCpu" in problems_of(minimal_values(ray=head))  # autoscaling from 0 slices by default


# ---- mount paths ---------------------------------------------------------------------------------------------------
def _own_cache(path: str) -> dict[str, Any]:
    return {"compileCache": {"bucket": "tpuray-test-proj-cache", "mountPath": path}}


@pytest.mark.parametrize(
    ("startup", "field", "hint"),
    [
        (_own_cache("/checkpoints"), "startup.compileCache.mountPath", "also checkpoints.mountPath"),
        (_own_cache("/checkpoints/cache"), "startup.compileCache.mountPath", "nested"),
        ({"dataMount": {"bucket": "tpuray-data", "mountPath": "/checkpoints"}}, "startup.dataMount.mountPath", "also"),
        ({"dataMount": {"bucket": "tpuray-data", "mountPath": "/"}}, "startup.dataMount.mountPath", "absolute path"),
        (_own_cache("/home/ray"), "startup.compileCache.mountPath", "/home/ray"),
        (_own_cache("/home"), "startup.compileCache.mountPath", "/home/ray"),
        ({"dataMount": {"bucket": "tpuray-data", "mountPath": "/tmp"}}, "startup.dataMount.mountPath", "temp dir"),
        (
            {"dataMount": {"bucket": "tpuray-data", "mountPath": "/tmp/ray/x"}},
            "startup.dataMount.mountPath",
            "/tmp/ray",
        ),
        ({"dataMount": {"bucket": "tpuray-data", "mountPath": "/etc"}}, "startup.dataMount.mountPath", "/etc/hosts"),
    ],
)
def test_a_mount_path_that_breaks_the_pod_is_refused_naming_the_field(
    startup: dict[str, Any], field: str, hint: str
) -> None:
    found = problems_of(minimal_values(startup=startup))
    assert field in found and hint in found[field], found


def test_side_by_side_paths_and_a_mount_inside_home_are_fine() -> None:
    startup = {**_own_cache("/compile-cache"), "dataMount": {"bucket": "tpuray-data", "mountPath": "/home/ray/data"}}
    parse_stack_config(minimal_values(startup=startup))


def test_the_compile_cache_path_is_not_a_mount_while_the_cache_rides_on_the_checkpoint_bucket() -> None:
    parse_stack_config(minimal_values(startup={"compileCache": {"mountPath": "/checkpoints"}}))


# ---- a file cache in memory against its node ---------------------------------------------------------------------
def test_a_memory_file_cache_larger_than_the_heads_node_is_refused_with_both_numbers() -> None:
    mount = {"fileCacheCapacity": "100Gi", "fileCacheMedium": "memory"}
    found = problems_of(prod_values(startup={"checkpointMount": mount}))
    message = found["startup.checkpointMount.fileCacheCapacity"]
    assert "102400Mi" in message and "the Ray head" in message and "e2-standard-8" in message
    room = int(message.split("leaving ")[1].split("Mi")[0])
    assert 0 < room < 4096  # 27999Mi offered, 24Gi + 768Mi requested


def test_a_memory_file_cache_that_fits_every_pod_passes_and_unlimited_never_does() -> None:
    parse_stack_config(
        minimal_values(startup={"checkpointMount": {"fileCacheCapacity": "1Gi", "fileCacheMedium": "memory"}})
    )
    found = problems_of(
        minimal_values(startup={"checkpointMount": {"fileCacheCapacity": "-1", "fileCacheMedium": "memory"}})
    )
    assert "unlimited" in found["startup.checkpointMount.fileCacheCapacity"]


def test_a_disk_file_cache_is_not_held_to_the_nodes_memory() -> None:
    parse_stack_config(minimal_values(startup={"checkpointMount": {"fileCacheCapacity": "1Ti"}}))


def test_an_explicit_disk_medium_beside_a_profile_is_refused() -> None:
    """The file says fileCacheMedium: disk; the profile's PersistentVolume would drop it without a word."""
    mount = {"profile": "checkpointing", "profileScanGranted": True, "fileCacheMedium": "disk"}
    values = minimal_values(cluster={"minMasterVersion": "1.35.1-gke.1616000"}, startup={"checkpointMount": mount})
    assert "fileCacheMedium" in problems_of(values)["startup.checkpointMount.fileCacheMedium"]


# ---- the same rules, generated ------------------------------------------------------------------------------------
def _hiding(r: str) -> st.SearchStrategy[str]:
    parents = ["/".join(r.split("/")[:i]) for i in range(2, r.count("/") + 1)]
    return st.sampled_from([r, *parents, r + "/"])


reserved_or_above = st.sampled_from(RESERVED_PATHS).flatmap(lambda r: _hiding(r.path))
inside_reserved = st.sampled_from([r for r in RESERVED_PATHS if r.beneath]).flatmap(
    lambda r: st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True).map(lambda leaf: f"{r.path}/{leaf}")
)
own_path = st.from_regex(r"/[a-z][a-z0-9-]{0,10}(/[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True).filter(
    lambda p: reserved_path_clash(p) is None
)
FIT = settings(max_examples=25, deadline=None)


@FIT
@given(reserved_or_above | inside_reserved, st.sampled_from(["data", "cache"]))
def test_generated_paths_the_image_or_ray_use_are_refused(path: str, which: str) -> None:
    startup = {"dataMount": {"bucket": "tpuray-data", "mountPath": path}} if which == "data" else _own_cache(path)
    field = "startup.dataMount.mountPath" if which == "data" else "startup.compileCache.mountPath"
    assert field in problems_of(minimal_values(startup=startup))


@FIT
@given(own_path, st.from_regex(r"(/[a-z][a-z0-9]{0,6}){0,2}", fullmatch=True))
def test_generated_nested_or_equal_mounts_are_refused(outer: str, tail: str) -> None:
    startup = {**_own_cache(outer + tail), "dataMount": {"bucket": "tpuray-data", "mountPath": outer}}
    assert "startup.dataMount.mountPath" in problems_of(minimal_values(startup=startup))


@FIT
@given(st.integers(min_value=1, max_value=4096))
def test_generated_memory_caches_are_held_to_the_heads_room(gib: int) -> None:
    """minimal_values()'s head asks 4 CPUs and 16Gi (+768Mi of sidecars) of an e2-standard-8's 27999Mi: 10847Mi of
    room."""
    mount = {"fileCacheCapacity": f"{gib}Gi", "fileCacheMedium": "memory"}
    values = minimal_values(startup={"checkpointMount": mount})
    if gib * 1024 <= 27999 - 16 * 1024 - 768:
        parse_stack_config(values)
    else:
        assert "startup.checkpointMount.fileCacheCapacity" in problems_of(values)
