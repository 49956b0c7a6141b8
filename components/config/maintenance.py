"""When GKE may upgrade the cluster: a recurring window and exclusions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from tpuray.components.config.base import (
    ConfigModel,
    field_msg,
)
from tpuray.components.config_types import (
    MIN_MAINTENANCE_HOURS,
    Rrule,
    maintenance_availability,
)

_RFC3339_UTC = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
UtcTime = Annotated[str, Field(pattern=_RFC3339_UTC, description="RFC 3339 UTC time, e.g. 2026-01-03T02:00:00Z")]
# GKE: a window needs >= 4 contiguous hours, an exclusion without a release channel (NO_UPGRADES) lasts <= 30 days
# (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions).
_MIN_WINDOW = timedelta(hours=4)
_MAX_NO_UPGRADES = timedelta(days=30)


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


class MaintenanceWindow(ConfigModel):
    """A recurring window: ``start``/``end`` give the first occurrence, ``recurrence`` is an RFC 5545 RRULE."""

    start: UtcTime
    end: UtcTime
    recurrence: Rrule

    @model_validator(mode="after")
    def _length(self) -> MaintenanceWindow:
        if _utc(self.end) - _utc(self.start) < _MIN_WINDOW:
            raise ValueError(field_msg("end", "a maintenance window lasts at least 4 hours after start"))
        # GKE refuses a window giving less than 48 h in some 32-day rolling window (stretches >= 4 h count).
        got = maintenance_availability(_utc(self.start), _utc(self.end), self.recurrence)
        if got < timedelta(hours=MIN_MAINTENANCE_HOURS):
            raise ValueError(
                field_msg(
                    "recurrence",
                    f"gives only {got.total_seconds() / 3600:g} h of maintenance in the worst 32 days; GKE needs at "
                    f"least {MIN_MAINTENANCE_HOURS} h (e.g. 6 h on FREQ=WEEKLY;BYDAY=SA,SU)",
                )
            )
        return self


class MaintenanceExclusion(ConfigModel):
    """A span in which GKE does not upgrade (``scope`` says what it holds back)."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    start: UtcTime
    end: UtcTime
    scope: Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"] = "NO_MINOR_OR_NODE_UPGRADES"

    @model_validator(mode="after")
    def _span(self) -> MaintenanceExclusion:
        span = _utc(self.end) - _utc(self.start)
        if span <= timedelta(0):
            raise ValueError(field_msg("end", f"{self.end} is not after start {self.start}"))
        if self.scope == "NO_UPGRADES" and span > _MAX_NO_UPGRADES:
            raise ValueError(field_msg("end", "a NO_UPGRADES exclusion lasts at most 30 days"))
        return self


class MaintenanceConfig(ConfigModel):
    """When GKE may upgrade the cluster and its nodes: a recurring window and exclusions."""

    window: MaintenanceWindow | None = None
    exclusions: Annotated[list[MaintenanceExclusion], Field(max_length=20)] = []

    @model_validator(mode="after")
    def _unique(self) -> MaintenanceConfig:
        names = [e.name for e in self.exclusions]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(field_msg(f"exclusions[{i}].name", f"duplicate exclusion name {name!r}"))
        return self

    @property
    def declared(self) -> bool:
        """A window or an exclusion is set (GKE then keeps upgrades out of the rest of the time)."""
        return self.window is not None or bool(self.exclusions)
