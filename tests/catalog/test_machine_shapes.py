"""The one table of machine shapes (``catalog.machine_shapes``) against the rules its sources document, and the
config refusing every machine type the table does not hold, naming ``cluster.systemMachineType``.

The documented figures below are written here once, from the family pages (checked 2026-12-04), not read from the
code: each predefined type of a series has its type class's GB per vCPU, or is a documented exception.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support.stacks import minimal_values
from tpuray.components.catalog.machine_shapes import (
    CPU_MACHINE_TYPES,
    TPU_HOST_MACHINE_TYPES,
    MachineShape,
    machine_shape,
    machine_type_problem,
    nearest_machine_types,
)
from tpuray.components.catalog.machine_types import allocatable, schedulable
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.config import ConfigError, load_stack_file, parse_stack_config
from tpuray.components.config.cluster import ClusterConfig

ROOT = Path(__file__).resolve().parents[2]
GENERAL = "https://cloud.google.com/compute/docs/general-purpose-machines"
COMPUTE = "https://cloud.google.com/compute/docs/compute-optimized-machines"

# series -> (GB per vCPU of each type class, most vCPUs of a predefined type, the page)
DOCUMENTED: dict[str, tuple[dict[str, float], int, str]] = {
    "e2": ({"standard": 4, "highmem": 8, "highcpu": 1}, 32, GENERAL),
    "n1": ({"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}, 96, GENERAL),
    "n2": ({"standard": 4, "highmem": 8, "highcpu": 1}, 128, GENERAL),
    "n2d": ({"standard": 4, "highmem": 8, "highcpu": 1}, 224, GENERAL),
    "n4": ({"standard": 4, "highmem": 8, "highcpu": 2}, 80, GENERAL),
    "c3": ({"standard": 4, "highmem": 8, "highcpu": 2}, 176, GENERAL),
    "c3d": ({"standard": 4, "highmem": 8, "highcpu": 2}, 360, GENERAL),
    "c4": ({"standard": 3.75, "highmem": 7.75, "highcpu": 2}, 288, GENERAL),
    "t2d": ({"standard": 4}, 60, GENERAL),
    "c2": ({"standard": 4}, 60, COMPUTE),
    "c2d": ({"standard": 4, "highmem": 8, "highcpu": 2}, 112, COMPUTE),
}
# Types whose memory the Compute API's machineTypes list gives off their class's ratio: GB, and where it says so.
EXCEPTIONS: dict[str, tuple[float, str]] = {
    "n2-highmem-128": (864, GENERAL + " (N2: highmem-128 has 864 GB, the series' most)"),
    "c4-standard-2": (7, GENERAL + " (C4 machine types table)"),
    "c4-highmem-2": (15, GENERAL + " (C4 machine types table)"),
    "c3d-highcpu-30": (59, GENERAL + " (C3D machine types table)"),
    "c3d-highcpu-60": (118, GENERAL + " (C3D machine types table)"),
    "c3d-highcpu-90": (177, GENERAL + " (C3D machine types table)"),
    "c3d-highcpu-180": (354, GENERAL + " (C3D machine types table)"),
    "c3d-highcpu-360": (708, GENERAL + " (C3D machine types table)"),
}
# Figures quoted from the Compute API's machineTypes list (vCPUs, GB).
API_FIGURES = {
    "e2-standard-8": (8, 32),
    "e2-standard-32": (32, 128),
    "n1-standard-1": (1, 3.75),
    "n1-highcpu-16": (16, 14.4),
    "n2-highmem-128": (128, 864),
    "c4-standard-2": (2, 7),
    "c4-highmem-2": (2, 15),
    "c3d-highcpu-30": (30, 59),
    "c3d-highcpu-360": (360, 708),
    "ct5lp-hightpu-1t": (24, 48),
    "ct5p-hightpu-4t": (208, 448),
    "ct6e-standard-8t": (360, 1440),
    "tpu7x-standard-1t": (56, 240),
}
GIB = 1024


def _problems(machine: str) -> dict[str, str]:
    """The config's problems with ``machine`` as the system machine type ({} for none)."""
    try:
        parse_stack_config(minimal_values(cluster={"systemMachineType": machine}))
    except ConfigError as e:
        return dict(e.problems)
    return {}


