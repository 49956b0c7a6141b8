"""Run components and the program through the plan engine that ``tpuray plan`` ships (no second mock engine).

:func:`run` declares what a test builds under :func:`tpuray.components.review.engine.run_program` and returns the
run (every registration: type, name, parent, provider, options, inputs as plain JSON values) and the resolved
outputs. A failing build raises the program's own exception, with what was registered before it attached as
``registered``, so a test can assert that nothing was half-created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT as ROOT  # re-exported: the tests that run the program import it from here
from tpuray.components.review import engine

PROJECT = "tpuray"

Resource = dict[str, Any]


def run(
    build: Callable[[], Mapping[str, Any] | None] | Path,
    *,
    stack: str = "test",
    config: Mapping[str, str] | None = None,
) -> tuple[engine.ProgramRun, dict[str, Any]]:
    try:
        result = engine.run_program(build, project=PROJECT, stack=stack, config=dict(config or {}))
    except engine.RunError as e:
        cause = e.__cause__ or e
        cause.registered = e.run.resources  # type: ignore[attr-defined]
        raise cause from None
    return result, result.outputs


def cli_config(stack: str) -> dict[str, str]:
    """Config as the CLI passes it for ``Pulumi.<stack>.yaml`` (with ``Pulumi.yaml`` defaults), as tpuray plan does."""
    return engine.config_from_stack_file(ROOT / f"Pulumi.{stack}.yaml", PROJECT, ROOT / "Pulumi.yaml")


def children_of(run: engine.ProgramRun, component_type: str) -> list[Resource]:
    """Registrations whose parent is a component of ``component_type``."""
    return [r for r in run.resources if r["parent"] and r["parent"].split("::")[2].endswith(component_type)]


def depends_on(resource: Resource) -> list[str]:
    """URNs a resource waits for (explicit depends_on and inputs from other resources)."""
    return list(resource["options"].get("dependsOn", []))
