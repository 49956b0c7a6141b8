"""``tpuray doctor``: registered by :mod:`tpuray.components.cli`; imports its modules only when it runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["cmd_doctor", "read_image_inspect", "register"]


def _error(message: str) -> int:
    from tpuray.components.doctor.report import EXIT_BAD_INPUT

    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def read_image_inspect(path: Path) -> Any:
    """The worker image's versions from ``docker inspect IMAGE`` (a list; ``Config.Labels``) or
    ``crane config IMAGE`` (``config.Labels``) output. Raises ReadError naming the file."""
    from tpuray.components.catalog.data_file import DataFileError, read_json_file
    from tpuray.components.doctor.image_checks import ImageVersions
    from tpuray.components.doctor.reader import ReadError

    try:
        doc = read_json_file(path, what="--image-inspect")
    except DataFileError as e:
        raise ReadError(str(e)) from None
    if isinstance(doc, list) and len(doc) == 1:
        doc = doc[0]
    config = doc.get("Config", doc.get("config")) if isinstance(doc, dict) else None
    labels = config.get("Labels") if isinstance(config, dict) else None
    if not isinstance(labels, dict):
        raise ReadError(f"{path}: no Config.Labels (expected docker inspect or crane config output of one image)")
    return ImageVersions.from_labels(labels, f"image {path.name}")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check a cluster (live or a snapshot) against a stack: exit 0 all pass, 1 a check failed, 2 bad input."""
    from tpuray.components.config import ConfigError, load_stack_file
    from tpuray.components.config.value_types import stack_name_problem
    from tpuray.components.doctor.checks import run_checks
    from tpuray.components.doctor.reader import ClusterReader, LiveReader, ReadError, SnapshotReader
    from tpuray.components.doctor.report import exit_code, render_json, render_text

    if args.snapshot and (args.kubeconfig or args.context):
        return _error("--snapshot reads saved files: it takes no --kubeconfig or --context")
    if args.stack_file:
        stack_file = Path(args.stack_file)
    else:
        problem = stack_name_problem(args.stack)
        if problem:
            return _error(f"--stack {problem}")
        from tpuray.components.review.plan import find_root

        try:
            root = Path(args.root).resolve() if args.root else find_root()
        except FileNotFoundError as e:
            return _error(str(e))
        stack_file = root / f"Pulumi.{args.stack}.yaml"
        if not stack_file.is_file():
            known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))
            return _error(f"unknown stack {args.stack!r}: no {stack_file.name} in {root}; stacks: {', '.join(known)}")
    try:
        cfg = load_stack_file(stack_file, args.stack)
    except ConfigError as e:
        return _error(str(e))
    reader: ClusterReader = (
        SnapshotReader(args.snapshot) if args.snapshot else LiveReader(args.kubeconfig, args.context)
    )
    try:
        image = read_image_inspect(Path(args.image_inspect)) if args.image_inspect else None
        objects = reader.read()
    except ReadError as e:
        return _error(str(e))
    results = run_checks(cfg, objects, image)
    stack = args.stack or stack_file.name
    print(render_json(results, objects.source, stack) if args.json else render_text(results, objects.source, stack))
    return exit_code(results)


def register(subparsers: Any) -> None:
    doctor = subparsers.add_parser(
        "doctor",
        help="read-only checks of a GKE cluster against what a stack needs (live, or a kubectl snapshot)",
        description="Exit 0 when every check passes (warnings allowed), 1 when one fails, 2 on bad input.",
    )
    which = doctor.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", help="stack name: reads Pulumi.<stack>.yaml")
    which.add_argument("--stack-file", default=None, help="a stack file (Pulumi.<stack>.yaml)")
    doctor.add_argument("--root", default=None, help="project root holding Pulumi.yaml (default: found from cwd)")
    doctor.add_argument(
        "--snapshot", metavar="DIR", default=None,
        help="read saved kubectl -o json output instead of a live cluster: nodes.json, pods.json, deployments.json, "
        "mutatingwebhookconfigurations.json, customresourcedefinitions.json, version.json; optional: "
        "gatewayclasses.json, rayclusters.json",
    )  # fmt: skip
    doctor.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    doctor.add_argument("--context", default=None, help="kubeconfig context (default the current one)")
    doctor.add_argument(
        "--image-inspect", metavar="FILE", default=None,
        help="docker inspect (or crane config) output of the worker image: its version labels",
    )  # fmt: skip
    doctor.add_argument("--json", action="store_true", help="print the results as JSON")
    doctor.set_defaults(func=cmd_doctor)