def test_every_predefined_type_follows_its_series_rule_or_is_a_documented_exception() -> None:
    off_rule = []
    for name, shape in CPU_MACHINE_TYPES.items():
        series, kind, vcpus = name.split("-")
        ratios, most, _ = DOCUMENTED[series]  # a series the table holds has its rule written above
        assert shape.vcpus == int(vcpus) <= most and shape.tpu_chips == 0, name
        if name in EXCEPTIONS:
            assert shape.memory_mib == round(EXCEPTIONS[name][0] * GIB), name
        elif shape.memory_mib != round(ratios[kind] * shape.vcpus * GIB):
            off_rule.append(name)
    assert off_rule == []
    assert set(EXCEPTIONS) <= set(CPU_MACHINE_TYPES)  # each exception is one the table holds


def test_the_figures_the_api_gives() -> None:
    for name, (vcpus, gb) in API_FIGURES.items():
        shape = machine_shape(name)
        assert shape is not None and (shape.vcpus, shape.memory_mib) == (vcpus, round(gb * GIB)), name


def test_the_tpu_hosts_are_the_ones_the_topology_plans_onto() -> None:
    planned = {m: chips for g in GENERATIONS for m, chips in g.machine_types.items()}
    assert {m: s.tpu_chips for m, s in TPU_HOST_MACHINE_TYPES.items()} == planned


@pytest.mark.parametrize(
    ("machine", "hint"),
    [
        ("e2-standard-64", "e2-standard-32"),  # E2 stops at 32 vCPUs
        ("e2-custom-2-65536", "at most 16384 MiB"),  # E2 custom: at most 8 GB per vCPU
        ("e2-custom-3-4096", "vCPUs"),  # E2 custom: an even number of vCPUs
        ("e2-custom-4-4000", "multiple of 256"),
        ("n2-custom-2-65536", "-ext"),  # above 8 GB per vCPU is extended memory, named so
        ("e2-custom-2-8192-ext", "no extended memory"),  # E2 has none
        ("n2-custom-2-1048576-ext", "at most 638976 MiB"),  # N2 extended memory: up to 624 GB
        ("n2d-custom-6-12288", "vCPUs"),  # N2D custom: 2, 4, 8, 16, then multiples of 16
        ("custom-2-1024", "at least"),  # N1 custom: at least 0.9 GB per vCPU
        ("c2-custom-4-16384", "custom types"),  # C series have no custom types
        ("n2-highmem-256", "n2-highmem-128"),
        ("c4d-standard-8", "nearest valid types"),
        ("e2-medium", "nearest valid types"),  # shared-core: left out
        ("c3-standard-8-lssd", "c3-standard-8"),
        ("c4a-standard-8", "Arm"),  # GKE taints Arm nodes; nothing on the system pool tolerates it
    ],
)
def test_impossible_or_unlisted_types_are_refused_naming_the_field(machine: str, hint: str) -> None:
    assert machine_shape(machine) is None
    found = _problems(machine)
    assert hint in found["cluster.systemMachineType"], found
    with pytest.raises(ValidationError) as e:  # by the model itself, not only a rule run after it
        ClusterConfig.model_validate({"systemMachineType": machine})
    assert [err["loc"] for err in e.value.errors()] == [("systemMachineType",)]


@pytest.mark.parametrize(
    ("machine", "shape"),
    [
        ("e2-custom-2-16384", MachineShape(2, 16384)),
        ("e2-custom-32-131072", MachineShape(32, 131072)),
        ("n2-custom-8-32768", MachineShape(8, 32768)),
        ("n2-custom-2-65536-ext", MachineShape(2, 65536)),
        ("n2d-custom-48-49152", MachineShape(48, 49152)),
        ("custom-1-3840", MachineShape(1, 3840)),
    ],
)
def test_custom_types_within_their_series_limits_pass(machine: str, shape: MachineShape) -> None:
    assert machine_shape(machine) == shape
    assert "cluster.systemMachineType" not in _problems(machine)  # the head may not fit it: another field


