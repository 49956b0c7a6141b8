"""Stacks the config, planning, component, review and doctor tests build on: the shipped stack files' values and
configs, minimal valid stacks the rules start from, a serving pool and section, and the parse calls that return a
config or its problems."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from tpuray.components.config import ConfigError, StackConfig, load_stack_file, parse_stack_config, stack_values
from tpuray.components.config.base import Problem


# ---- the shipped stack files ------------------------------------------------------------------------------------
def shipped_values(name: str) -> dict[str, Any]:
    """``Pulumi.<name>.yaml``'s config values, each key without its ``tpuray:`` prefix: a fresh copy per call (a
    test may change it)."""
    return copy.deepcopy(_shipped_values(name))


@functools.cache
def _shipped_values(name: str) -> dict[str, Any]:
    # read once: PyYAML's pure-Python reader took more than half of the generated-configs test's time
    return stack_values(yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"])


def shipped_config(name: str) -> StackConfig:
    """``Pulumi.<name>.yaml`` loaded as ``tpuray plan`` loads it."""
    return load_stack_file(ROOT / f"Pulumi.{name}.yaml")


def with_value(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``values`` with ``value`` at the dotted ``path`` (its missing sections made)."""
    out = copy.deepcopy(values)
    node = out
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


# ---- minimal valid stacks ---------------------------------------------------------------------------------------
def minimal_values(**overrides: Any) -> dict[str, Any]:
    """The minimal valid stack the config rules start from: one on-demand v5p 2x2x2 pool; ``overrides`` replace
    top-level sections."""
    v: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "slicePools": [{"name": "res", "generation": "v5p", "topology": "2x2x2", "capacity": {"type": "on-demand"}}],
    }
    v.update(overrides)
    return v


def queued_values(**overrides: Any) -> dict[str, Any]:
    """A valid stack whose training job queues through Kueue: an on-demand v5p pool beside the queued (DWS) v6e pool
    the ephemeral RayJob runs on; ``overrides`` replace top-level sections."""
    v: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "cluster": {"name": "tpu"},
        "slicePools": [
            {"name": "res", "generation": "v5p", "topology": "2x2x2", "capacity": {"type": "on-demand"}},
            {
                "name": "dws",
                "generation": "v6e",
                "topology": "4x4",
                "slices": 1,  # the training job's queued pool: one slice per ProvisioningRequest (config rules)
                "capacity": {"type": "queued", "maxRunDuration": "24h"},
            },
        ],
        "kueue": {"enabled": True},
        "ray": {"jobMode": "ephemeral"},
        "workload": {"slicePool": "dws"},
    }
    v.update(overrides)
    return v


def v6e_config(**overrides: Any) -> StackConfig:
    """A parsed stack of two v6e 4x4 slices whose control plane admits one authorized network; ``overrides`` replace
    top-level sections."""
    base: dict[str, Any] = {
        "project": "tpuray-test-proj",
        "region": "us-east5",
        "zone": "us-east5-a",
        "cluster": {"name": "tpu", "masterAuthorizedNetworks": [{"cidr": "198.51.100.0/24"}]},
        "slicePools": [{"name": "v6e", "generation": "v6e", "topology": "4x4", "slices": 2}],
    }
    base.update(overrides)
    return parse_stack_config(base)


# ---- serving -----------------------------------------------------------------------------------------------------
SERVE_POOL: dict[str, Any] = {
    "name": "v5e-serve",
    "generation": "v5e",
    "topology": "4x4",
    "slices": 4,
    "autoscaling": {"enabled": True, "minSlices": 0},
}
"""A multi-host pool of four v5e 4x4 slices (four hosts each) beside the dev stack's training pool."""

SERVING: dict[str, Any] = {
    "name": "chat",
    "importPath": "chat.app:app",
    "slicePool": "v5e-serve",
    "replicas": 2,
    "minSlices": 1,
    "maxSlices": 4,
}
"""A serving section on :data:`SERVE_POOL`: two replicas, one to four slices."""


def serving_values(serving: dict[str, Any], pool: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dev stack with a serving pool and ``serving`` (an import path, on that pool, then ``serving``'s keys)."""
    v = shipped_values("dev")
    v["slicePools"].append(copy.deepcopy(pool or SERVE_POOL))
    v["serving"] = {"importPath": "chat.app:app", "slicePool": "v5e-serve", **serving}
    return v


# ---- parsing -----------------------------------------------------------------------------------------------------
def prod_config(values: dict[str, Any]) -> StackConfig:
    """``values`` parsed as the prod stack."""
    return parse_stack_config(values, stack="prod")


def prod_problems(values: dict[str, Any]) -> list[Problem]:
    """The problems the config finds in ``values`` parsed as the prod stack (it must refuse them)."""
    with pytest.raises(ConfigError) as e:
        prod_config(values)
    return e.value.problems


def problems_by_path(values: dict[str, Any], stack: str | None = None) -> dict[str, str]:
    """The config's refusal of ``values`` (it must refuse them), as {field path: message}."""
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values, stack=stack)
    return {path: message for path, message in e.value.problems}
