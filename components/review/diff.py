"""``tpuray diff``: compare two plans and write Markdown for a pull-request comment.

Pure functions over two ``plan.json`` documents. Resources are matched by URN (as Pulumi matches them), so a
resource whose name or parent changed shows as removed + added, which Pulumi would also do (delete + create),
unless the new resource names the old URN in an alias (``options.aliasURNs``).

Aliases follow the engine's lookup (pulumi/pulumi ``pkg/resource/deploy/step_generator.go``, ``getOldResource``):
the resource's own URN first, then its aliases in order; an old resource two new ones claim is an error there, and
here a refusal. An alias whose URN names another *type* is the user's explicit retype: the engine matches it by URN
whatever the type, then replaces the resource when its provider changed (another package, or a custom resource
becoming a component; ``providerChanged``) and otherwise hands the old resource's ID and state to the new type's
provider, whose answer no plan can know. A node pool "moved" to another type is not a node pool any more, so the
diff counts such an alias as a delete of the old resource plus a create of the new one, and names it: a retype can
never hide a node pool's deletion.

Every string read from a plan reaches the comment through :mod:`tpuray.components.catalog.safe_text` (a hand-edited
``plan.json`` cannot add a heading, a link or a table row). A plan the diff cannot read is refused with
:class:`PlanInputError`, naming the plan (base or new, with its path or git ref) and the field; two plans of
different stacks are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tpuray.components.catalog.safe_text import md_code, md_text, one_line
from tpuray.components.config import NAMESPACE
from tpuray.components.review.cost import (
    CostDiff,
    StackCost,
    cost_config_of,
    cost_diff_markdown,
    cost_diff_of,
    cost_of_plan,
)
from tpuray.components.review.kueue_view import tpu_quota_by_generation
from tpuray.components.review.pool_views import tpu_chips_by_generation
from tpuray.components.review.replacement_fields import replacement_reason
from tpuray.components.review.resource_types import (
    CLUSTER,
    CLUSTER_QUEUE,
    NODE_POOL,
    RAY_JOB,
    RESOURCE_FLAVOR,
    RESOURCE_POLICY,
)

__all__ = [
    "Change",
    "FieldChange",
    "PlanDiff",
    "PlanInputError",
    "Retype",
    "StackMismatchError",
    "diff_plans",
    "render_markdown",
]


class PlanInputError(ValueError):
    """A plan the diff cannot read: names which plan (``the base plan a/plan.json``) and the field."""

    def __init__(self, plan: str, field: str, problem: str) -> None:
        super().__init__(f"{plan}: {field}: {problem}")
        self.plan, self.field, self.problem = plan, field, problem


class StackMismatchError(PlanInputError):
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


@dataclass(frozen=True)
class Retype:
    """A new resource whose alias names a base resource of another type: counted as a delete plus a create."""

    alias: str
    old_type: str
    new_urn: str
    new_type: str

    @property
    def line(self) -> str:
        return (
            f"{md_code(self.new_urn.rsplit('::', 1)[-1])} ({_kind(self.new_type)}) names "
            f"{md_code(self.alias.rsplit('::', 1)[-1])} ({_kind(self.old_type)}) in an alias across types: counted "
            "as a delete and a create (Pulumi replaces a resource whose provider changes, and otherwise lets the "
            "new type's provider take over the old one's ID)"
        )


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
    retyped: list[Retype] = field(default_factory=list)
    """Aliases across types, each counted as the delete and create in ``removed`` and ``added``."""
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


def stack_mismatch(
    base: Mapping[str, Any], new: Mapping[str, Any], base_label: str = "the base plan", new_label: str = "the new plan"
) -> str | None:
    """Why two plans cannot be diffed as one stack's change (their ``stack`` names differ), or None."""
    a, b = base.get("stack"), new.get("stack")
    if a and b and a != b:
        return (
            f"{base_label} is of stack {one_line(repr(a))} and {new_label} of stack {one_line(repr(b))}: a diff "
            "compares one stack at two versions; give two plans of the same stack"
        )
    return None


