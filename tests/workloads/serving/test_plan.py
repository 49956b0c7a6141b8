"""The pure parts of serving: what a replica asks Ray for (one bundle per host), what it checks of where its host
workers run, request rows, and slice_app's refusals and code version (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL, RAY_TOPOLOGY_LABEL, RAY_WORKER_ID_LABEL
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.seats import PlacementError, Seat
from tpuray.workloads.serving.plan import check_rows, chip_seats, parse_slice, plan_hosts, slice_request, split_rows


def _host(tpu_slice: TpuSlice, index: int, worker_id: int, name: str) -> Seat:
    """What ``probe(index, "xla", whole_host=True)`` reports for a host worker on host ``worker_id`` of ``name``."""
    labels = {**tpu_slice_labels(tpu_slice), RAY_WORKER_ID_LABEL: str(worker_id)}
    return Seat(index, 0, name, worker_id, -1, f"10.0.0.{worker_id}", labels=labels)


def tpu_slice_labels(tpu_slice: TpuSlice) -> dict[str, str]:
    return {RAY_POD_TYPE_LABEL: tpu_slice.pod_type, RAY_TOPOLOGY_LABEL: tpu_slice.topology}


def _seats(tpu_slice: TpuSlice, names: list[str], hosts: list[int] | None = None) -> list[Seat]:
    """One host worker per host, worker i on the slice ``names[i]`` and host ``hosts[i]`` (default i), each holding
    all of its host's chips, as the replica collects them (one seat per chip)."""
    hosts = list(range(len(names))) if hosts is None else hosts
    chips = range(tpu_slice.chips_per_host)
    return [s for i, n in enumerate(names) for s in chip_seats(_host(tpu_slice, i, hosts[i], n), chips)]


def test_a_single_host_slice_is_one_bundle_of_its_host_and_pod_type() -> None:
    req = slice_request(TpuSlice.parse("v5e:2x2"))
    kw = req.kwargs()
    assert kw["strategy"] == "STRICT_PACK"  # Ray pins no slice name on a single host: one node is the slice
    assert kw["resources_per_bundle"] == {"CPU": 1.0, "TPU": 4.0}
    assert kw["chips_per_vm"] == 4 and kw["topology"] == "2x2" and kw["accelerator_version"] == "TPU-V5LITEPOD"
    assert kw["bundle_label_selector"] == [
        {RAY_POD_TYPE_LABEL: "v5litepod-4", RAY_TOPOLOGY_LABEL: "2x2", RAY_WORKER_ID_LABEL: "0"}
    ]


def test_a_multi_host_slice_is_one_bundle_per_host_pinned_to_it() -> None:
    kw = slice_request(TpuSlice.parse("v5p:2x2x2")).kwargs()
    assert kw["strategy"] == "SPREAD"
    assert kw["resources_per_bundle"] == {"CPU": 1.0, "TPU": 4.0}
    assert [s[RAY_WORKER_ID_LABEL] for s in kw["bundle_label_selector"]] == ["0", "1"]
    assert {s[RAY_POD_TYPE_LABEL] for s in kw["bundle_label_selector"]} == {"v5p-16"}


def test_the_bundles_are_what_ray_util_tpu_computes_for_the_slice() -> None:
    """Ray's own arithmetic (ray/util/tpu.py, get_tpu_worker_resources) agrees: one bundle per host, all of its
    chips."""
    from ray.util.tpu import get_tpu_worker_resources

    for spec in ("v5e:2x2", "v5p:2x2x2", "v6e:1x1", "v5e:4x4", "v6e:2x4"):
        s = TpuSlice.parse(spec)
        kw = slice_request(s).kwargs()
        n, per = get_tpu_worker_resources(
            s.topology, kw["accelerator_version"], kw["resources_per_bundle"], chips_per_vm=s.chips_per_host
        )
        assert (n, per) == (len(kw["bundle_label_selector"]), kw["resources_per_bundle"])
        assert n == s.hosts and per["TPU"] == s.chips_per_host


