"""How much maintenance time a recurring GKE maintenance window allows, as GKE counts it.

Pure Python (``python-dateutil`` reads the recurrence rule).
"""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["MAINTENANCE_PERIOD", "MIN_MAINTENANCE_HOURS", "MIN_MAINTENANCE_STRETCH", "maintenance_availability"]

# https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions : "the maintenance
# window must allow at least 48 hours of availability in a 32-day rolling window", counting only contiguous
# stretches of at least 4 hours.
MIN_MAINTENANCE_HOURS = 48
MAINTENANCE_PERIOD = timedelta(days=32)
MIN_MAINTENANCE_STRETCH = timedelta(hours=4)


def maintenance_availability(start: datetime, end: datetime, recurrence: str) -> timedelta:
    """The least maintenance time any 32-day rolling window gets from a recurring window (stretches >= 4 h)."""
    from dateutil.rrule import rrulestr  # type: ignore[import-untyped]  # no stubs in the shared venv

    length = end - start
    horizon = start + timedelta(days=400)  # a year and more: every weekly and monthly pattern repeats within it
    rule = rrulestr(recurrence, dtstart=start.replace(tzinfo=None))
    spans: list[list[datetime]] = []
    for occ in rule.between(start.replace(tzinfo=None), horizon.replace(tzinfo=None), inc=True):
        s = occ.replace(tzinfo=start.tzinfo)
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], s + length)
        else:
            spans.append([s, s + length])
    stretches = [(s, e) for s, e in spans if e - s >= MIN_MAINTENANCE_STRETCH]
    if not stretches:
        return timedelta(0)
    last = stretches[-1][1] - MAINTENANCE_PERIOD
    worst: timedelta | None = None
    for _, t in stretches:  # the worst window starts right after a stretch ends
        if t > last:
            break
        got = sum(
            (min(e, t + MAINTENANCE_PERIOD) - max(s, t) for s, e in stretches if e > t and s < t + MAINTENANCE_PERIOD),
            timedelta(0),
        )
        worst = got if worst is None else min(worst, got)
    return worst if worst is not None else timedelta(0)
