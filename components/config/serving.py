"""Serving: one Ray Serve application on a slice pool of its own, declared as a KubeRay RayService.

A replica is one whole TPU slice (a multi-host slice is scheduled whole or not at all), so ``replicas``,
``minSlices`` and ``maxSlices`` count slices. The upgrade strategies are KubeRay v1.7's
(``ray-operator/apis/ray/v1/rayservice_types.go`` at v1.7.0, ``RayServiceUpgradeType``): ``NewCluster`` builds a
second cluster beside the first and switches when it is ready (twice the slices at the peak),
``NewClusterWithIncrementalUpgrade`` grows the new cluster step by step behind a Gateway API route, and ``None``
creates no new cluster. The rules that need the slice pools (it exists, it is not the training pool, it holds the
replicas) are :func:`tpuray.components.config.rules.serving_rules`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tpuray.components.catalog.text import short_repr
from tpuray.components.config.base import NAME_PATTERN, ConfigModel, field_problem

UpgradeType = Literal["NewCluster", "NewClusterWithIncrementalUpgrade", "None"]
"""KubeRay v1.7's ``RayServiceUpgradeType`` values, spelled as KubeRay spells them."""
INCREMENTAL: UpgradeType = "NewClusterWithIncrementalUpgrade"

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
"""Ray Serve's ``import_path`` as Ray 2.60 imports it (``ray/_common/utils.py``, ``import_module_and_attr``, which
``ray/serve/_private/application_state.py`` ``build_serve_application`` calls through ``import_attr``): the text
before the one colon is passed whole to ``importlib.import_module`` and the text after it whole to ``getattr``, so
a dotted module of identifiers, one colon and ONE attribute (``chat.app:builder.app`` asks the module for an attribute
named ``builder.app``). Matched with ``fullmatch``: ``$`` would also match before a final newline, and Ray's
``getattr(module, "app\n")`` fails."""
IMPORT_PATH_FORM = (
    "module:attribute as Ray Serve imports it: a dotted module of Python identifiers, one colon, then one attribute "
    "name with no dots or spaces (e.g. my_pkg.app:app; Ray looks the whole text after the colon up as one attribute)"
)

MAX_RAY_SERVICE_NAME = 47
"""KubeRay v1.7 ``ray-operator/controllers/ray/utils/constant.go``: ``MaxRayServiceNameLength =
MaxRayClusterNameLength - 6`` (53 - 6: its clusters are named ``<service>-<5 chars>``); ``ValidateRayServiceMetadata``
refuses a longer name."""

_WHOLE_SLICES = "a whole number of slices (an integer: a replica is one whole TPU slice)"


def _whole(value: object) -> object:
    """A count of slices: an integer (strict config would say only "valid integer"; say why)."""
    if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
        raise ValueError(f"{value!r} is not {_WHOLE_SLICES}")
    return value


def whole_percent_steps(replicas: int) -> list[int]:
    """The steps (in slices) that are a whole percent of ``replicas``: KubeRay takes ``maxSurgePercent`` and
    ``stepSizePercent`` as int32 percentages of the Serve capacity (``ClusterUpgradeOptions``)."""
    return [s for s in range(1, replicas + 1) if (100 * s) % replicas == 0]


class UpgradeConfig(ConfigModel):
    """How a changed RayService is rolled out: KubeRay's ``spec.upgradeStrategy``."""

    strategy: UpgradeType = Field(
        default="NewCluster", description="KubeRay's upgrade type: NewCluster, NewClusterWithIncrementalUpgrade or None"
    )
    step_slices: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="NewClusterWithIncrementalUpgrade: slices added (and traffic moved) per step"
    )
    gateway_class_name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=253)] | None = Field(
        default=None, description="NewClusterWithIncrementalUpgrade: the Gateway API GatewayClass, e.g. gke-l7-rilb"
    )
    interval_seconds: Annotated[int, Field(ge=1, le=86_400)] = Field(
        default=60, description="NewClusterWithIncrementalUpgrade: seconds between steps"
    )

    @field_validator("step_slices", mode="before")
    @classmethod
    def _step_whole(cls, v: object) -> object:
        return _whole(v)

    @model_validator(mode="after")
    def _options(self) -> UpgradeConfig:
        if self.strategy == INCREMENTAL:
            for name, value in (("stepSlices", self.step_slices), ("gatewayClassName", self.gateway_class_name)):
                if value is None:
                    raise field_problem(
                        name,
                        f"{INCREMENTAL} needs {name}: KubeRay's clusterUpgradeOptions require it "
                        "(stepSlices: an integer of slices; gatewayClassName: a GatewayClass name, e.g. gke-l7-rilb)",
                    )
        else:
            for name, value in (("stepSlices", self.step_slices), ("gatewayClassName", self.gateway_class_name)):
                if value is not None:
                    raise field_problem(name, f"applies only to type {INCREMENTAL}, not {self.strategy}: remove it")
        return self


