"""The ``tpuray`` command line.

Each command lives in its own module with ``register(subparsers)``; this file only wires them together, so
that ``tpuray topology`` and ``tpuray config check`` never import Pulumi.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import yaml

from tpuray.components.catalog.topology import GENERATIONS, TopologyError, TpuSlice
from tpuray.components.config import ConfigError, load_stack_file

# The command table: modules that add their commands (``register(subparsers) -> None``), imported when the parser
# is built; the Pulumi program never builds it, so it loads none of the tools.
COMMAND_MODULES: tuple[str, ...] = (
    "tpuray.components.review.commands",
    "tpuray.components.doctor.commands",
    "tpuray.components.pricing.commands",
)


def _table(rows: Sequence[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def cmd_topology(args: argparse.Namespace) -> int:
    """Print one slice's facts."""
    try:
        s = TpuSlice.parse(args.generation, args.topology, args.machine_type)
    except TopologyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    facts = s.summary()
    if args.json:
        print(json.dumps(facts, sort_keys=True))
    else:
        print(_table([(k, v) for k, v in facts.items()]))
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    """Validate a stack file and print its slice pools."""
    try:
        cfg = load_stack_file(args.stack_file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = []
    for pool in cfg.slice_pools:
        s = pool.tpu_slice
        rows.append(
            (
                pool.name,
                f"{s.generation} {s.topology} ({s.pod_type}) on {s.machine_type}: {pool.slices} slice(s) x "
                f"{s.hosts} host(s) x {s.chips_per_host} chips = {pool.slices * s.chips} chips, "
                f"{pool.capacity.type}, placement {s.placement}",
            )
        )
    if args.json:
        print(json.dumps(cfg.model_dump(mode="json", by_alias=True), sort_keys=True))
    else:
        print(
            f"{args.stack_file}: ok (project {cfg.project}, cluster {cfg.cluster.name} in {cfg.location}, "
            f"GKE >= {cfg.master_version}, requested as "
            f"{cfg.cluster.min_master_version or f'the {cfg.cluster.release_channel} channel default'})"
        )
        print(_table(rows))
    return 0


def render_project_file(existing: str) -> str:
    """``Pulumi.yaml`` with its ``config:`` block replaced by the one derived from the model.

    Raises :class:`~tpuray.components.config.stack_yaml.YamlError` if ``existing`` is not a project file.
    """
    from tpuray.components.config.project_file import config_declarations
    from tpuray.components.config.stack_yaml import YamlError, load_yaml

    doc = load_yaml(existing)
    if not isinstance(doc, dict) or "name" not in doc:
        raise YamlError("not a Pulumi project file (a mapping with at least 'name:')")
    doc["config"] = config_declarations()
    header = "".join(itertools.takewhile(lambda line: line.startswith("#"), existing.splitlines(keepends=True)))
    return header + yaml.safe_dump(doc, sort_keys=False, width=110)


def cmd_config_declarations(args: argparse.Namespace) -> int:
    """Print (or write into Pulumi.yaml) the project config block derived from the model."""
    from tpuray.components.config.project_file import config_declarations

    if args.write:
        from tpuray.components.config.stack_yaml import YamlError, read_yaml_file

        path = Path(args.write)
        try:
            read_yaml_file(path)  # size, UTF-8, duplicates: the same checks as a stack file
            path.write_text(render_project_file(path.read_text(encoding="utf-8")), encoding="utf-8")
        except (YamlError, OSError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 1
        print(f"wrote the config block of {path}")
    else:
        print(yaml.safe_dump({"config": config_declarations()}, sort_keys=False, width=110), end="")
    return 0


def cmd_port_check(args: argparse.Namespace) -> int:
    """List the GPU-only constructs of Python scripts (read, never run): exit 0 clean, 1 findings, 2 bad input."""
    from tpuray.components.review.port_check import PortCheckError, check_file, format_finding, summary

    findings = []
    for name in args.scripts:
        try:
            findings += check_file(Path(name))
        except PortCheckError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps([f.as_json() for f in findings], indent=1))
    else:
        for f in findings:
            print(format_finding(f))
        print(summary(findings, len(args.scripts)))
    return 1 if findings else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpuray", description="PyTorch on TPUs through Ray on GKE.")
    sub = parser.add_subparsers(dest="command", required=True)

    topo = sub.add_parser("topology", help="print a TPU slice's facts")
    topo.add_argument("generation", help="; ".join(f"{g.name} ({', '.join(g.aliases)})" for g in GENERATIONS))
    topo.add_argument("topology", help="e.g. 2x2, 4x4, 2x2x4, 4x4x8")
    topo.add_argument("--machine-type", default=None, help="chooses between 2x4 on one -8t VM or two -4t VMs")
    topo.add_argument("--json", action="store_true", help="print JSON instead of a table")
    topo.set_defaults(func=cmd_topology)

    config = sub.add_parser("config", help="stack configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a Pulumi.<env>.yaml stack file")
    check.add_argument("stack_file")
    check.add_argument("--json", action="store_true", help="print the validated config (with defaults) as JSON")
    check.set_defaults(func=cmd_config_check)

    decl = config_sub.add_parser("declarations", help="the Pulumi.yaml config block derived from the model")
    decl.add_argument("--write", metavar="PULUMI_YAML", default=None, help="rewrite that file's config block")
    decl.set_defaults(func=cmd_config_declarations)

    port = sub.add_parser("port", help="help porting GPU Ray Train scripts to TPUs")
    port_sub = port.add_subparsers(dest="port_command", required=True)
    port_check = port_sub.add_parser(
        "check", help="list each GPU-only construct of Python scripts and its TPU replacement (reads, never runs)"
    )
    port_check.add_argument("scripts", nargs="+", metavar="SCRIPT")
    port_check.add_argument("--json", action="store_true", help="print the findings as JSON")
    port_check.set_defaults(func=cmd_port_check)

    for name in COMMAND_MODULES:  # they ship in this package: a failed import is a broken install, and says so
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        message = " ".join(str(e).split())[:300]
        print(f"error: internal error in tpuray {args.command} ({type(e).__name__}: {message}); please report it",
              file=sys.stderr)  # fmt: skip
        return 70
    return code


def run() -> NoReturn:
    """The ``tpuray`` command: :func:`main` in a process of its own, with Python's cyclic garbage collector off.

    Why: importing the Pulumi SDKs creates about 350,000 tracked objects that live until exit; every full collection
    walks them all, once more at the interpreter's exit. That was half the CPU of a ``tpuray plan`` (the prod
    stack: 3.5 s with the collector, 1.7 s without; bench/plan_bench.py). A command is one short run: its cyclic
    garbage is freed with the process (peak memory measured +5 MB on a 64-pool plan). ``main`` itself, which tests
    call in their own process, leaves the collector alone.
    """
    gc.disable()
    code = main()
    gc.freeze()  # the exit's own collection then walks nothing: https://docs.python.org/3/library/gc.html#gc.freeze
    sys.exit(code)


if __name__ == "__main__":
    run()