_OBJECT, _LIST, _TEXT = "an object", "a list", "a string"
_TYPES: dict[str, type | tuple[type, ...]] = {_OBJECT: dict, _LIST: list, _TEXT: str}
_READ: dict[str, tuple[tuple[str, str, bool], ...]] = {
    # (input path, what it must be, required): what the diff's readers (chips, Kueue quota, cost) read of each type;
    # ``[]`` is every item of a list. Absent or null is what a plan without the setting writes, unless required.
    NODE_POOL: (
        ("nodeConfig", _OBJECT, False),
        ("nodeConfig.labels", _OBJECT, False),
        ("autoscaling", _OBJECT, False),
        ("nodeLocations", _LIST, False),
        ("nodeLocations[]", _TEXT, True),
        ("location", _TEXT, False),
    ),
    RESOURCE_FLAVOR: (("metadata", _OBJECT, False), ("spec", _OBJECT, False), ("spec.nodeLabels", _OBJECT, False)),
    CLUSTER_QUEUE: (
        ("metadata", _OBJECT, False),
        ("spec", _OBJECT, False),
        ("spec.admissionChecksStrategy", _OBJECT, False),
        ("spec.admissionChecksStrategy.admissionChecks", _LIST, False),
        ("spec.admissionChecksStrategy.admissionChecks[]", _OBJECT, True),
        ("spec.admissionChecksStrategy.admissionChecks[].name", _TEXT, True),
        ("spec.admissionChecksStrategy.admissionChecks[].onFlavors", _LIST, False),
        ("spec.resourceGroups", _LIST, False),
        ("spec.resourceGroups[]", _OBJECT, True),
        ("spec.resourceGroups[].flavors", _LIST, False),
        ("spec.resourceGroups[].flavors[]", _OBJECT, True),
        ("spec.resourceGroups[].flavors[].name", _TEXT, True),
        ("spec.resourceGroups[].flavors[].resources", _LIST, False),
        ("spec.resourceGroups[].flavors[].resources[]", _OBJECT, True),
    ),
}


