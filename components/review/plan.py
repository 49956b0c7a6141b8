"""``tpuray plan``: render one stack without the Pulumi CLI, a backend or credentials.

Validates the stack file with the config model, runs the real program (``infra/__main__.py``) under the SDK's
mock engine (:mod:`tpuray.components.review.engine`), runs the policy rules over what it declared, and writes a
plan directory::

    plan.json        every resource (type, name, parent, inputs), sorted by URN; same stack -> same bytes
    manifests/       the Kubernetes objects as YAML, as they would be applied
    topology.md      per pool: slices, hosts, chips, Ray worker pods and Ray workers (one per chip), chip-hours a day
    topology.svg     the picture: slices as boxes of hosts, hosts as grids of chips, a dot per Ray worker (per chip)
    dashboard.json   the Cloud Monitoring dashboard the stack declares (when monitoring is on), as the API takes it
    dashboard.svg    its layout: one band per slice pool, a box per chart with the metrics it reads
    cost.json        $/h per TPU pool and for the stack at the autoscaling minimum and maximum, $/month, budget
    cost.md          the same as Markdown, with each price's source (plan.json itself carries no prices)
    startup.md       per pool, what the first step waits for: the image pull path, the compile cache key, the mounts
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuray.components.config import NAMESPACE, SECRET_KEYS, StackConfig, load_stack_file
from tpuray.components.planning.drain import CHECKPOINT_WRITE_BYTES_PER_S, PoolDrain, pool_drains
from tpuray.components.planning.stack_plan import StackPlan, plan_stack
from tpuray.components.planning.startup import startup_markdown
from tpuray.components.review import resource_types
from tpuray.components.review.cost import BUDGET_RULE, StackCost, budget_check, cost_json, cost_markdown
from tpuray.components.review.dashboard_svg import render_dashboard_svg
from tpuray.components.review.plan_dir import check_out_dir, write_plan_files
from tpuray.components.review.pool_views import PoolView, pool_views
from tpuray.components.review.render import manifest_files, plan_json, summary_table, topology_markdown
from tpuray.components.review.rule_types import Resource, Violation
from tpuray.components.review.rules import check_resources
from tpuray.components.review.svg import render_svg

__all__ = [
    "DASHBOARD_FILE",
    "DASHBOARD_PICTURE",
    "DRAIN_RULE",
    "PICTURE",
    "STARTUP_FILE",
    "Plan",
    "dashboards",
    "drain_lines",
    "drain_warning",
    "find_root",
    "render_stack",
    "summary",
    "write_plan",
]

PICTURE = "topology.svg"
DASHBOARD_FILE = "dashboard.json"
DASHBOARD_PICTURE = "dashboard.svg"
STARTUP_FILE = "startup.md"
DRAIN_RULE = "drain-window-checkpoint"
"""The advisory finding of a training pool whose drain window cannot hold the job's checkpoint."""


@dataclass(frozen=True)
class Plan:
    stack: str
    config: StackConfig
    stack_plan: StackPlan
    """What the program declares, as data: the files read its pools, dashboard and budget from here."""
    run: dict[str, Any]
    violations: list[Violation]
    pools: list[PoolView]
    cost: StackCost
    """The declared pools' cost against the stack's budget (``cost.json``, the summary and the budget rule)."""
    warnings: list[Violation] = field(default_factory=list)
    """Advisory rules' findings: printed, never a failure."""

    @property
    def resources(self) -> list[dict[str, Any]]:
        resources: list[dict[str, Any]] = self.run["resources"]
        return resources


