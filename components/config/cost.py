"""The stack's budget and the rates it pays."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from tpuray.components.catalog.safe_text import refuse_control
from tpuray.components.config.base import (
    ConfigModel,
    field_problem,
)
from tpuray.components.config.capacity import capacity_class, capacity_type
from tpuray.components.config.slice_pool import SlicePoolConfig


class SuppliedRateConfig(ConfigModel):
    """A price the stack pays that no public table gives (a reservation's committed use contract, a flex-start
    rate) or that differs from it (a negotiated discount): USD per chip-hour of one generation on one capacity
    type, with where it comes from."""

    generation: str
    capacity: Annotated[str, Field(description="a capacity type (slicePools[].capacity.type)")]
    usd_per_chip_hour: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]
    source: Annotated[
        str,
        Field(min_length=1, max_length=200, description="where the rate comes from"),
        # cost.md quotes it on a line of its own: a newline in it could forge the "Budget: pass" line.
        AfterValidator(refuse_control),
    ]

    _gen = field_validator("generation")(lambda v: SlicePoolConfig._known_generation(v))

    @field_validator("capacity")
    @classmethod
    def _known_capacity(cls, v: str) -> str:
        # The registry, read at validation time: a registered capacity type is priced like a built-in one.
        return capacity_type(capacity_class(v))


class CostConfig(ConfigModel):
    """What the stack may cost: a budget in USD per hour (checked at the autoscaling maximum) and rates the
    price table cannot give (``tpuray.components.pricing``)."""

    budget_usd_per_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="the most the stack's TPU pools may cost per hour at their maximum size (USD)"
    )
    rates: Annotated[list[SuppliedRateConfig], Field(max_length=100)] = []

    @model_validator(mode="after")
    def _unique(self) -> CostConfig:
        keys = [(r.generation, r.capacity) for r in self.rates]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                raise field_problem(f"rates[{i}]", f"a second rate for {key[0]} {key[1]}")
        return self