def _values_at(inputs: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(concrete path, value) of every value at ``path`` (``[]`` expanded to each index); a missing key is None."""
    found: list[tuple[str, Any]] = [("", inputs)]
    for part in path.replace("[]", ".[]").split("."):
        step: list[tuple[str, Any]] = []
        for at, value in found:
            if part == "[]":
                if isinstance(value, list):
                    step.extend((f"{at}[{i}]", v) for i, v in enumerate(value))
            elif isinstance(value, dict):
                step.append((f"{at}.{part}" if at else part, value.get(part)))
        found = step
    return iter(found)


def _shape_problem(r: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field under ``inputs``, problem) for the first value the diff reads that is not the shape tpuray writes."""
    for path, what, required in _READ.get(r["type"], ()):
        for at, value in _values_at(r.get("inputs", {}), path):
            if value is None and not required:
                continue
            if not isinstance(value, _TYPES[what]):
                shown = "missing" if value is None else f"{one_line(repr(value))[:60]}, not {what}"
                return at, f"{shown} (a {_kind(r['type'])} declares {what} there)"
    return None


@dataclass(frozen=True)
class _Facts:
    chips: dict[str, int]
    quota: dict[str, int]
    cost: StackCost


def _facts(plan: Mapping[str, Any], label: str) -> _Facts:
    """What the diff reads of one plan, or :class:`PlanInputError` naming ``label`` and the field."""
    resources = list(plan.get("resources", []))
    for i, r in enumerate(resources):
        problem = _shape_problem(r)
        if problem:
            raise PlanInputError(label, f"resources[{i}].inputs.{problem[0]}", problem[1])
    chips: dict[str, int] = {}
    for i, r in enumerate(resources):
        try:
            for gen, n in tpu_chips_by_generation([r]).items():
                chips[gen] = chips.get(gen, 0) + n
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            # a node count that is no count (PlanCountError names the pool and the field under inputs)
            raise PlanInputError(label, f"resources[{i}].inputs", one_line(e)) from None
    try:
        quota = tpu_quota_by_generation(resources)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise PlanInputError(
            label, "resources (the ClusterQueues' quota)", f"{type(e).__name__}: {one_line(e)}"
        ) from None
    try:
        cost_config = cost_config_of(plan)
    except ValidationError as e:  # the rates and budget the plan's stack config carries
        first = e.errors()[0]
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise PlanInputError(label, f"config.{NAMESPACE}:cost{at}", one_line(first["msg"])) from None
    except (ValueError, TypeError) as e:  # not JSON, or not an object
        raise PlanInputError(label, f"config.{NAMESPACE}:cost", one_line(e)) from None
    try:
        cost = cost_of_plan(plan, cost_config)
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # a pool's capacity.commitment
        raise PlanInputError(label, f"config.{NAMESPACE}:slicePools", one_line(e)) from None
    return _Facts(dict(sorted(chips.items())), quota, cost)


def _resource_type(urn: str) -> str:
    """A resource's own type in its URN (``urn:pulumi:stack::project::parent$type::name``)."""
    parts = urn.split("::", 3)
    return parts[2].rsplit("$", 1)[-1] if len(parts) == 4 else ""


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


def _match_aliases(
    base: Mapping[str, Any], new: Mapping[str, Any], by_urn_base: dict[str, Any], new_label: str
) -> list[Retype]:
    """Move each base resource a new one aliases under the new URN, as the engine matches them; returns the
    aliases across types, which stay a delete and a create."""
    by_urn_new = {r["urn"] for r in new.get("resources", [])}
    claimed: dict[str, int] = {}
    retyped: list[Retype] = []
    for i, r in enumerate(new.get("resources", [])):
        if r["urn"] in by_urn_base:
            continue  # the engine looks the resource's own URN up first: its aliases are not used
        for j, alias in enumerate(r.get("options", {}).get("aliasURNs", [])):
            if alias in claimed:
                raise PlanInputError(
                    new_label,
                    f"resources[{i}].options.aliasURNs[{j}]",
                    f"{one_line(alias)} is already claimed by resources[{claimed[alias]}]; Pulumi refuses two "
                    "resources aliasing one (give the alias to one resource only)",
                )
            if alias not in by_urn_base or alias in by_urn_new:
                continue
            claimed[alias] = i
            old_type = by_urn_base[alias]["type"]
            if old_type != r["type"] or _resource_type(alias) != r["type"]:
                retyped.append(Retype(alias, old_type, r["urn"], r["type"]))
            else:
                by_urn_base[r["urn"]] = by_urn_base.pop(alias)
            break
    return retyped


def diff_plans(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    base_label: str = "the base plan",
    new_label: str = "the new plan",
) -> PlanDiff:
    """The difference between two plans of one stack; :class:`StackMismatchError` for plans of two stacks, and
    :class:`PlanInputError` (naming ``base_label`` or ``new_label`` and the field) for a plan it cannot read."""
    mismatch = stack_mismatch(base, new, base_label, new_label)
    if mismatch:
        raise StackMismatchError(f"{base_label} and {new_label}", "stack", mismatch)
    facts_base, facts_new = _facts(base, base_label), _facts(new, new_label)
    by_urn_base = {r["urn"]: r for r in base.get("resources", [])}
    by_urn_new = {r["urn"]: r for r in new.get("resources", [])}
    d = PlanDiff(stack=str(new.get("stack") or base.get("stack") or "?"))
    # a resource that moved (new parent or name) names its old URN in an alias: Pulumi updates it in place
    d.retyped = _match_aliases(base, new, by_urn_base, new_label)
    d.added = [by_urn_new[u] for u in sorted(set(by_urn_new) - set(by_urn_base))]
    d.removed = [by_urn_base[u] for u in sorted(set(by_urn_base) - set(by_urn_new))]
    for urn in sorted(set(by_urn_base) & set(by_urn_new)):
        fields = _field_changes(by_urn_base[urn], by_urn_new[urn])
        if fields:
            r = by_urn_new[urn]
            d.changed.append(Change(urn, r["type"], r["name"], fields))
    d.chips_base, d.chips_new = facts_base.chips, facts_new.chips
    d.quota_base, d.quota_new = facts_base.quota, facts_new.quota
    seen = {(v["rule"], v["urn"], v["message"]) for v in base.get("violations", [])}
    d.new_violations = [v for v in new.get("violations", []) if (v["rule"], v["urn"], v["message"]) not in seen]
    d.cost = cost_diff_of(facts_base.cost, facts_new.cost)
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
        if d.retyped:
            out += ["> [!WARNING]", f"> {len(d.retyped)} alias(es) across resource types:"]
            out += [f"> - {r.line}" for r in d.retyped]
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
