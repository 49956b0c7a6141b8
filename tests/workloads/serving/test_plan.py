"""The pure parts of serving: what a replica asks Ray for, what it checks of where its workers run, request rows,
and slice_app's refusals (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL, RAY_TOPOLOGY_LABEL, RAY_WORKER_ID_LABEL
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.seats import PlacementError, Seat
from tpuray.workloads.serving.plan import check_rows, parse_slice, plan_chips, slice_request, split_rows


def _seats(tpu_slice: TpuSlice, names: list[str]) -> list[Seat]:
    """One seat per chip, chip i on the slice ``names[i]``."""
    labels = {RAY_POD_TYPE_LABEL: tpu_slice.pod_type, RAY_TOPOLOGY_LABEL: tpu_slice.topology}
    return [
        Seat(
            actor_index=i,
            slice_index=0,
            slice_name=names[i],
            worker_id=i // tpu_slice.chips_per_host,
            chip=i % tpu_slice.chips_per_host,
            address=f"10.0.0.{i // tpu_slice.chips_per_host}",
            labels={**labels, RAY_WORKER_ID_LABEL: str(i // tpu_slice.chips_per_host)},
        )
        for i in range(tpu_slice.chips)
    ]


def test_a_single_host_slice_is_one_strictly_packed_bundle_per_chip_of_its_pod_type() -> None:
    req = slice_request(TpuSlice.parse("v5e:2x2"))
    kw = req.kwargs()
    assert kw["strategy"] == "STRICT_PACK"  # Ray pins no slice name on a single host: one node is the slice
    assert kw["resources_per_bundle"] == {"CPU": 1.0, "TPU": 1.0}
    assert kw["chips_per_vm"] == 4 and kw["topology"] == "2x2" and kw["accelerator_version"] == "TPU-V5LITEPOD"
    assert (
        kw["bundle_label_selector"]
        == [{RAY_POD_TYPE_LABEL: "v5litepod-4", RAY_TOPOLOGY_LABEL: "2x2", RAY_WORKER_ID_LABEL: "0"}] * 4
    )


def test_a_multi_host_slice_pins_each_bundle_to_its_host() -> None:
    kw = slice_request(TpuSlice.parse("v5p:2x2x2")).kwargs()
    assert kw["strategy"] == "SPREAD"
    assert [s[RAY_WORKER_ID_LABEL] for s in kw["bundle_label_selector"]] == ["0"] * 4 + ["1"] * 4
    assert {s[RAY_POD_TYPE_LABEL] for s in kw["bundle_label_selector"]} == {"v5p-16"}


def test_the_bundles_are_what_ray_util_tpu_computes_for_the_slice() -> None:
    """Ray's own arithmetic (ray/util/tpu.py, get_tpu_worker_resources) agrees: one bundle per chip."""
    from ray.util.tpu import get_tpu_worker_resources

    for spec in ("v5e:2x2", "v5p:2x2x2", "v6e:1x1", "v5e:4x4"):
        s = TpuSlice.parse(spec)
        kw = slice_request(s).kwargs()
        n, per = get_tpu_worker_resources(
            s.topology, kw["accelerator_version"], kw["resources_per_bundle"], chips_per_vm=s.chips_per_host
        )
        assert (n, per) == (len(kw["bundle_label_selector"]), kw["resources_per_bundle"]) == (s.chips, per)


def test_workers_on_one_slice_get_their_chips_in_rank_order() -> None:
    s = TpuSlice.parse("v5p:2x2x2")
    plan = plan_chips(s, list(reversed(_seats(s, ["a"] * 8))))
    assert [a.rank for a in plan] == list(range(8))
    assert [(a.worker_id, a.chip) for a in plan] == [(w, c) for w in range(2) for c in range(4)]
    assert plan[5].env["TPU_VISIBLE_CHIPS"] == "1" and plan[5].env["CLOUD_TPU_TASK_ID"] == "5"


def test_workers_that_straddle_slices_are_refused() -> None:
    s = TpuSlice.parse("v5e:2x2")
    with pytest.raises(PlacementError, match=r"straddle Ray slices \['a', 'b'\]"):
        plan_chips(s, _seats(s, ["a", "a", "b", "b"]))


def test_workers_on_another_shape_are_refused() -> None:
    with pytest.raises(PlacementError, match="asked for a v5e:2x2 slice"):
        plan_chips(TpuSlice.parse("v5e:2x2"), _seats(TpuSlice.parse("v6e:2x2"), ["a"] * 4))


def test_a_bad_topology_names_the_field_and_the_form() -> None:
    with pytest.raises(ValueError, match=r"topology: .*'GEN:TOPOLOGY'"):
        parse_slice("v5e:3x3")
    with pytest.raises(ValueError, match="topology: a slice shape 'GEN:TOPOLOGY'"):
        parse_slice(4)  # type: ignore[arg-type]


def test_rows_are_split_over_the_chips_in_order() -> None:
    rows = [[float(i)] for i in range(6)]
    assert split_rows(rows, 4) == [[[0.0], [1.0]], [[2.0], [3.0]], [[4.0]], [[5.0]]]
    assert split_rows(rows[:2], 4) == [[[0.0]], [[1.0]], [], []]
    assert [r for part in split_rows(rows, 4) for r in part] == rows
    with pytest.raises(ValueError, match="parts: a whole number >= 1"):
        split_rows(rows, 0)


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ([], "got list"),
        ("x", "got str"),
        ([[1.0], [1.0, 2.0]], "row 1 has 2 numbers, row 0 has 1"),
        ([[1.0], ["a"]], "row 1 is"),
        ([[float("nan")]], "row 0 is"),
        ([[True]], "row 0 is"),
    ],
)
def test_bad_rows_name_the_field_and_the_form(rows: Any, said: str) -> None:
    with pytest.raises(ValueError, match=r"inputs: a non-empty list of rows of numbers") as e:
        check_rows(rows)
    assert said in str(e.value)


def test_slice_app_refuses_what_it_cannot_serve() -> None:
    from tpuray.workloads.serving import slice_app
    from tpuray.workloads.serving.example import tiny_model

    with pytest.raises(ValueError, match="num_replicas: a whole number >= 1"):
        slice_app(tiny_model, "v5e:2x2", num_replicas=0)
    with pytest.raises(ValueError, match="model: a module-level function"):
        slice_app("m", "v5e:2x2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topology: "):
        slice_app(tiny_model, "v5e")
    with pytest.raises(ValueError, match="placement_group_bundles: not options of slice_app"):
        slice_app(tiny_model, "v5e:2x2", placement_group_bundles=[{"TPU": 4}])
    with pytest.raises(ValueError, match="user_config: a mapping"):
        slice_app(tiny_model, "v5e:2x2", user_config=[1])  # type: ignore[arg-type]
    app = slice_app(tiny_model, "v5e:2x2", num_replicas=2, user_config={"seed": 3})
    d = app._bound_deployment
    assert d.num_replicas == 2 and d.user_config == {"seed": 3} and d.ray_actor_options["num_cpus"] == 0


def test_the_example_model_refuses_an_unknown_config() -> None:
    from tpuray.workloads.serving.example import tiny_model

    with pytest.raises(ValueError, match=r"user_config: unknown key\(s\) \['lr'\]"):
        tiny_model({"lr": 1})
    with pytest.raises(ValueError, match=r"user_config\.seed: an integer"):
        tiny_model({"seed": "1"})
