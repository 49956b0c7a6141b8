"""The reference pages of docs/reference/, generated from the code that holds their facts.

- ``config.md``: every key of the stack file, from the pydantic models of ``tpuray.components.config`` (type,
  constraints, default, description);
- ``doctor-checks.md``: every check ``tpuray doctor`` runs (``run_checks``) on the shipped stacks, with what it
  requires, its source and its fix;
- ``dashboard-panels.md``: every chart of a pool's dashboard row and the idle alert (``planning/dashboard.py``),
  for each shipped stack;
- ``runtimes.md``: each TPU runtime's row of ``catalog/runtimes.py`` (package, extra, image target and tag, workers,
  process group, compile cache, ports).

``python tools/gen_docs.py --write`` rewrites the pages; ``python tools/gen_docs.py`` (``--check``) exits 1 naming
each page that differs from what the code gives. ``tests/test_docs.py`` runs the same comparison.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from tpuray.components.catalog.runtimes import RUNTIMES, Runtime
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import NAMESPACE, StackConfig
from tpuray.components.config.loaders import SECRET_KEYS, load_stack_file
from tpuray.components.doctor import ClusterObjects, ImageVersions, run_checks
from tpuray.components.planning.dashboard import dashboard_plan, idle_alert_plan

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
SHIPPED_STACKS = ("dev", "prod", "prod-dws")
"""The stacks whose files ship in the repository (``Pulumi.<stack>.yaml``): the doctor and dashboard pages show
what the code does for each."""
REGENERATE = "python tools/gen_docs.py --write"


def _header(title: str, source: str) -> str:
    return (
        f"# {title}\n\n"
        f"<!-- Generated from {source} by tools/gen_docs.py: edit the code, then run `{REGENERATE}`. -->\n\n"
    )


def _cell(text: str) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that survives backticks in ``text``."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---- config keys ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ConfigKey:
    key: str
    type: str
    default: str
    description: str


def _field_notes(cls: type) -> dict[str, tuple[str, str]]:
    """``{field: (annotation as written, note)}`` from the class's source: the note is the docstring after the
    field, else the comment lines right above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    (node,) = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    out: dict[str, tuple[str, str]] = {}
    body = node.body
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        written = ast.get_source_segment(source, stmt.annotation) or ""
        note = ""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            note = nxt.value.value
        else:
            comments: list[str] = []
            j = stmt.lineno - 2
            while j >= 0 and lines[j].strip().startswith("#"):
                comments.insert(0, lines[j].strip().lstrip("#").strip())
                j -= 1
            note = " ".join(comments)
        out[stmt.target.id] = (written, note)
    return out


def _unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """(the annotation without ``Annotated`` and ``None``, the metadata found on the way, whether None is allowed)."""
    metadata: list[Any] = []
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            base, *meta = typing.get_args(annotation)
            metadata += meta
            annotation = base
        elif origin in (types.UnionType, typing.Union):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            if len(args) != 1:
                return annotation, metadata, optional
            annotation = args[0]
        else:
            return annotation, metadata, optional


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _constraints(metadata: list[Any]) -> list[str]:
    out: list[str] = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            out += _constraints(list(m.metadata))
            continue
        for attr, sign in _BOUNDS.items():
            if getattr(m, attr, None) is not None:
                out.append(f"{sign} {getattr(m, attr):,}")
        if getattr(m, "min_length", None) is not None:
            out.append(f"length >= {m.min_length}")
        if getattr(m, "max_length", None) is not None:
            out.append(f"length <= {m.max_length}")
        if getattr(m, "pattern", None) is not None:
            out.append(f"matches {_code(m.pattern)}")
    return out


_SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _type_name(annotation: Any) -> str:
    base, metadata, _ = _unwrap(annotation)
    origin = typing.get_origin(base)
    if origin is Literal:
        name = "one of " + ", ".join(_code(str(v)) for v in typing.get_args(base))
    elif origin is list:
        name = f"list of {_type_name(typing.get_args(base)[0])}"
    elif isinstance(base, type) and (issubclass(base, BaseModel) or dataclasses.is_dataclass(base)):
        name = "object"
    elif origin in (types.UnionType, typing.Union):
        name = "one of the objects below (by `type`)"
    else:
        name = _SCALARS.get(base, getattr(base, "__name__", str(base)))
    constraints = _constraints(metadata)
    return f"{name} ({', '.join(constraints)})" if constraints else name


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and len(_sub_models(field.annotation)) > 1:  # a tagged union: which member
        return _code(json.dumps(value.model_dump(mode="json", by_alias=True)))
    if isinstance(value, BaseModel) or dataclasses.is_dataclass(value):
        return "(the section's defaults)"
    if value is None:
        return "unset"
    return _code(json.dumps(value))


def _sub_models(annotation: Any) -> list[tuple[str, type]]:
    """The models a key's value is made of: ``[("", Model)]``, ``[("[]", Model)]`` for a list of them, or one
    ``("{type: x}", Model)`` per member of a union tagged by ``type``."""
    base, _, _ = _unwrap(annotation)
    suffix = ""
    if typing.get_origin(base) is list:
        base, _, _ = _unwrap(typing.get_args(base)[0])
        suffix = "[]"
    members = typing.get_args(base) if typing.get_origin(base) in (types.UnionType, typing.Union) else (base,)
    out: list[tuple[str, type]] = []
    for member in members:
        if isinstance(member, type) and (issubclass(member, BaseModel) or dataclasses.is_dataclass(member)):
            tag = ""
            if len(members) > 1 and issubclass(member, BaseModel):
                (tag_value,) = typing.get_args(member.model_fields["type"].annotation)
                tag = f"{{type: {tag_value}}}"
            out.append((suffix + tag, member))
    return out


def _model_fields(model: type) -> Iterator[tuple[str, str, FieldInfo | dataclasses.Field[Any], Any]]:
    """(Python name, key, field, annotation) of a pydantic model's or a dataclass's fields."""
    if issubclass(model, BaseModel):
        for name, field in model.model_fields.items():
            if field.annotation is not None and typing.get_origin(field.annotation) is Literal and name == "type":
                continue  # a union member's tag: its rows already name it
            yield name, field.alias or name, field, field.annotation
    elif dataclasses.is_dataclass(model):
        hints = typing.get_type_hints(model, include_extras=True)
        for f in dataclasses.fields(model):
            yield f.name, to_camel(f.name), f, hints[f.name]


def config_keys(model: type = StackConfig, prefix: str = "") -> list[ConfigKey]:
    """Every key under ``model``, depth first in declaration order; a section's own row comes before its keys."""
    notes = _field_notes(model)
    rows: list[ConfigKey] = []
    for name, key, field, annotation in _model_fields(model):
        full = prefix + key
        written, note = notes.get(name, ("", ""))
        description = (field.description if isinstance(field, FieldInfo) else None) or note
        subs = _sub_models(annotation)
        if subs and not description:
            first = next((m for _, m in subs), None)
            description = (first.__doc__ or "").strip().split("\n\n")[0] if len(subs) == 1 and first else ""
        if isinstance(field, FieldInfo):
            type_name = _type_name(annotation if not field.metadata else typing.Annotated[annotation, *field.metadata])
            default = _default(field)
        else:
            type_name = _type_name(annotation)
            has_default = field.default is not dataclasses.MISSING
            default = _code(json.dumps(field.default)) if has_default and field.default is not None else "unset"
            default = default if has_default else "(required)"
        alias = written if written and written.split(" |")[0].isidentifier() and written[0].isupper() else ""
        if alias and not subs:
            type_name += f", as `{alias.split(' |')[0]}`"
        rows.append(ConfigKey(full, type_name, default, description))
        for suffix, sub in subs:
            if len(subs) > 1:
                doc = (sub.__doc__ or "").strip().split("\n\n")[0]
                rows.append(ConfigKey(full + suffix, "object", "", doc))
            rows += config_keys(sub, full + suffix + ".")
    return rows