def find_root(start: Path | None = None) -> Path:
    """The project root: the nearest directory (from ``start``, default the cwd) holding ``Pulumi.yaml``."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "Pulumi.yaml").is_file():
            return d
    raise FileNotFoundError(f"no Pulumi.yaml in {here} or above; run from the project or pass --root")


def render_stack(stack: str, root: Path, program: Path | None = None, stack_file: Path | None = None) -> Plan:
    """Validate and run one stack (raises ConfigError for a bad stack file, RunError if the program fails)."""
    from tpuray.components.review import engine as plan_engine  # imports the Pulumi SDK: only when a plan is made

    stack_file = stack_file or root / f"Pulumi.{stack}.yaml"
    cfg = load_stack_file(stack_file, stack)
    project = plan_engine.project_name(root, NAMESPACE)
    config = plan_engine.config_from_stack_file(stack_file, project, root / "Pulumi.yaml")
    run = plan_engine.run_program(
        program or root / "infra", project=project, stack=stack, config=config, cwd=root
    ).to_json()
    return plan_from_run(stack, cfg, run)


def plan_from_run(stack: str, cfg: StackConfig, run: dict[str, Any]) -> Plan:
    config = run.get("config") or {}
    for key in SECRET_KEYS:  # secret-bearing config never reaches plan.json, whatever form the stack file used
        if f"{NAMESPACE}:{key}" in config:
            config[f"{NAMESPACE}:{key}"] = "[secret]"
    stack_plan = plan_stack(cfg, stack)
    resources = [Resource(type=r["type"], name=r["name"], props=r["inputs"], urn=r["urn"]) for r in run["resources"]]
    found = check_resources(resources)
    # the config too: a reservation pool's commitment term (capacity.commitment) picks its price
    cost, over_budget = budget_check({"stack": stack, "resources": run["resources"], "config": config}, stack_plan.cost)
    stack_urn = f"urn:pulumi:{stack}::{run.get('project', '')}::stack"
    if over_budget:  # the budget rule reads the config's budget, so it runs here rather than in the pack
        found.append(Violation(BUDGET_RULE, stack_urn, over_budget))
    # the drain windows read the workload's model from the config, as the budget does: here, advisory
    found += [Violation(DRAIN_RULE, stack_urn, drain_warning(d), advisory=True) for d in pool_drains(cfg) if not d.fits]
    return Plan(
        stack=stack,
        config=cfg,
        stack_plan=stack_plan,
        run=run,
        violations=[v for v in found if not v.advisory],
        pools=pool_views(stack_plan, run["resources"]),
        cost=cost,
        warnings=[v for v in found if v.advisory],
    )


def write_plan(plan: Plan, out: Path, root: Path | None = None) -> list[str]:
    """Write the plan directory, replacing the files an earlier plan wrote there (and nothing else); returns the
    files there tpuray plan did not write, all kept.

    Raises :class:`~tpuray.components.review.plan_dir.PlanOutError` for a place a plan must not go, or a file there
    it must not replace (:func:`~tpuray.components.review.plan_dir.write_plan_files`).
    """
    out = check_out_dir(out, root or find_root())
    files = {
        "plan.json": plan_json(plan.run, plan.violations, plan.warnings),
        **{f"manifests/{name}": text for name, text in manifest_files(plan.resources).items()},
        "topology.md": topology_markdown(plan.stack, plan.pools, PICTURE),
        "cost.json": cost_json(plan.cost),
        "cost.md": cost_markdown(plan.cost),
        PICTURE: render_svg(plan.stack, plan.pools),
        STARTUP_FILE: startup_markdown(plan.config),
    }
    monitoring = plan.stack_plan.monitoring
    if monitoring is not None:  # a plan without a dashboard leaves no earlier one behind: the marker lists it
        board = json.loads(monitoring.dashboard.json_text())  # what StackMonitoring declares as dashboardJson
        files[DASHBOARD_FILE] = json.dumps(board, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        files[DASHBOARD_PICTURE] = render_dashboard_svg(board)
    return write_plan_files(out, files)


def dashboards(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``Dashboard`` objects the program declared (each resource's ``dashboardJson``, parsed)."""
    return [json.loads(r["inputs"]["dashboardJson"]) for r in resources if r["type"] == resource_types.DASHBOARD]


