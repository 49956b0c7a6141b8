"""``tpuray diff``: compare two plans and write Markdown for a pull-request comment.

Pure functions over two ``plan.json`` documents. Resources are matched by URN (as Pulumi matches them), so a
resource whose name or parent changed shows as removed + added, which Pulumi would also do (delete + create).
Every string read from a plan reaches the comment through :mod:`tpuray.components.catalog.safe_text` (a hand-edited
``plan.json`` cannot add a heading, a link or a table row), and two plans of different stacks are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuray.components.catalog.safe_text import md_code, md_text, one_line
from tpuray.components.review.cost import CostDiff, cost_changes, cost_diff_markdown
from tpuray.components.review.kueue_view import tpu_quota_by_generation
from tpuray.components.review.pool_views import tpu_chips_by_generation
from tpuray.components.review.replacement_fields import replacement_reason
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_JOB, RESOURCE_POLICY

__all__ = ["Change", "FieldChange", "PlanDiff", "StackMismatchError", "diff_plans", "render_markdown"]


class StackMismatchError(ValueError):
    """The two plans are of different stacks (dev against prod): their difference is not a change to review."""


_WATCHED = (NODE_POOL, CLUSTER, RESOURCE_POLICY)
"""Types whose deletion or replacement gets a warning: losing one stops TPU slices or the whole cluster (a tpu7x
pool's workload policy takes its pools with it)."""

_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    path: tuple[str, ...]
    """Input path with list indices as ``[i]`` segments."""
    old: Any
    new: Any
    effect: str | None
    """``replace``, ``recreates-nodes``, ``not-rolled-out`` (the object changes, its running pods do not) or None
    (updated in place)."""

    @property
    def dotted(self) -> str:
        out = ""
        for p in self.path:
            out += p if p.startswith("[") else (f".{p}" if out else p)
        return out


@dataclass(frozen=True)
class Change:
    urn: str
    type: str
    name: str
    fields: tuple[FieldChange, ...]

    @property
    def replaced(self) -> bool:
        return any(f.effect == "replace" for f in self.fields)

    @property
    def recreates_nodes(self) -> bool:
        return not self.replaced and any(f.effect == "recreates-nodes" for f in self.fields)

    @property
    def not_rolled_out(self) -> tuple[FieldChange, ...]:
        return tuple(f for f in self.fields if f.effect == "not-rolled-out")


@dataclass
class PlanDiff:
    stack: str
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    chips_base: dict[str, int] = field(default_factory=dict)
    chips_new: dict[str, int] = field(default_factory=dict)
    quota_base: dict[str, int] = field(default_factory=dict)
    """Kueue ``google.com/tpu`` quota per generation (empty without Kueue)."""
    quota_new: dict[str, int] = field(default_factory=dict)
    new_violations: list[dict[str, str]] = field(default_factory=list)
    cost: CostDiff | None = None
    """$/h of both plans and the pools whose $/h changed."""

    @property
    def warnings(self) -> list[str]:
        """One line per change that replaces or deletes a node pool or the cluster (or recreates its nodes)."""
        out: list[str] = []
        for c in self.changed:
            if c.type not in _WATCHED:
                continue
            what = {CLUSTER: "the cluster", NODE_POOL: f"node pool {md_code(c.name)}"}.get(c.type, md_code(c.name))
            if c.replaced:
                causes = ", ".join(md_code(f.dotted) for f in c.fields if f.effect == "replace")
                out.append(f"**{what} will be REPLACED** ({_kind(c.type)}; deleted and created again) by {causes}")
            elif c.recreates_nodes:
                causes = ", ".join(md_code(f.dotted) for f in c.fields if f.effect == "recreates-nodes")
                out.append(f"**every node of {what} will be recreated** by {causes}")
        for r in self.removed:
            if r["type"] in _WATCHED:
                out.append(f"**{_kind(r['type'])} {md_code(r['name'])} will be DELETED**")
        return out

    @property
    def not_rolled_out(self) -> list[str]:
        """One line per Ray resource whose change KubeRay will not apply to what is already running."""
        out: list[str] = []
        for c in self.changed:
            fields = c.not_rolled_out
            if not fields:
                continue
            causes = ", ".join(md_code(f.dotted) for f in fields[:4]) + (
                f", … {len(fields) - 4} more" * (len(fields) > 4)
            )
            if c.type == RAY_JOB:
                out.append(
                    f"**RayJob {md_code(c.name)}: KubeRay will not apply** {causes} to a job that already ran or "
                    "runs, nor to its cluster: delete the RayJob (or rename it) to run it again with the change"
                )
            else:
                out.append(
                    f"**{_kind(c.type)} {md_code(c.name)}: KubeRay will not roll out** {causes} to running pods; "
                    "only pods created later get it: delete the Ray pods (or the cluster) to apply it"
                )
        return out

    def cost_changed(self) -> bool:
        return self.cost is not None and bool(self.cost.changes)

    @property
    def empty(self) -> bool:
        """Nothing to review: no resource changes and no pool's cost changes (a ``cost.rates`` edit changes what
        the stack costs, and the budget rule's figure, without touching a resource)."""
        return not (self.added or self.removed or self.changed or self.cost_changed())


_EFFECT_MARKS = {"replace": " **(replace)**", "not-rolled-out": " **(not rolled out)**"}


def _kind(type_: str) -> str:
    """The last part of a resource type, as inert Markdown text."""
    return md_text(type_.rsplit(":", 1)[-1])


def _walk(old: Any, new: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """Leaf-level differences between two JSON values (dict keys by name, lists by index), in path order.

    An explicit stack, not recursion: the depth of a plan's inputs is whatever its file holds."""
    stack: list[tuple[Any, Any, tuple[str, ...]]] = [(old, new, path)]
    while stack:
        a, b, at = stack.pop()
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            keys = sorted(set(a) | set(b), key=str)
            stack.extend((a.get(k, _MISSING), b.get(k, _MISSING), (*at, str(k))) for k in reversed(keys))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            stack.extend((x, y, (*at, f"[{i}]")) for i, (x, y) in reversed(list(enumerate(zip(a, b, strict=True)))))
        elif isinstance(a, Mapping | list) or isinstance(b, Mapping | list) or a != b:
            # a container left here differs in shape from the other side (same-shape ones were expanded above)
            yield at, None if a is _MISSING else a, None if b is _MISSING else b


def stack_mismatch(base: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """Why two plans cannot be diffed as one stack's change (their ``stack`` names differ), or None."""
    a, b = base.get("stack"), new.get("stack")
    if a and b and a != b:
        return (
            f"the base plan is of stack {one_line(repr(a))} and the new plan of stack {one_line(repr(b))}: a diff "
            "compares one stack at two versions; give two plans of the same stack"
        )
    return None


def _field_changes(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    replace_on = tuple(new.get("options", {}).get("replaceOnChanges") or ())
    out: list[FieldChange] = []
    for path, a, b in _walk(base.get("inputs", {}), new.get("inputs", {}), ()):
        keys = tuple(p for p in path if not p.startswith("["))
        out.append(FieldChange(path, a, b, replacement_reason(new["type"], keys, replace_on)))
    for key in ("parent", "provider"):
        if base.get(key) != new.get(key):
            out.append(FieldChange((f"({key})",), base.get(key), new.get(key), None))
    return tuple(out)


def diff_plans(base: Mapping[str, Any], new: Mapping[str, Any]) -> PlanDiff:
    """The difference between two plans of one stack; :class:`StackMismatchError` for plans of two stacks."""
    mismatch = stack_mismatch(base, new)
    if mismatch:
        raise StackMismatchError(mismatch)
    by_urn_base = {r["urn"]: r for r in base.get("resources", [])}
    by_urn_new = {r["urn"]: r for r in new.get("resources", [])}
    # a resource that moved (new parent, name or type) names its old URN in an alias: Pulumi updates it in place
    for r in list(by_urn_new.values()):
        for alias in r.get("options", {}).get("aliasURNs", []):
            if alias in by_urn_base and alias not in by_urn_new:
                by_urn_base[r["urn"]] = by_urn_base.pop(alias)
                break
    d = PlanDiff(stack=str(new.get("stack") or base.get("stack") or "?"))
    d.added = [by_urn_new[u] for u in sorted(set(by_urn_new) - set(by_urn_base))]
    d.removed = [by_urn_base[u] for u in sorted(set(by_urn_base) - set(by_urn_new))]
    for urn in sorted(set(by_urn_base) & set(by_urn_new)):
        fields = _field_changes(by_urn_base[urn], by_urn_new[urn])
        if fields:
            r = by_urn_new[urn]
            d.changed.append(Change(urn, r["type"], r["name"], fields))
    d.chips_base = tpu_chips_by_generation(base.get("resources", []))
    d.chips_new = tpu_chips_by_generation(new.get("resources", []))
    d.quota_base = tpu_quota_by_generation(base.get("resources", []))
    d.quota_new = tpu_quota_by_generation(new.get("resources", []))
    seen = {(v["rule"], v["urn"], v["message"]) for v in base.get("violations", [])}
    d.new_violations = [v for v in new.get("violations", []) if (v["rule"], v["urn"], v["message"]) not in seen]
    d.cost = cost_changes(base, new)
    return d


def _short(value: Any, limit: int = 60) -> str:
    """A changed value, cut to ``limit`` characters, as inert Markdown text."""
    if value is None:
        return "(unset)"
    if isinstance(value, str):
        text = value[: limit + 1]
    elif isinstance(value, Mapping | list):
        text = f"({type(value).__name__} of {len(value)})"  # nested values: their leaves are listed one by one
    else:
        text = json.dumps(value)[: limit + 1]
    return md_text(text if len(text) <= limit else text[: limit - 1] + "…")


def _chips_table(d: PlanDiff) -> list[str]:
    gens = sorted(set(d.chips_base) | set(d.chips_new) | set(d.quota_base) | set(d.quota_new))
    if not gens:
        return ["No TPU node pools in either plan."]
    if not (d.quota_base or d.quota_new):
        lines = ["| generation | base chips | new chips | change |", "|---|---:|---:|---:|"]
        for g in gens:
            a, b = d.chips_base.get(g, 0), d.chips_new.get(g, 0)
            lines.append(f"| {md_text(g)} | {a:,} | {b:,} | {b - a:+,} |")
        return lines
    # Kueue admits jobs against its quota, not against the node pools: show both, so a pool that grows without
    # its quota (or the reverse) is seen in review.
    lines = [
        "| generation | base chips | new chips | change | base Kueue quota | new Kueue quota | quota change |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for g in gens:
        a, b = d.chips_base.get(g, 0), d.chips_new.get(g, 0)
        qa, qb = d.quota_base.get(g, 0), d.quota_new.get(g, 0)
        lines.append(f"| {md_text(g)} | {a:,} | {b:,} | {b - a:+,} | {qa:,} | {qb:,} | {qb - qa:+,} |")
    return lines


def render_markdown(diffs: Sequence[PlanDiff], base_label: str = "base", new_label: str = "new") -> str:
    """The PR comment for one or more stacks."""
    out = [f"## tpuray plan: {md_code(base_label)} → {md_code(new_label)}", ""]
    for d in diffs:
        out.append(f"### stack {md_code(d.stack)}")
        out.append("")
        if d.empty:
            out += ["No changes.", ""]
            continue
        warnings = d.warnings
        if warnings:
            out += ["> [!WARNING]", f"> {len(warnings)} change(s) replace, delete or recreate TPU capacity:"]
            out += [f"> - {w}" for w in warnings]
            out.append("")
        stale = d.not_rolled_out
        if stale:
            out += ["> [!IMPORTANT]", f"> {len(stale)} change(s) that KubeRay does not roll out to running Ray pods:"]
            out += [f"> - {s}" for s in stale]
            out.append("")
        if d.new_violations:
            out += ["> [!CAUTION]", "> Policy violations introduced by this change:"]
            out += [
                f"> - {md_code(v['rule'])} {md_text(v['urn'].rsplit('::', 1)[-1])}: {md_text(v['message'])}"
                for v in d.new_violations
            ]
            out.append("")
        out.append(
            f"**{len(d.added)} to add, {len(d.changed)} to change "
            f"({sum(c.replaced for c in d.changed)} replaced), {len(d.removed)} to delete**"
        )
        out.append("")
        out += ["TPU chips per generation (at most):", "", *_chips_table(d), ""]
        if d.cost is not None:
            out += cost_diff_markdown(d.cost)
        rows = ["| | resource | type | detail |", "|---|---|---|---|"]
        for r in d.added:
            rows.append(f"| + | {md_code(r['name'])} | {_kind(r['type'])} | |")
        for c in d.changed:
            mark = "±" if c.replaced else "~"
            detail = "; ".join(
                f"{md_code(f.dotted)}: {_short(f.old)} → {_short(f.new)}" + _EFFECT_MARKS.get(f.effect or "", "")
                for f in c.fields[:6]
            )
            if len(c.fields) > 6:
                detail += f"; … {len(c.fields) - 6} more"
            rows.append(f"| {mark} | {md_code(c.name)} | {_kind(c.type)} | {detail} |")
        for r in d.removed:
            rows.append(f"| - | {md_code(r['name'])} | {_kind(r['type'])} | |")
        out += ["<details><summary>Resources</summary>", "", *rows, "", "</details>", ""]
    return "\n".join(out)
