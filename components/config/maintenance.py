"""When GKE may upgrade the cluster: a recurring window and exclusions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    model_validator,
)

from tpuray.components.catalog.maintenance_windows import MIN_MAINTENANCE_HOURS, maintenance_availability
from tpuray.components.config.base import (
    ConfigModel,
    config_dataclass,
    field_problem,
)
from tpuray.components.config.gke_cluster_types import MaintenanceExclusion, MaintenanceWindow

# GKE: a window needs >= 4 contiguous hours, an exclusion without a release channel (NO_UPGRADES) lasts <= 30 days
# (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions).
_MIN_WINDOW = timedelta(hours=4)
_MAX_NO_UPGRADES = timedelta(days=30)


def utc_instant(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _window_length(window: MaintenanceWindow) -> MaintenanceWindow:
    if utc_instant(window.end) - utc_instant(window.start) < _MIN_WINDOW:
        raise field_problem("end", "a maintenance window lasts at least 4 hours after start")
    # GKE refuses a window giving less than 48 h in some 32-day rolling window (stretches >= 4 h count).
    got = maintenance_availability(utc_instant(window.start), utc_instant(window.end), window.recurrence)
    if got < timedelta(hours=MIN_MAINTENANCE_HOURS):
        raise field_problem(
            "recurrence",
            f"gives only {got.total_seconds() / 3600:g} h of maintenance in the worst 32 days; GKE needs at "
            f"least {MIN_MAINTENANCE_HOURS} h (e.g. 6 h on FREQ=WEEKLY;BYDAY=SA,SU)",
        )
    return window


def _exclusion_span(exclusion: MaintenanceExclusion) -> MaintenanceExclusion:
    span = utc_instant(exclusion.end) - utc_instant(exclusion.start)
    if span <= timedelta(0):
        raise field_problem("end", f"{exclusion.end} is not after start {exclusion.start}")
    if exclusion.scope == "NO_UPGRADES" and span > _MAX_NO_UPGRADES:
        raise field_problem("end", "a NO_UPGRADES exclusion lasts at most 30 days")
    return exclusion


MaintenanceWindowConfig = Annotated[
    MaintenanceWindow, config_dataclass(MaintenanceWindow), AfterValidator(_window_length)
]
"""The component's :class:`MaintenanceWindow`, validated as config."""
MaintenanceExclusionConfig = Annotated[
    MaintenanceExclusion, config_dataclass(MaintenanceExclusion), AfterValidator(_exclusion_span)
]
"""The component's :class:`MaintenanceExclusion`, validated as config."""


class MaintenanceConfig(ConfigModel):
    """When GKE may upgrade the cluster and its nodes: a recurring window and exclusions."""

    window: MaintenanceWindowConfig | None = None
    exclusions: Annotated[list[MaintenanceExclusionConfig], Field(max_length=20)] = []

    @model_validator(mode="after")
    def _unique(self) -> MaintenanceConfig:
        names = [e.name for e in self.exclusions]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise field_problem(f"exclusions[{i}].name", f"duplicate exclusion name {name!r}")
        return self

    @property
    def declared(self) -> bool:
        """A window or an exclusion is set (GKE then keeps upgrades out of the rest of the time)."""
        return self.window is not None or bool(self.exclusions)
