"""The review rule ``serving-upgrade-capacity`` over a program's declared resources: a NewCluster upgrade whose pool
cannot hold a second set of replicas fails naming the numbers, the same service with room passes, and the
incremental upgrade needs KubeRay's gate and whole-slice steps."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.stacks import SERVE_POOL, SERVING
from tpuray.components.config import CostConfig
from tpuray.components.pricing.table import PriceRow
from tpuray.components.review.cost import cost_of_plan, cost_table
from tpuray.components.review.resource_types import RAY_SERVICE
from tpuray.components.review.rule_types import Resource, RuleContext
from tpuray.components.review.rules import STACK_RULES, check_resources
from tpuray.components.review.serving_rules import (
    KUBERAY_RELEASE,
    PoolSlices,
    ServedGroup,
    check_upgrade_capacity,
    incremental_gate_on,
    incremental_problems,
    new_cluster_problem,
)

CTX = RuleContext(stack="dev")


@pytest.fixture(scope="module")
def registered() -> list[dict[str, Any]]:
    """The dev program's resources with a v5e 4x4 pool of four slices serving two replicas (room for NewCluster)."""
    cfg = er.cli_config("dev")
    cfg["tpuray:slicePools"] = json.dumps([*json.loads(cfg["tpuray:slicePools"]), SERVE_POOL])
    cfg["tpuray:serving"] = json.dumps(SERVING)
    return er.run(er.ROOT / "infra" / "__main__.py", stack="dev", config=cfg)[0].resources


@pytest.fixture(scope="module")
def declared(registered: list[dict[str, Any]]) -> list[Resource]:
    return [Resource(r["type"], r["name"], r["inputs"], r["urn"]) for r in registered]


def changed(resources: list[Resource], kind: str, change: Callable[[dict[str, Any]], None]) -> list[Resource]:
    """``resources`` with ``change`` applied to (a copy of) the props of each resource of type ``kind``."""
    out = []
    for r in resources:
        if r.type == kind:
            props = copy.deepcopy(dict(r.props))
            change(props)
            r = Resource(r.type, r.name, props, r.urn)
        out.append(r)
    return out


