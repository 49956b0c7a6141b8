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
from tpuray.components.config.capacity import CommitmentTerm, capacity_class, capacity_type
from tpuray.components.config.slice_pool import SlicePoolConfig


class SuppliedRateConfig(ConfigModel):
    """A price the stack pays that no public table gives (a reservation's committed use contract, a flex-start
    rate) or that differs from it (a negotiated discount): USD per chip-hour of one generation on one capacity
    type, and for a committed price one contract term, with where it comes from.

    A rate is keyed by everything that decides it: generation, capacity type, and for a capacity type paying a
    committed price (``reservation``) the term, since a 1-year and a 3-year commitment are priced apart
    (https://cloud.google.com/tpu/pricing); a pool of another term is never priced at this rate."""

    generation: str
    capacity: Annotated[str, Field(description="a capacity type (slicePools[].capacity.type)")]
    commitment: CommitmentTerm | None = Field(
        default=None,
        description="the committed use term the rate is for (1y or 3y): required for a capacity type that pays a "
        "committed price (reservation), whose pools name theirs in slicePools[].capacity.commitment; absent otherwise",
    )
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

    @model_validator(mode="after")
    def _term_when_committed(self) -> SuppliedRateConfig:
        committed = capacity_class(self.capacity).price_basis == "committed"
        if committed and self.commitment is None:
            raise field_problem(
                "commitment",
                f"a rate for capacity {self.capacity} is one committed use term's price: name it, 1y or 3y "
                "(a 1-year and a 3-year commitment are priced apart; a pool's term is its capacity.commitment)",
            )
        if not committed and self.commitment is not None:
            raise field_problem(
                "commitment",
                f"only a rate for a capacity type paying a committed price (reservation) has a term; capacity "
                f"{self.capacity} has none: remove commitment",
            )
        return self


class CostConfig(ConfigModel):
    """What the stack may cost: a budget in USD per hour (checked at the autoscaling maximum) and rates the
    price table cannot give (``tpuray.components.pricing``)."""

    budget_usd_per_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="the most the stack's TPU pools may cost per hour at their maximum size (USD)"
    )
    rates: Annotated[list[SuppliedRateConfig], Field(max_length=100)] = []

    @model_validator(mode="after")
    def _unique(self) -> CostConfig:
        keys = [(r.generation, r.capacity, r.commitment) for r in self.rates]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                what = " ".join(k for k in key if k is not None)
                raise field_problem(
                    f"rates[{i}]",
                    f"a second rate for {what} (one rate per generation, capacity "
                    "and, for a reservation, commitment term)",
                )
        return self
