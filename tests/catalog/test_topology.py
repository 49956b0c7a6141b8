"""The topology catalog against the public facts (GKE TPU and Cloud TPU docs, xpk, Ray), encoded here as data."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.topology import GENERATIONS, TopologyError, TpuSlice, generation, valid_topologies

# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus
# generation -> (GKE accelerator label, {machine type: chips}, cores per chip, dims, Ray type)
GENERATION_FACTS = {
    "v4": ("tpu-v4-podslice", {"ct4p-hightpu-4t": 4}, 2, 3, "TPU-V4"),
    "v5e": (
        "tpu-v5-lite-podslice",
        {"ct5lp-hightpu-1t": 1, "ct5lp-hightpu-4t": 4, "ct5lp-hightpu-8t": 8},
        1,
        2,
        "TPU-V5LITEPOD",
    ),
    "v5p": ("tpu-v5p-slice", {"ct5p-hightpu-4t": 4}, 2, 3, "TPU-V5P"),
    "v6e": (
        "tpu-v6e-slice",
        {"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8},
        1,
        2,
        "TPU-V6E",
    ),
    "tpu7x": ("tpu7x", {"tpu7x-standard-1t": 1, "tpu7x-standard-4t": 4}, 2, 3, "TPU-V7X"),
}

# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#topology
# (generation, topology, machine type or None) -> (chips, hosts, chips per host, placement)
SHAPES_2D = [
    ("1x1", None, 1, 1, 1, "none"),
    ("2x2", None, 4, 1, 4, "none"),
    ("2x4", None, 8, 1, 8, "none"),
    ("2x4", "-4t", 8, 2, 4, "compact"),
    ("4x4", None, 16, 4, 4, "compact"),
    ("4x8", None, 32, 8, 4, "compact"),
    ("8x8", None, 64, 16, 4, "compact"),
    ("8x16", None, 128, 32, 4, "compact"),
    ("16x16", None, 256, 64, 4, "compact"),
]
COMMON_3D = ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"]


@pytest.mark.parametrize("name", list(GENERATION_FACTS))
def test_generation_rows_match_the_facts(name: str) -> None:
    label, machines, cores, ndims, ray_type = GENERATION_FACTS[name]
    g = generation(name)
    assert (g.gke_accelerator, dict(g.machine_types), g.cores_per_chip, g.ndims, g.ray_accelerator_type) == (
        label,
        machines,
        cores,
        ndims,
        ray_type,
    )


def test_catalog_has_exactly_the_documented_generations() -> None:
    assert sorted(g.name for g in GENERATIONS) == sorted(GENERATION_FACTS)


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("v5litepod", "v5e"),
        ("V5E", "v5e"),
        ("tpu7x", "tpu7x"),
        ("v7x", "tpu7x"),
        ("ironwood", "tpu7x"),
        ("trillium", "v6e"),
        ("v5p", "v5p"),
        ("v4", "v4"),
    ],
)
def test_aliases(alias: str, canonical: str) -> None:
    assert generation(alias).name == canonical
    assert TpuSlice.parse(alias, "2x2" if generation(canonical).ndims == 2 else "2x2x1").generation == canonical


@pytest.mark.parametrize("gen", ["v5e", "v6e"])
@pytest.mark.parametrize(("topo", "machine_suffix", "chips", "hosts", "per_host", "placement"), SHAPES_2D)
def test_2d_shapes(
    gen: str, topo: str, machine_suffix: str | None, chips: int, hosts: int, per_host: int, placement: str
) -> None:
    machine = None
    if machine_suffix:
        machine = next(m for m in GENERATION_FACTS[gen][1] if m.endswith(machine_suffix))
    s = TpuSlice.parse(gen, topo, machine)
    assert (s.chips, s.hosts, s.chips_per_host, s.placement) == (chips, hosts, per_host, placement)
    assert s.multi_host == (hosts > 1)
    assert GENERATION_FACTS[gen][1][s.machine_type] == per_host


@pytest.mark.parametrize("gen", ["v4", "v5p", "tpu7x"])
@pytest.mark.parametrize("topo", COMMON_3D)
def test_3d_common_shapes(gen: str, topo: str) -> None:
    s = TpuSlice.parse(gen, topo)
    dims = tuple(int(x) for x in topo.split("x"))
    assert s.chips == math.prod(dims)
    assert s.chips_per_host == 4
    assert s.hosts == s.chips // 4
    expected = "none" if topo == "2x2x1" else ("workload-policy" if gen == "tpu7x" else "compact")
    assert s.placement == expected


@pytest.mark.parametrize(
    ("gen", "topo", "machine", "pod_type"),
    [
        ("v4", "2x2x2", None, "v4-16"),
        ("v5p", "4x4x8", None, "v5p-256"),
        ("v6e", "4x4", None, "v6e-16"),
        ("v5e", "2x2", None, "v5litepod-4"),
        ("tpu7x", "2x2x4", None, "v7x-32"),
        ("v6e", "2x4", "ct6e-standard-4t", "v6e-8"),
    ],
)
def test_pod_type_names(gen: str, topo: str, machine: str | None, pod_type: str) -> None:
    s = TpuSlice.parse(gen, topo, machine)
    assert s.pod_type == pod_type
    assert TpuSlice.parse_pod_type(pod_type, topo).chips == s.chips


@pytest.mark.parametrize(
    ("pod_type", "expected"),
    [
        ("v5p-256", "v5p:4x4x8"),
        ("v4-16", "v4:2x2x2"),
        ("v6e-8", "v6e:2x4"),
        ("v5litepod-16", "v5e:4x4"),
        ("v7x-16", "tpu7x:2x2x2"),
        ("tpu7x-128", "tpu7x:4x4x4"),
        ("v5litepod-1", "v5e:1x1"),
    ],
)
def test_parse_pod_type_defaults(pod_type: str, expected: str) -> None:
    assert str(TpuSlice.parse_pod_type(pod_type)) == expected


@pytest.mark.parametrize(
    ("gen", "topo", "machine", "hosts", "per_host"),
    [
        ("v5e", "4x8", None, (2, 4, 1), (2, 2, 1)),
        ("v4", "2x2x4", None, (1, 1, 4), (2, 2, 1)),
        ("v6e", "2x4", None, (1, 1, 1), (2, 4, 1)),
        ("v6e", "1x1", None, (1, 1, 1), (1, 1, 1)),
        ("v5p", "4x4x8", None, (2, 2, 8), (2, 2, 1)),
    ],
)
def test_bounds(gen: str, topo: str, machine: str | None, hosts: tuple[int, ...], per_host: tuple[int, ...]) -> None:
    s = TpuSlice.parse(gen, topo, machine)
    assert s.host_bounds == hosts
    assert s.chips_per_host_bounds == per_host


# ---- invalid input: one row per rule ----------------------------------------------------------------------
INVALID = [
    ("v9", "2x2", None, "generation", "valid choices"),
    ("", "2x2", None, "generation", "valid choices"),
    ("v6e", "3x3", None, "topology", "nearest valid shapes: 4x4"),
    ("v6e", "4x4x4", None, "topology", "have 2"),
    ("v5p", "4x4", None, "topology", "have 3"),
    ("v5p", "2x2x3", None, "topology", "2x2x1, 2x2x2, 2x2x4, 2x4x4"),
    ("v5p", "4x4x6", None, "topology", "multiple of 4"),
    ("v5p", "4x4x512", None, "topology", "between 4 and 256"),
    ("v4", "16x16x32", None, "topology", "exceed the v4 limit of 64"),
    ("v5p", "16x16x48", None, "topology", "exceed the v5p limit of 96"),
    ("tpu7x", "16x16x40", None, "topology", "exceed the tpu7x limit of 144"),
    ("v5p", "4x8x4", None, "topology", "nearest valid shapes: 4x4x8"),
    ("tpu7x", "8x4x4", None, "topology", "non-decreasing"),
    ("v6e", "four", None, "topology", "AxB"),
    ("v6e", "2x2", "ct5lp-hightpu-4t", "machine_type", "ct6e-standard-1t"),
    ("v6e", "4x4", "ct6e-standard-8t", "machine_type", "ct6e-standard-4t"),
    ("v5e", "2x2", "ct5lp-hightpu-1t", "machine_type", "ct5lp-hightpu-4t"),
]


@pytest.mark.parametrize(("gen", "topo", "machine", "field", "hint"), INVALID)
def test_invalid_inputs_name_the_field_and_the_choices(
    gen: str, topo: str, machine: str | None, field: str, hint: str
) -> None:
    with pytest.raises(TopologyError) as err:
        TpuSlice.parse(gen, topo, machine)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert hint in str(err.value)
    assert isinstance(err.value, ValueError)


def test_v4_follows_xpk_and_allows_unordered_dims() -> None:
    assert TpuSlice.parse("v4", "8x4x4").chips == 128


@pytest.mark.parametrize("bad", ["v5p-255", "v5p-12", "v9-8", "nonsense", "v6e-3"])
def test_bad_pod_types(bad: str) -> None:
    with pytest.raises(TopologyError) as err:
        TpuSlice.parse_pod_type(bad)
    assert err.value.field in {"pod_type", "topology"}


def test_pod_type_and_topology_must_agree() -> None:
    with pytest.raises(TopologyError, match="has 16 chips but pod type 'v5p-256' has 128"):
        TpuSlice.parse_pod_type("v5p-256", "2x2x4")


# ---- properties -------------------------------------------------------------------------------------------
@st.composite
def slices(draw: st.DrawFn) -> TpuSlice:
    g = draw(st.sampled_from(GENERATIONS))
    topo = draw(st.sampled_from(valid_topologies(g.name)))
    machine = draw(st.sampled_from([None, *g.machine_types]))
    try:
        return TpuSlice.parse(g.name, topo, machine)
    except TopologyError:
        return TpuSlice.parse(g.name, topo)


@settings(max_examples=300)
@given(slices())
def test_slice_invariants(s: TpuSlice) -> None:
    assert s.chips == s.hosts * s.chips_per_host
    assert tuple(h * c for h, c in zip(s.host_bounds, s.chips_per_host_bounds, strict=True)) == s.dims
    assert TpuSlice.parse(str(s)) == s
    assert TpuSlice.parse(s.generation, s.topology, s.machine_type) == s
    assert s.multi_host == (s.placement != "none")
    assert TpuSlice.parse_pod_type(s.pod_type, s.topology).chips == s.chips


@settings(max_examples=300)
@given(st.sampled_from([g.name for g in GENERATIONS]), st.text(max_size=12), st.none() | st.text(max_size=20))
def test_arbitrary_input_raises_only_topology_errors(gen: str, topo: str, machine: str | None) -> None:
    try:
        TpuSlice.parse(gen, topo, machine)
    except TopologyError as e:
        assert e.field in {"topology", "machine_type"}


def test_topology_and_config_import_no_pulumi() -> None:
    code = (
        "import sys, tpuray.components.catalog.topology, tpuray.components.config, tpuray.components.cli;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'pulumi', 'pulumi_gcp', 'pulumi_kubernetes'});"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ray_reads_our_slices_the_same_way() -> None:
    """Ray's own TPU tables (ray._private.accelerators.tpu) agree with the catalog on every shape both know."""
    ray_tpu = pytest.importorskip("ray._private.accelerators.tpu")
    checked = 0
    for g in GENERATIONS:
        ray_shapes = ray_tpu.VALID_TPU_TOPOLOGY[g.pod_type_prefix]
        for topo in valid_topologies(g.name):
            s = TpuSlice.parse(g.name, topo)
            assert ray_tpu.infer_tpu_pod_type_from_topology(topo, s.ray_accelerator_type) == s.pod_type
            if topo in ray_shapes:
                assert ray_tpu.get_chips_per_host(topo, g.pod_type_prefix) == s.chips_per_host, (g.name, topo)
                checked += 1
    assert checked >= 40


def test_v5p_largest_slice_is_96_cubes() -> None:
    assert TpuSlice.parse("v5p", "16x16x24").chips == 6144
    with pytest.raises(ValueError, match="limit of 96"):
        TpuSlice.parse("v5p", "16x20x24")  # 120 cubes: in the 8960-chip pod, but no job may be scheduled on it


def test_tpu7x_has_a_one_chip_single_host_machine_type() -> None:
    s = TpuSlice.parse("tpu7x", "1x1x1")
    assert (s.chips, s.hosts, s.machine_type) == (1, 1, "tpu7x-standard-1t")