def config_page() -> str:
    out = _header("Stack configuration keys", "the config models in components/config/")
    out += (
        f"Every key of `Pulumi.<stack>.yaml`, under the `{NAMESPACE}:` namespace, as the config models declare it: "
        "its type and bounds, its default and the description the code gives (a field's description, docstring or "
        "the comment above it; empty where the code has none). The rules between keys, and what each key does, are "
        "in the [configuration guide](../configuration.md).\n\n"
        '"as `Name`" after a type names the value type (in `components/config/value_types.py` or the config module) '
        "that validates it. Secret keys, read only with Pulumi's `get_secret` and never part of the validated "
        f"config or a plan: {', '.join(_code(k) for k in sorted(SECRET_KEYS))}.\n\n"
        "| key | type | default | description |\n|---|---|---|---|\n"
    )
    for k in config_keys():
        out += f"| {_code(k.key)} | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.description)} |\n"
    return out


# ---- doctor checks -------------------------------------------------------------------------------------------
def _shipped_config(stack: str) -> StackConfig:
    return load_stack_file(ROOT / f"Pulumi.{stack}.yaml", stack)


def doctor_page() -> str:
    out = _header("`tpuray doctor` checks", "components/doctor/checks.py (run_checks)")
    out += (
        "Each check `run_checks` runs, in its order, as it runs on each shipped stack against an empty cluster "
        "snapshot and a worker image that reports no versions: its id (a pool's checks carry the pool's name, here "
        "`<pool>`), what it requires (the part of its finding before the first `;`), the public source of the "
        "requirement and the fix it prints. Which checks apply depends on the stack (Kueue, flex-start, multi-host "
        "pools). The [doctor guide](../doctor.md) says how to run it.\n\n"
    )
    empty = ClusterObjects((), (), (), (), (), "v0.0.0", "an empty snapshot")
    for stack in SHIPPED_STACKS:
        cfg = _shipped_config(stack)
        pools = sorted((p.name for p in cfg.slice_pools), key=len, reverse=True)
        out += f"## `{stack}` (`Pulumi.{stack}.yaml`)\n\n| id | requires | source | fix |\n|---|---|---|---|\n"
        seen: set[str] = set()
        for result in run_checks(cfg, empty, ImageVersions(None, None, None, "an image without version labels")):
            check_id = result.id
            pool = next((p for p in pools if check_id.endswith("." + p)), None)
            if pool is not None:
                check_id = check_id.removesuffix(pool) + "<pool>"
            if check_id in seen:
                continue
            seen.add(check_id)
            requires = result.fact.split("; ", 1)[0]
            out += f"| `{check_id}` | {_cell(requires)} | {_cell(result.source)} | {_cell(result.fix)} |\n"
        out += "\n"
    return out.rstrip("\n") + "\n"


# ---- dashboard panels ----------------------------------------------------------------------------------------
def dashboard_page() -> str:
    out = _header("Dashboard panels", "components/planning/dashboard.py (dashboard_plan, idle_alert_plan)")
    out += (
        "The Cloud Monitoring dashboard and idle alert the planner derives for each shipped stack (with "
        "`monitoring.enabled`): one row per slice shape, its charts in order with their title, unit and PromQL. "
        "What each chart means and where its numbers come from: the [monitoring guide](../monitoring.md).\n\n"
    )
    for stack in SHIPPED_STACKS:
        cfg = _shipped_config(stack)
        plan = dashboard_plan(cfg, stack)
        out += f"## `{stack}`: {_cell(plan.display_name)}\n\n"
        for row in plan.rows:
            out += f"### {_cell(row.title)}\n\n| key | title | unit | per chip | query |\n|---|---|---|---|---|\n"
            for p in row.panels:
                per_chip = "yes" if p.per_chip else "no"
                out += f"| `{p.key}` | {_cell(p.title)} | `{p.unit}` | {per_chip} | {_code(_cell(p.query))} |\n"
            out += "\n"
        alert = idle_alert_plan(cfg, stack)
        if alert is None:
            out += "Idle alert: none (`monitoring.idleAlert.enabled` off, or monitoring off).\n\n"
        else:
            fields = {f.name: getattr(alert, f.name) for f in dataclasses.fields(alert)}
            out += "Idle alert:\n\n| field | value |\n|---|---|\n"
            for name, value in fields.items():
                shown = value if isinstance(value, str) else json.dumps(value, default=str)
                out += f"| `{name}` | {_code(_cell(str(shown)))} |\n"
            out += "\n"
    return out.rstrip("\n") + "\n"


