"""The value types of :class:`~tpuray.components.gke_cluster.GkeCluster`'s Args that a stack's config also holds.

Pulumi-free, so the stack config (``tpuray.components.config``) validates a stack's values straight into these:
each shape is written once, here, with the value types of its fields; the rules that judge a whole value (a
window's length, an exclusion's span, a network open to everyone) are the config's. Built by hand, they are plain
frozen dataclasses (no validation), as every component's Args are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpuray.components.config.value_types import Cidr, ExclusionName, NetworkDisplayName, Rrule, UtcTime

__all__ = ["AuthorizedNetwork", "ExclusionScope", "MaintenanceExclusion", "MaintenanceWindow"]


@dataclass(frozen=True)
class AuthorizedNetwork:
    """A network allowed to reach the cluster's public control plane endpoint."""

    cidr: Cidr
    name: NetworkDisplayName = ""
    """Display name ("" for none)."""


@dataclass(frozen=True)
class MaintenanceWindow:
    """A recurring window: ``start``/``end`` give the first occurrence, ``recurrence`` is an RFC 5545 RRULE."""

    start: UtcTime
    end: UtcTime
    recurrence: Rrule
    """An RFC 5545 RRULE, e.g. ``FREQ=WEEKLY;BYDAY=SA,SU``."""


ExclusionScope = Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"]


@dataclass(frozen=True)
class MaintenanceExclusion:
    """A span in which GKE does not upgrade (``scope`` says what it holds back)."""

    name: ExclusionName
    start: UtcTime
    end: UtcTime
    scope: ExclusionScope = "NO_MINOR_OR_NODE_UPGRADES"