def test_host_workers_on_one_slice_come_back_in_host_order() -> None:
    s = TpuSlice.parse("v5p:2x2x2")
    seats = _seats(s, ["a", "a"], hosts=[1, 0])
    assert len(seats) == 8 and {x.chip for x in seats} == {0, 1, 2, 3}
    assert plan_hosts(s, list(reversed(seats))) == [1, 0]  # worker 1 sits on host 0
    assert plan_hosts(TpuSlice.parse("v5e:2x2"), _seats(TpuSlice.parse("v5e:2x2"), ["a"])) == [0]


def test_host_workers_that_straddle_slices_are_refused() -> None:
    s = TpuSlice.parse("v5p:2x2x2")
    with pytest.raises(PlacementError, match=r"straddle Ray slices \['a', 'b'\]"):
        plan_hosts(s, _seats(s, ["a", "b"]))


def test_a_host_worker_missing_chips_or_two_on_one_host_are_refused() -> None:
    s = TpuSlice.parse("v5p:2x2x2")
    with pytest.raises(PlacementError, match=r"4 workers on 1 v5p:2x2x2 slice\(s\) of 8 chips"):
        plan_hosts(s, _seats(s, ["a"]))  # one host of two
    twice = _seats(s, ["a", "a"])
    twice[3] = twice[2]  # a worker reports chip 2 twice, chip 3 never
    with pytest.raises(PlacementError, match=r"duplicates \[\(0, 2\)\], missing \[\(0, 3\)\]"):
        plan_hosts(s, twice)
    two = [*chip_seats(_host(s, 0, 0, "a"), [0, 1]), *chip_seats(_host(s, 1, 0, "a"), [2, 3])]
    two += chip_seats(_host(s, 2, 1, "a"), range(4))
    with pytest.raises(PlacementError, match=r"host\(s\) held by several: \{0: \[0, 1\]\}"):
        plan_hosts(s, two)


def test_host_workers_on_another_shape_are_refused() -> None:
    with pytest.raises(PlacementError, match="asked for a v5e:2x2 slice"):
        plan_hosts(TpuSlice.parse("v5e:2x2"), _seats(TpuSlice.parse("v6e:2x2"), ["a"]))


def test_a_bad_topology_names_the_field_and_the_form() -> None:
    with pytest.raises(ValueError, match=r"topology: .*'GEN:TOPOLOGY'"):
        parse_slice("v5e:3x3")
    with pytest.raises(ValueError, match="topology: a slice shape 'GEN:TOPOLOGY'"):
        parse_slice(4)  # type: ignore[arg-type]


def test_rows_are_split_over_the_hosts_in_order() -> None:
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
    with pytest.raises(ValueError, match="code_version: a non-empty string"):
        slice_app(tiny_model, "v5e:2x2", code_version="")


def test_the_code_version_is_fixed_by_what_the_replica_is_built_from_not_its_user_config() -> None:
    """Serve reconfigures replicas in place when only the user_config changed and the code version is the same
    (ray/serve/_private/version.py, Ray 2.60); the imperative serve.run keeps a deployment's own version
    (ray/serve/_private/client.py)."""
    from tpuray.workloads.serving import slice_app
    from tpuray.workloads.serving.example import tiny_model

    def version(**kw: Any) -> str:
        v: str = slice_app(tiny_model, kw.pop("topology", "v5e:2x2"), **kw)._bound_deployment.version
        return v

    assert version(user_config={"seed": 0}) == version(user_config={"seed": 1}, num_replicas=3)
    assert version() != version(topology="v5e:2x4")
    assert version() != version(ready_timeout_s=10.0)
    assert version(code_version="v2") == "v2"


def test_the_example_model_refuses_an_unknown_config() -> None:
    from tpuray.workloads.serving.example import tiny_model

    with pytest.raises(ValueError, match=r"user_config: unknown key\(s\) \['lr'\]"):
        tiny_model({"lr": 1})
    with pytest.raises(ValueError, match=r"user_config\.seed: an integer"):
        tiny_model({"seed": "1"})
