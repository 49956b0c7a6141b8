"""A capacity type and a TPU generation added in this test alone: the planners follow from the new class's traits
and the new catalog row, with no other file changed.

The capacity type is a :class:`~tpuray.components.config.capacity.CapacityType` subclass added to the registry
the slice pool's ``capacity`` union is built from, as one more member of ``CapacityClass`` would be (the fixture
rebuilds the models that embed the union, which importing the config does once); the generation is a row appended
to ``topology.GENERATIONS``. Both are undone after the test.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import pytest

from tests.support.slices import kueue_of, ray_params
from tpuray.components.catalog import topology
from tpuray.components.catalog.names import POOL_LABEL, TPU_TAINT, Taint, Toleration
from tpuray.components.config import ConfigError, StackConfig, parse_stack_config, stack_values
from tpuray.components.config.capacity import (
    CAPACITY_CLASSES,
    CapacityType,
    PriceBasis,
    capacity_class,
    capacity_of_node_pool,
    capacity_type,
    capacity_types,
)
from tpuray.components.config.cost import CostConfig, SuppliedRateConfig
from tpuray.components.config.slice_pool import SlicePoolConfig
from tpuray.components.config.stack_yaml import read_yaml_file
from tpuray.components.planning.drain import drain_plan
from tpuray.components.planning.kuberay import ray_cluster_spec
from tpuray.components.planning.pool_plan import pool_plan
from tpuray.components.planning.stack_plan import plan_stack
from tpuray.components.pricing.table import price_basis
from tpuray.components.review.replacement_fields import replacement_reason
from tpuray.components.review.resource_types import NODE_POOL

ROOT = Path(__file__).resolve().parents[2]
TAINT = Taint(key="example.test/short-lived", value="true", effect="NO_EXECUTE")
GKE_TOLERATION = Toleration(key="example.test/gke-notice", operator="Exists", effect="NoSchedule")


class ShortLived(CapacityType):
    """A made-up spot-like capacity with its own taint, a toleration of a GKE taint, and a shorter drain."""

    type: Literal["short-lived"]
    lease: int = 60

    spot: ClassVar[bool] = True
    node_taints: ClassVar[tuple[Taint, ...]] = (TAINT,)
    tolerations: ClassVar[tuple[Toleration, ...]] = (GKE_TOLERATION,)
    replacing_inputs: ClassVar[tuple[str, ...]] = ("nodeConfig.spot", "nodeConfig.shortLived")
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = (
        {"nodeConfig.spot": True, "nodeConfig.taints.key": TAINT.key},
    )
    drain_grace_seconds: ClassVar[int] = 45
    drain_deadline_seconds: ClassVar[int] = 20
    price_basis: ClassVar[PriceBasis] = "spot"

    @property
    def node_pool_max_run_seconds(self) -> int:
        return self.lease * 60


V9Z = dataclasses.replace(
    topology.generation("v6e"),
    name="v9z",
    aliases=("trillium-next",),
    gke_accelerator="tpu-v9z-slice",
    machine_types={"ct9z-standard-1t": 1, "ct9z-standard-4t": 4},
    ray_accelerator_type="TPU-V9Z",
    pod_type_prefix="v9z",
    single_host_topologies={"1x1": "ct9z-standard-1t", "2x2": "ct9z-standard-4t"},
)


def _clear_topology_caches() -> None:
    for obj in vars(topology).values():
        if isinstance(obj, functools._lru_cache_wrapper):
            obj.cache_clear()


def _rebuild_capacity_union() -> None:
    """Point ``SlicePoolConfig.capacity`` at the registry's union (its discriminator stays) and rebuild every model
    whose schema embeds it, as importing the config does for ``CapacityClass``."""
    SlicePoolConfig.__pydantic_fields__["capacity"].annotation = Union[tuple(CAPACITY_CLASSES.values())]  # type: ignore[assignment]  # noqa: UP007
    for model in (SlicePoolConfig, SuppliedRateConfig, CostConfig, StackConfig):
        model.model_rebuild(force=True)


@pytest.fixture
def extended(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(topology, "GENERATIONS", (*topology.GENERATIONS, V9Z))
    _clear_topology_caches()
    CAPACITY_CLASSES[capacity_type(ShortLived)] = ShortLived
    _rebuild_capacity_union()
    try:
        yield
    finally:
        del CAPACITY_CLASSES[capacity_type(ShortLived)]
        _rebuild_capacity_union()
        monkeypatch.undo()
        _clear_topology_caches()


def _stack(pool: dict[str, Any]) -> StackConfig:
    """prod-dws (Kueue on) with one more slice pool."""
    path = ROOT / "Pulumi.prod-dws.yaml"
    values = stack_values(read_yaml_file(path)["config"], str(path))
    values["slicePools"] = [*values["slicePools"], pool]
    return parse_stack_config(values, str(path), "prod-dws")


NEW_POOL = {
    "name": "v9z-short",
    "generation": "trillium-next",
    "topology": "4x4",
    "slices": 2,
    "capacity": {"type": "short-lived", "lease": 90},
    "autoscaling": {"enabled": True, "minSlices": 0},
}


@pytest.mark.usefixtures("extended")
def test_a_new_capacity_type_and_generation_reach_every_planner() -> None:
    cfg = _stack(NEW_POOL)
    pool = cfg.slice_pools[-1]
    assert isinstance(pool.capacity, ShortLived) and pool.capacity.lease == 90
    assert "short-lived" in capacity_types() and capacity_class("short-lived") is ShortLived
    s = pool.tpu_slice
    assert (s.generation, s.machine_type, s.hosts) == ("v9z", "ct9z-standard-4t", 4)

    # node pools: one per multi-host slice, with the type's node fields and taints
    planned_pool = pool_plan(cfg, pool)
    specs = list(planned_pool.node_pools)
    assert [p.name for p in specs] == ["v9z-short-0", "v9z-short-1"]
    for p in specs:
        assert p.spot and not p.flex_start and not p.queued_provisioning and p.auto_repair
        assert p.max_run_duration == "5400s" and p.reservation_affinity is None
        assert p.taints == (TPU_TAINT, TAINT) and p.capacity == "short-lived"
        assert p.machine_type == "ct9z-standard-4t"

    # the stack's plan carries those node pools for its TpuSlicePool
    [planned] = [p for p in plan_stack(cfg, "test").pools if p.name == pool.name]
    assert list(planned.node_pools) == specs and planned.slice_pool.capacity == "short-lived"

    # the KubeRay worker group: the node selector of the new slice, every toleration, the type's drain
    group = planned_pool.worker_group  # as plan_stack builds each pool's group
    assert group is not None
    [spec] = ray_cluster_spec(ray_params(group))["workerGroupSpecs"]
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"][POOL_LABEL] == pool.name
    assert "tpu-v9z-slice" in pod["nodeSelector"].values()
    tolerations = [TPU_TAINT.toleration().k8s(), TAINT.toleration().k8s(), GKE_TOLERATION.k8s()]
    assert pod["tolerations"] == tolerations
    assert pod["terminationGracePeriodSeconds"] == 45 == drain_plan(pool.capacity).grace_seconds
    [worker] = pod["containers"]
    assert "--deadline-remaining-seconds 20" in worker["lifecycle"]["preStop"]["exec"]["command"][2]
    assert {"name": "TPURAY_MAX_RUN_SECONDS", "value": "5400"} in worker["env"]

    # Kueue: the pool's flavor selects what the workers select and tolerates what they tolerate; no admission check
    kueue = kueue_of(cfg)
    quota = kueue.quota_of(pool.name)
    assert quota.chips == 2 * 16 and quota.admission_check is None
    [flavor] = [o for o in kueue.objects if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == quota.flavor]
    assert flavor["spec"] == {"nodeLabels": pod["nodeSelector"], "tolerations": tolerations}

    # review and pricing read the same traits
    assert price_basis("short-lived") == "spot"
    wire = {"nodeConfig": {"spot": True, "taints": {"key": TAINT.key}}}
    assert capacity_of_node_pool(wire) == "short-lived"
    assert capacity_of_node_pool({"nodeConfig": {"spot": True}}) == "spot"
    assert replacement_reason(NODE_POOL, ["nodeConfig", "shortLived"]) == "replace"


@pytest.mark.usefixtures("extended")
def test_the_registered_type_is_validated_like_a_built_in_one() -> None:
    with pytest.raises(ConfigError) as e:
        _stack({**NEW_POOL, "capacity": {"type": "short-lived", "lease": "soon"}})
    assert "slicePools[2].capacity.lease" in str(e.value)
    with pytest.raises(
        ConfigError, match="valid choices: on-demand, spot, reservation, flex-start, queued, short-lived"
    ):
        _stack({**NEW_POOL, "capacity": {"type": "shorter-lived"}})


def test_without_the_registration_the_type_and_generation_are_unknown() -> None:
    assert "short-lived" not in capacity_types()
    with pytest.raises(ConfigError) as e:
        _stack(NEW_POOL)
    assert "unknown capacity type 'short-lived'" in str(e.value)
    assert "unknown TPU generation 'trillium-next'" in str(e.value)