def summary(plan: Plan) -> str:
    from tpuray.components.review.cost import pools_summary

    table = summary_table(plan.stack, plan.resources, plan.pools)
    return "\n".join([table, *pools_summary(plan.cost), *training_state_lines(plan), *drain_lines(plan.config)])


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def drain_lines(cfg: StackConfig) -> list[str]:
    """Per pool, how long its workers have to checkpoint once told to go, and the training job's checkpoint on its
    pool against it (``planning.drain``: the window is the drain deadline; the estimate a floor of the write)."""
    lines = ["drain windows (a checkpoint must be on disk within the drain deadline the preStop hook gives Ray):"]
    for d in pool_drains(cfg):
        w = d.window
        text = f"- {d.pool} ({d.capacity}): on {w.disruption}, "
        if w.node_shutdown is not None:
            how = "asked for" if w.declared else "GKE's default"
            text += (
                f"graceful node shutdown {w.node_shutdown.grace_seconds} s ({how}; "
                f"{w.node_shutdown.pods_seconds} s for the pods), "
            )
        text += f"pod grace {w.drain.grace_seconds} s, drain deadline {w.drain.deadline_seconds} s"
        if w.max_run_margin_seconds is not None:
            text += f"; checkpoints {w.max_run_margin_seconds} s before maxRunDuration ends"
        lines.append(text)
        if d.checkpoint is not None:
            c = d.checkpoint
            verdict = "fits" if d.fits else "does NOT fit"
            lines.append(
                f"  the training job's checkpoint: {c.parameters:,} parameters, {_mb(c.bytes)}, at least "
                f"{c.seconds:,.2f} s to write at {_mb(CHECKPOINT_WRITE_BYTES_PER_S)}/s (one writer to Cloud Storage "
                f"FUSE): {verdict} the {w.seconds} s deadline"
            )
    return lines


def drain_warning(d: PoolDrain) -> str:
    """Why pool ``d``'s drain window cannot hold the training job's checkpoint, and what would help."""
    assert d.checkpoint is not None  # only the training pool has an estimate
    c, w = d.checkpoint, d.window
    fix = (
        "give the pool capacity.shutdownGracePeriod: 120 (GKE 1.35.0-gke.1171000 or later), "
        if w.node_shutdown is not None and not w.declared
        else ""
    )
    return (
        f"slice pool {d.pool} ({d.capacity}): the training job's checkpoint ({c.parameters:,} parameters, "
        f"{_mb(c.bytes)}) takes at least {c.seconds:,.1f} s to write at {_mb(CHECKPOINT_WRITE_BYTES_PER_S)}/s, more "
        f"than the {w.seconds} s drain deadline after {w.disruption}: a drain loses the steps since the last periodic "
        f"checkpoint; {fix}train on capacity with a longer grace period, or keep workload.checkpointEvery small"
    )


def training_state_lines(plan: Plan) -> list[str]:
    """Per pool, the HBM a chip holds of the workload's sharded training state and what is left for activations
    (the config's own estimate: ``WorkloadConfig.training_state_bytes_per_chip``)."""
    w = plan.config.workload
    p = w.parallelism
    lines = [f"training state per chip ({w.model_parameters:,} parameters, fsdp={p.fsdp} x tensor={p.tensor}):"]
    for pool in plan.pools:
        s, gib = pool.tpu_slice, 2**30
        if (s.chips * w.mesh_devices_per_chip(s)) % p.degree:
            lines.append(f"- {pool.name}: fsdp x tensor = {p.degree} does not tile a {s.topology} slice")
            continue
        need, hbm = w.training_state_bytes_per_chip(s), s.hbm_bytes_per_chip
        room = f"{(hbm - need) / gib:,.2f} GiB headroom" if need <= hbm else "does not fit"
        lines.append(f"- {pool.name}: {need / gib:,.2f} GiB of {hbm / gib:g} GiB HBM, {room} before activations")
    return lines
