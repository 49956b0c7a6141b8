"""The dashboard and the idle-slice alert."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
)

from tpuray.components.config.base import (
    ConfigModel,
    duration_seconds,
    pattern,
)

IdleMetric = Literal["dutyCycle", "tensorcoreUtilization"]
"""The per-chip TPU figures the idle-slice alert may watch (each is a dashboard panel)."""
# https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.notificationChannels : the resource name form,
# projects/[PROJECT_ID_OR_NUMBER]/notificationChannels/[CHANNEL_ID]: a project id, or a project number (a positive
# integer, https://cloud.google.com/resource-manager/docs/creating-managing-projects#identifying_projects).
_NOTIFICATION_CHANNEL = pattern(
    r"^projects/(?:[a-z][-a-z0-9]{4,28}[a-z0-9]|[1-9][0-9]{0,18})/notificationChannels/[0-9]+$",
    "projects/PROJECT_ID_OR_NUMBER/notificationChannels/CHANNEL_ID, e.g. projects/my-project/notificationChannels/123",
)


class IdleAlert(ConfigModel):
    """An alert for a slice that is held but idle: every chip's figure below ``belowPercent`` for ``window``
    while the slice's Ray worker pods run."""

    enabled: bool = True
    window: Annotated[int, Field(gt=0, le=7 * 86400, description="seconds, or '30m', '2h'")] = 1800
    metric: IdleMetric = "dutyCycle"
    below_percent: Annotated[float, Field(gt=0, lt=100)] = 1.0
    exclude_pools: Annotated[list[str], Field(max_length=64)] = []
    """Slice pools the alert does not watch (e.g. a pool kept warm on purpose); the dashboard still shows them."""
    notification_channels: Annotated[
        list[Annotated[str, Field(pattern=_NOTIFICATION_CHANNEL)]], Field(max_length=16)
    ] = []
    """``projects/<project id or number>/notificationChannels/<id>``; none: the incident shows in Cloud Monitoring
    only."""

    _parse = field_validator("window", mode="before")(lambda v: duration_seconds(v))


class MonitoringConfig(ConfigModel):
    """A Cloud Monitoring dashboard of the stack (one row per slice pool) and the idle-slice alert."""

    enabled: bool = False
    idle_alert: IdleAlert = IdleAlert()
