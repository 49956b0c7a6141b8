"""Kueue: TPU quota and admission."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
)

from tpuray.components.catalog.cloud_limits import kueue_chart_problem
from tpuray.components.catalog.pins import KUEUE_CHART
from tpuray.components.config.base import (
    NAME_PATTERN,
    ConfigModel,
)
from tpuray.components.config.ray import (
    SYSTEM_NAMESPACE_PREFIXES,
    SYSTEM_NAMESPACES,
)
from tpuray.components.config.value_types import (
    SemVer,
)


def _kueue_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith(SYSTEM_NAMESPACE_PREFIXES):
        raise ValueError(f"{value!r} is a system namespace; install Kueue in its own, e.g. 'kueue-system'")
    return value


class KueueConfig(ConfigModel):
    """Kueue: TPU quota from the slice pools, and admission (required by queued pools and ephemeral jobs)."""

    enabled: bool = False
    chart_version: SemVer = Field(default=KUEUE_CHART, description="Kueue Helm chart version")
    namespace: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63), AfterValidator(_kueue_namespace)] = (
        "kueue-system"
    )
    local_queue: Annotated[
        str, Field(pattern=NAME_PATTERN, max_length=63, description="LocalQueue in the Ray namespace")
    ] = "tpu"
    priority: Literal["low", "normal", "high"] = Field(
        default="normal", description="WorkloadPriorityClass of the training job"
    )

    @field_validator("chart_version")
    @classmethod
    def _serves_rendered_api(cls, v: str) -> str:
        if problem := kueue_chart_problem(v):  # the chart serves the API version tpuray renders (cloud_limits)
            raise ValueError(problem)
        return v