def group(props: dict[str, Any]) -> dict[str, Any]:
    [g] = props["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return dict(g)


def set_replicas(n: int) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = n

    return change


def set_upgrade(upgrade: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        props["spec"]["upgradeStrategy"] = upgrade

    return change


INCREMENTAL = {
    "type": "NewClusterWithIncrementalUpgrade",
    "clusterUpgradeOptions": {
        "maxSurgePercent": 50,
        "stepSizePercent": 50,
        "intervalSeconds": 60,
        "gatewayClassName": "gke-l7-rilb",
    },
}


def test_new_cluster_with_room_passes_and_is_registered(declared: list[Resource]) -> None:
    assert any(r.type == RAY_SERVICE for r in declared)
    assert check_upgrade_capacity(declared, CTX) == []  # 2 replicas, a pool of 4 slices
    assert "serving-upgrade-capacity" in [r.name for r in STACK_RULES]
    assert not [v for v in check_resources(declared, CTX) if v.rule == "serving-upgrade-capacity"]


def test_new_cluster_without_room_fails_naming_the_numbers(declared: list[Resource]) -> None:
    found = check_resources(changed(declared, RAY_SERVICE, set_replicas(3)), CTX)
    [v] = [v for v in found if v.rule == "serving-upgrade-capacity"]
    assert "second cluster of 3 slices" in v.message
    assert "needs 6 v5litepod-16 slices" in v.message and "holds at most 4" in v.message
    assert v.urn.endswith("serve-rayservice")


def test_none_needs_no_room(declared: list[Resource]) -> None:
    resources = changed(declared, RAY_SERVICE, set_replicas(4))
    assert check_upgrade_capacity(resources, CTX)
    assert check_upgrade_capacity(changed(resources, RAY_SERVICE, set_upgrade({"type": "None"})), CTX) == []


def test_an_unset_strategy_is_kuberays_new_cluster(declared: list[Resource]) -> None:
    def unset(props: dict[str, Any]) -> None:
        del props["spec"]["upgradeStrategy"]

    resources = changed(changed(declared, RAY_SERVICE, set_replicas(3)), RAY_SERVICE, unset)
    [(_, message)] = check_upgrade_capacity(resources, CTX)
    assert "NewCluster" in message


def test_incremental_with_the_gate_on_and_whole_steps_passes(declared: list[Resource]) -> None:
    resources = changed(declared, RAY_SERVICE, set_upgrade(INCREMENTAL))
    assert incremental_gate_on(resources) is True  # chart 1.7.0's values turn it on
    assert check_upgrade_capacity(resources, CTX) == []


def test_incremental_with_the_gate_off_fails(declared: list[Resource]) -> None:
    def gate_off(props: dict[str, Any]) -> None:
        if props.get("chart") == "kuberay-operator":
            props["values"] = {"featureGates": [{"name": "RayServiceIncrementalUpgrade", "enabled": False}]}

    resources = changed(changed(declared, RAY_SERVICE, set_upgrade(INCREMENTAL)), KUBERAY_RELEASE, gate_off)
    assert incremental_gate_on(resources) is False
    [(_, message)] = check_upgrade_capacity(resources, CTX)
    assert "RayServiceIncrementalUpgrade" in message and "off" in message


def test_the_gate_of_an_unknown_operator_is_unknown(declared: list[Resource]) -> None:
    assert incremental_gate_on([r for r in declared if r.type != KUBERAY_RELEASE]) is None

    def release(version: str) -> Callable[[dict[str, Any]], None]:
        def set_version(props: dict[str, Any]) -> None:
            props["version"] = version

        return set_version

    # off by default in 1.5 and 1.6 (Alpha), on from 1.7 (Beta): catalog/pins.INCREMENTAL_UPGRADE_DEFAULTS
    assert incremental_gate_on(changed(declared, KUBERAY_RELEASE, release("1.6.0"))) is False
    assert incremental_gate_on(changed(declared, KUBERAY_RELEASE, release("1.7.0"))) is True
    assert incremental_gate_on(changed(declared, KUBERAY_RELEASE, release("1.9.0"))) is None  # not read here


def test_incremental_steps_are_whole_slices_and_fit_the_pool() -> None:
    held = PoolSlices(slices=4, pod_type="v5p-16", capacity="on-demand")
    g = ServedGroup(
        "svc",
        "g",
        "p",
        replicas=3,
        strategy="NewClusterWithIncrementalUpgrade",
        max_surge_percent=33,
        step_size_percent=33,
    )
    found = incremental_problems(g, held, gate_on=True)
    assert any("maxSurgePercent 33% of 3 slices is not a whole number" in m for m in found)
    whole = ServedGroup(
        "svc", "g", "p", 2, "NewClusterWithIncrementalUpgrade", max_surge_percent=50, step_size_percent=50
    )
    assert incremental_problems(whole, held, gate_on=True) == []
    assert incremental_problems(whole, PoolSlices(2, "v5p-16", "on-demand"), gate_on=True) == [
        "upgrade NewClusterWithIncrementalUpgrade holds 2 slices and adds 1 per step: pool 'p' needs 3 v5p-16 "
        "slices but holds at most 2"
    ]


def test_reserved_capacity_that_does_not_cover_the_second_set() -> None:
    g = ServedGroup("svc", "g", "p", replicas=2, strategy="NewCluster", max_surge_percent=None, step_size_percent=None)
    message = new_cluster_problem(g, PoolSlices(slices=3, pod_type="v5p-128", capacity="reservation"))
    assert message is not None and "needs 4 v5p-128 slices" in message and "reservation" in message
    assert new_cluster_problem(g, PoolSlices(slices=4, pod_type="v5p-128", capacity="reservation")) is None


def test_the_cost_table_shows_the_steady_state_and_the_upgrades_peak(registered: list[dict[str, Any]]) -> None:
    c = cost_of_plan({"stack": "dev", "resources": registered}, CostConfig())
    [serve] = c.serving
    assert (serve.service, serve.pool, serve.strategy) == ("tpuray-dev-chat", "v5e-serve", "NewCluster")
    assert (serve.slices, serve.peak_slices, serve.chips_per_slice) == (2, 4, 16)  # v5e 4x4: 16 chips a slice
    assert isinstance(serve.price, PriceRow)  # v5e on-demand in us-west4 has a published price
    assert serve.usd_per_hour == pytest.approx(32 * serve.price.usd_per_chip_hour)
    assert serve.usd_per_hour_peak == pytest.approx(2 * (serve.usd_per_hour or 0))
    table = cost_table(c)
    assert any(line.startswith("| tpuray-dev-chat | v5e-serve | 2, 4 | NewCluster |") for line in table), table
    assert (
        cost_of_plan({"stack": "dev", "resources": [r for r in registered if r["type"] != RAY_SERVICE]}).serving == ()
    )