# ---- runtimes ------------------------------------------------------------------------------------------------
RUNTIME_EXAMPLES = ("v6e:4x4", "tpu7x:2x2x2")
"""Slices whose per-host counts the runtimes page shows: one chip per device, and two (tpu7x)."""


def runtimes_page() -> str:
    out = _header("TPU runtimes", "components/catalog/runtimes.py (RUNTIMES)")
    out += (
        "Each runtime `workload.backend` names, as tpuray runs it. Which to choose and what each needs on the "
        "cluster: [choosing a backend](../backends.md).\n\n"
    )
    runtimes = list(RUNTIMES.values())
    out += "| | " + " | ".join(f"`{r.name}`" for r in runtimes) + " |\n|---|" + "---|" * len(runtimes) + "\n"

    def row(label: str, cell: Callable[[Runtime], str]) -> str:
        return f"| {label} | " + " | ".join(_cell(cell(r)) for r in runtimes) + " |\n"

    out += row("Python package", lambda r: f"`{r.package}`")
    out += row("install", lambda r: f"`pip install 'tpuray[{r.extra}]'`")
    out += row("image target (`workloads/Dockerfile`)", lambda r: f"`{r.image_target}`")
    out += row("image tag ends in", lambda r: f"`{r.tag_suffix}`")
    out += row("one Ray worker per", lambda r: "runtime device" if r.worker_per == "device" else "host")
    out += row("a tpu7x chip is", lambda r: f"{'two devices' if r.splits_chips else 'one device'}")
    out += row(
        "process group",
        lambda r: f"`{r.process_group}`" + f" (`{r.emulated_process_group}` on the emulated slice)",
    )
    out += row("compile cache", lambda r: f"`{r.compile_cache}`")
    out += row(
        "one process's listeners", lambda r: ", ".join(f"{n} {port}" for n, port in r.single_listeners) or "none"
    )
    for spec in RUNTIME_EXAMPLES:
        s = TpuSlice.parse(spec)
        out += (
            f"| `{spec}`: workers per host, `TPU` per worker | "
            + " | ".join(f"{r.workers_per_host(s)}, {r.tpu_resource_per_worker(s)}" for r in runtimes)
            + " |\n"
        )
        out += (
            f"| `{spec}`: ports per host | "
            + " | ".join(", ".join(f"{p.name} {p.first}-{p.last}" for p in r.ports(s)) for r in runtimes)
            + " |\n"
        )
    return out


PAGES: dict[str, Callable[[], str]] = {
    "config.md": config_page,
    "doctor-checks.md": doctor_page,
    "dashboard-panels.md": dashboard_page,
    "runtimes.md": runtimes_page,
}


def stale_pages(reference: Path = REFERENCE) -> list[str]:
    """The pages whose committed text differs from what the code gives now (or that are missing)."""
    return [
        name
        for name, render in PAGES.items()
        if not (reference / name).is_file() or (reference / name).read_text() != render()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="rewrite the pages (default: check them)")
    args = parser.parse_args(argv)
    if args.write:
        REFERENCE.mkdir(parents=True, exist_ok=True)
        for name, render in PAGES.items():
            (REFERENCE / name).write_text(render())
            print(f"wrote docs/reference/{name}")
        return 0
    stale = stale_pages()
    for name in stale:
        print(f"docs/reference/{name} differs from the code; run `{REGENERATE}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