def test_the_nearest_types_are_of_the_series_and_class_asked() -> None:
    assert nearest_machine_types("e2-standard-64")[0] == "e2-standard-32"
    assert nearest_machine_types("n2-highmem-256")[0] == "n2-highmem-128"
    assert nearest_machine_types("e2-custom-2-65536")[0].startswith("e2-")
    assert nearest_machine_types("c4a-standard-8")[0] == "c4-standard-8"


def test_a_node_of_a_type_the_table_lacks_offers_nothing_known() -> None:
    """What the review's pod-fit rule reads for a planned pool: unknown (None), never a derived figure."""
    for machine in ("e2-standard-64", "e2-custom-2-65536", "c4d-standard-8"):
        assert allocatable(machine) is None and schedulable(machine) is None
    assert schedulable("e2-custom-2-16384") is not None


# ---- must-accept: the shipped and the test stacks --------------------------------------------------------------
STACKS = sorted([*ROOT.glob("Pulumi.*.yaml"), *(ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml")])


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.name)
def test_the_stacks_machine_types_are_in_the_table(path: Path) -> None:
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    config = load_stack_file(path, stack)
    assert machine_shape(config.cluster.system_machine_type) is not None
    for pool in config.slice_pools:
        assert pool.tpu_slice.machine_type in TPU_HOST_MACHINE_TYPES


# ---- the same, generated ------------------------------------------------------------------------------------------
GEN = settings(max_examples=30, deadline=None)
_KINDS = ["standard", "highmem", "highcpu", "highgpu", "ultramem", "megamem", "micro"]


def _refused(machine: str) -> str:
    return _problems(machine)["cluster.systemMachineType"]


@GEN
@given(
    st.sampled_from([*sorted(DOCUMENTED), "c4a", "c4d", "n4d", "m3", "h3", "z3", "t2a", "zz9"]),
    st.sampled_from(_KINDS),
    st.integers(min_value=1, max_value=2048),
    st.sampled_from(["", "-lssd", "-metal"]),
)
def test_generated_names_the_table_lacks_are_refused_with_the_field(
    series: str, kind: str, vcpus: int, tail: str
) -> None:
    name = f"{series}-{kind}-{vcpus}{tail}"
    if name in CPU_MACHINE_TYPES:
        assert machine_shape(name) is not None
        return
    assert machine_shape(name) is None
    message = _refused(name)
    assert name in message or "accelerator" in message


# E2 custom, as the custom-machine-type page documents it: 2 to 32 vCPUs in multiples of 2, 0.5 to 8 GB per vCPU,
# memory in multiples of 256 MB, no extended memory.
def _e2_custom_valid(vcpus: int, mib: int) -> bool:
    return vcpus % 2 == 0 and 2 <= vcpus <= 32 and mib % 256 == 0 and vcpus * 512 <= mib <= vcpus * 8192


@GEN
@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=600) | st.just(0))
def test_generated_e2_custom_types_pass_exactly_within_the_documented_limits(vcpus: int, quarter_gib: int) -> None:
    mib = quarter_gib * 256 or vcpus * 8192 + 256  # just above the limit, where 0 was drawn
    name = f"e2-custom-{vcpus}-{mib}"
    if _e2_custom_valid(vcpus, mib):
        assert machine_shape(name) == MachineShape(vcpus, mib)
        assert "cluster.systemMachineType" not in _problems(name)
    else:
        assert machine_shape(name) is None
        assert name in _refused(name)


@GEN
@given(st.from_regex(re.compile(r"[a-z][a-z0-9]{0,4}(-[a-z0-9]{1,8}){1,3}"), fullmatch=True))
def test_generated_machine_type_names_are_known_or_refused(name: str) -> None:
    """Whatever the name, it has a shape from the table (or a valid custom type) or the config refuses it."""
    known = machine_shape(name) is not None and name not in TPU_HOST_MACHINE_TYPES
    assert (machine_type_problem(name) is None) == (machine_shape(name) is not None)
    assert ("cluster.systemMachineType" in _problems(name)) == (not known)


def test_the_shipped_stacks_name_their_system_machine_type_or_take_the_default() -> None:
    for path in ROOT.glob("Pulumi.*.yaml"):
        cluster = yaml.safe_load(path.read_text())["config"].get("tpuray:cluster", {})
        assert machine_shape(cluster.get("systemMachineType", "e2-standard-8")) is not None, path.name
