"""A stack as the cross-section rules read it: every section that is valid on its own, from a valid config or from
the raw values of an invalid one, so that one error lists every problem of the stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any, get_args, get_type_hints

from pydantic import TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from tpuray.components.config.base import ConfigModel
from tpuray.components.config.cluster import ClusterConfig, NetworkConfig
from tpuray.components.config.kueue import KueueConfig
from tpuray.components.config.maintenance import MaintenanceConfig
from tpuray.components.config.monitoring import MonitoringConfig
from tpuray.components.config.ray import RayConfig
from tpuray.components.config.serving import ServingConfig
from tpuray.components.config.slice_pool import SlicePoolConfig
from tpuray.components.config.startup import StartupConfig
from tpuray.components.config.value_types import REGION, ProjectId, Zone
from tpuray.components.config.workload import CheckpointConfig, WorkloadConfig

__all__ = ["StackView", "view_of_values", "view_sections", "view_sections_of"]


@dataclass(frozen=True)
class StackView:
    """The parts of a stack the cross-section rules read.

    From a valid :class:`~tpuray.components.config.stack.StackConfig` every part is set. From an invalid one
    (:func:`view_of_values`) a part that failed its own validation is None, and a pool that did is left out of
    ``pools``: the rules that need a missing part are skipped, the others still run, so one error lists every
    problem of the stack.
    """

    region: str | None
    zone: str | None
    zone_invalid: bool
    """A zone was given but is not valid (so "needs a zone" would be wrong)."""
    project: str | None
    cluster: ClusterConfig | None
    network: NetworkConfig | None
    pools: tuple[tuple[int, SlicePoolConfig], ...]
    """The valid slice pools with their index in ``slicePools``."""
    pool_names: tuple[str, ...]
    """Every pool's name, valid pool or not."""
    checkpoints: CheckpointConfig | None
    ray: RayConfig | None
    workload: WorkloadConfig | None
    kueue: KueueConfig | None
    maintenance: MaintenanceConfig | None
    monitoring: MonitoringConfig | None
    startup: StartupConfig | None
    stack: str | None
    """The stack's name, for the production rules."""
    serving: ServingConfig | None = None
    """The Serve application (None where the section is not valid on its own)."""

    @property
    def pool_choices(self) -> list[str]:
        """The pool names a setting may name: every valid name once, in order. A name that is not valid itself has
        its own error, and is offered as no choice."""
        return [name for name in dict.fromkeys(self.pool_names) if _valid_part_of(_pool_name(), name)]

    @property
    def workload_pool(self) -> str | None:
        """``workload.slicePool``, if the workload section is valid and names one."""
        return self.workload.slice_pool if self.workload is not None else None


def _valid_part(model: type[ConfigModel], value: Any) -> Any:
    """``value`` validated as ``model``, or None if it is not valid on its own."""
    try:
        return model.model_validate(value if value is not None else {}, by_name=False)
    except ValidationError:
        return None


@cache
def _pool_name() -> Any:
    """The type of a pool's ``name``, read from the pool model (its pattern and length)."""
    field = SlicePoolConfig.model_fields["name"]
    return Annotated[(field.annotation, *field.metadata)]


def _valid_part_of(annotation: Any, value: Any) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


def view_of_values(values: Mapping[str, Any], stack: str | None = None) -> StackView:
    """The parts of a stack's raw values that are valid on their own, each validated once."""
    region = values.get("region")
    zone = None if values.get("zone") in ("", None) else values.get("zone")
    raw_pools = values.get("slicePools")
    raw_pools = raw_pools if isinstance(raw_pools, list) else []
    pools = [(i, p) for i, p in enumerate(_valid_part(SlicePoolConfig, raw) for raw in raw_pools) if p is not None]
    project = values.get("project")
    zone_ok = zone is None or (isinstance(zone, str) and _valid_part_of(Zone, zone))
    return StackView(
        region=region if isinstance(region, str) and REGION.fullmatch(region) else None,
        zone=zone if zone_ok else None,
        zone_invalid=not zone_ok,
        project=project if isinstance(project, str) and _valid_part_of(ProjectId, project) else None,
        pools=tuple(pools),
        pool_names=tuple(str(raw.get("name")) for raw in raw_pools if isinstance(raw, Mapping) and "name" in raw),
        stack=stack,
        serving=None if values.get("serving") is None else _valid_part(ServingConfig, values.get("serving")),
        **{name: _valid_part(model, values.get(to_camel(name))) for name, model in view_sections().items()},
    )


def view_sections_of(config: Any) -> dict[str, Any]:
    """The sections of a valid :class:`~tpuray.components.config.stack.StackConfig` that a :class:`StackView`
    holds, by field name."""
    return {name: getattr(config, name) for name in view_sections()}


_OWN_PARTS = frozenset({"serving"})
"""Sections :func:`view_of_values` validates itself: an absent ``serving`` is no Serve application, not a default."""


@cache  # StackView is fixed once imported; every view of every stack reads the same list
def view_sections() -> Mapping[str, type[ConfigModel]]:
    """The :class:`StackView` fields that are whole sections of the stack config, each with its model (a field
    typed ``<model> | None``): a section added to StackView is read by both builders of a view, and a test keeps
    each model the one ``StackConfig`` declares."""
    hints = get_type_hints(StackView)
    out: dict[str, type[ConfigModel]] = {}
    for f in fields(StackView):
        models = [a for a in get_args(hints[f.name]) if isinstance(a, type) and issubclass(a, ConfigModel)]
        if f.name not in _OWN_PARTS and len(models) == 1:
            out[f.name] = models[0]
    return MappingProxyType(out)