class ServingConfig(ConfigModel):
    """A Ray Serve application on whole TPU slices, as a KubeRay RayService (none unless the section is given)."""

    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=30)] = Field(
        default="serve", description="the Serve application; the RayService is <cluster.name>-<name>"
    )
    import_path: str = Field(description="Ray Serve import path, module:attribute (one attribute after the colon)")
    slice_pool: str = Field(description="the slice pool it runs on (not the training pool)")
    replicas: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description="slices at start (whole slices)")
    min_slices: Annotated[int, Field(ge=0, le=64)] | None = Field(
        default=None, description="fewest slices the autoscaler keeps; defaults to replicas"
    )
    max_slices: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="most slices the autoscaler adds; defaults to replicas"
    )
    upgrade: UpgradeConfig = UpgradeConfig()

    @field_validator("replicas", "min_slices", "max_slices", mode="before")
    @classmethod
    def _slices_whole(cls, v: object) -> object:
        return _whole(v)

    @field_validator("import_path")
    @classmethod
    def _import_path(cls, v: str) -> str:
        if not IMPORT_PATH.fullmatch(v):
            raise ValueError(f"{short_repr(v)} is not {IMPORT_PATH_FORM}")
        return v

    @model_validator(mode="after")
    def _rules(self) -> ServingConfig:
        if not self.lowest <= self.replicas <= self.highest:
            raise field_problem(
                "replicas",
                f"{self.replicas} is outside minSlices..maxSlices ({self.lowest}..{self.highest}): give "
                "minSlices <= replicas <= maxSlices",
            )
        up = self.upgrade
        if up.strategy == INCREMENTAL and up.step_slices is not None:
            if self.lowest == self.highest:
                # KubeRay v1.7 ray-operator/controllers/ray/utils/validation.go ValidateClusterUpgradeOptions:
                # "Ray Autoscaler is required for NewClusterWithIncrementalUpgrade"; tpuray turns the autoscaler
                # on only for a group whose minReplicas < maxReplicas.
                raise field_problem(
                    "maxSlices",
                    f"{INCREMENTAL} needs the Ray autoscaler, which runs only when minSlices < maxSlices "
                    f"(both {self.highest}): raise maxSlices or lower minSlices",
                )
            steps = whole_percent_steps(self.replicas)
            if up.step_slices not in steps:
                raise field_problem(
                    "upgrade.stepSlices",
                    f"{up.step_slices} slices of {self.replicas} replicas is not a whole percent of the capacity, "
                    f"which KubeRay steps by: valid steps are {', '.join(map(str, steps))}",
                )
        return self

    def service_name(self, cluster: str) -> str:
        """The RayService's name in the stack whose cluster is ``cluster``: ``<cluster>-<name>``."""
        return f"{cluster}-{self.name}"

    @property
    def lowest(self) -> int:
        """Fewest slices (``minSlices``, else ``replicas``)."""
        return self.replicas if self.min_slices is None else self.min_slices

    @property
    def highest(self) -> int:
        """Most slices (``maxSlices``, else ``replicas``)."""
        return self.replicas if self.max_slices is None else self.max_slices

    @property
    def step_percent(self) -> int | None:
        """The incremental step as KubeRay's percentage of the capacity (None for the other strategies)."""
        step = self.upgrade.step_slices
        return None if step is None or self.upgrade.strategy != INCREMENTAL else 100 * step // self.replicas
