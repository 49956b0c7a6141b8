"""The capacity types of a slice pool (on-demand, spot, reservation, flex-start, queued)."""

from __future__ import annotations

import typing
from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
)

from tpuray.components.config.base import (
    ConfigModel,
    duration_seconds,
)
from tpuray.components.config_types import (
    GceName,
    ProjectId,
)


class OnDemand(ConfigModel):
    """Standard on-demand VMs."""

    type: Literal["on-demand"] = "on-demand"


class Spot(ConfigModel):
    """Spot VMs: cheaper, preemptible at any time."""

    type: Literal["spot"]


class Reservation(ConfigModel):
    """Consume a specific reservation; ``project`` names the owner of a shared reservation.

    https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations : the reservation affinity value is
    the reservation's name, or ``projects/<project>/reservations/<name>`` for a shared one.
    """

    type: Literal["reservation"]
    name: GceName
    project: ProjectId | None = None

    @property
    def reservation_value(self) -> str:
        """The reservation affinity value GKE expects: the name, or ``projects/<p>/reservations/<name>``."""
        return f"projects/{self.project}/reservations/{self.name}" if self.project else self.name


class FlexStart(ConfigModel):
    """Flex-start (DWS flex): VMs for at most ``maxRunDuration``, created on demand by the autoscaler."""

    type: Literal["flex-start"]
    max_run_duration: Annotated[int, Field(gt=0, le=7 * 86400, description="seconds, or '24h', '7d'")]

    _parse = field_validator("max_run_duration", mode="before")(lambda v: duration_seconds(v))


class Queued(ConfigModel):
    """Flex-start with queued provisioning (DWS): the whole slice is granted at once through a ProvisioningRequest.

    ``maxRunDuration`` belongs to the ProvisioningRequest (``maxRunDurationSeconds``), not to the node pool
    (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest).
    """

    type: Literal["queued"]
    max_run_duration: Annotated[int | None, Field(gt=0, le=7 * 86400)] = None

    @field_validator("max_run_duration", mode="before")
    @classmethod
    def _parse(cls, v: object) -> int | None:
        return None if v is None else duration_seconds(v)


CapacityClass = OnDemand | Spot | Reservation | FlexStart | Queued
"""Every capacity type: a new one is a class here and a member of this union; the tables below follow."""
Capacity = Annotated[CapacityClass, Field(discriminator="type")]


def capacity_type(cls: type[ConfigModel]) -> str:
    """The ``type`` tag of a capacity class (its ``type: Literal[...]`` field)."""
    (tag,) = typing.get_args(cls.model_fields["type"].annotation)
    return str(tag)


CAPACITY_CLASSES: dict[str, type[ConfigModel]] = {capacity_type(c): c for c in typing.get_args(CapacityClass)}
"""Each capacity class by its ``type`` tag."""
CAPACITY_TYPES: tuple[str, ...] = tuple(CAPACITY_CLASSES)
