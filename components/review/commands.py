"""``tpuray plan`` and ``tpuray diff``.

Registered by :mod:`tpuray.components.cli`. Nothing here imports Pulumi at module level: the commands import
the plan modules when they run, so ``tpuray topology`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tpuray.components.catalog.safe_text import one_line

__all__ = ["cmd_diff", "cmd_plan", "register"]


def _error(message: object, code: int) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)  # paths and refs as given: no escape sequence passes
    return code


def cmd_plan(args: argparse.Namespace) -> int:
    """Render one stack; exit 1 on a bad stack file, a failing program or a policy violation."""
    from tpuray.components.config import ConfigError
    from tpuray.components.config.value_types import stack_name_problem
    from tpuray.components.review.engine import RunError
    from tpuray.components.review.plan import find_root, render_stack, summary, write_plan
    from tpuray.components.review.plan_dir import PlanOutError, check_out_dir

    problem = stack_name_problem(args.stack)
    if problem:  # the name becomes a file name and the default output folder: never a path
        return _error(f"--stack {problem}", 2)
    try:
        root = Path(args.root).resolve() if args.root else find_root()
    except FileNotFoundError as e:
        return _error(str(e), 2)
    out = Path(args.out) if args.out else root / "out" / "plan" / args.stack
    try:
        check_out_dir(out, root)  # before the (slow) render, and before anything is written
    except PlanOutError as e:
        return _error(str(e), 2)
    try:
        plan = render_stack(args.stack, root, stack_file=Path(args.stack_file) if args.stack_file else None)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        kept = write_plan(plan, out, root)
    except (PlanOutError, OSError) as e:
        return _error(f"cannot write the plan to {out}: {e}", 2)
    print(summary(plan))
    board = ", dashboard.json, dashboard.svg" if plan.stack_plan.monitoring is not None else ""
    print(f"wrote {out}/plan.json, manifests/, topology.md, topology.svg, cost.json, cost.md{board}")
    if kept:  # the user's own files: kept, and named, so a manifests/ of theirs is not taken for the plan's
        shown = ", ".join(one_line(k) for k in kept[:10]) + (f", … {len(kept) - 10} more" if len(kept) > 10 else "")
        print(f"note: kept {len(kept)} file(s) in {out} that tpuray plan did not write: {shown}", file=sys.stderr)
    for w in plan.warnings:
        print(f"warning: [{w.rule}] {w.urn.rsplit('::', 1)[-1]}: {w.message}", file=sys.stderr)
    if plan.violations:
        print(f"\n{len(plan.violations)} policy violation(s):", file=sys.stderr)
        for v in plan.violations:
            print(f"  [{v.rule}] {v.urn.rsplit('::', 1)[-1]}: {v.message}", file=sys.stderr)
        return 1
    print("policy: all rules pass")
    return 0


def _stacks(root: Path, wanted: list[str] | None) -> list[str]:
    if wanted:
        return wanted
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))


Pair = tuple[dict[str, Any], dict[str, Any], str, str]
"""The base plan, the new plan, and how a refusal names each (``the base plan a/plan.json``)."""


def _plan_dir_pairs(base: Path, new: Path) -> list[Pair]:
    """The plans to compare in two plan directories (one plan each, or one per stack folder)."""
    from tpuray.components.review.plan_dir import PlanFileError, load_plan_file

    def label(side: str, path: Path) -> str:
        return f"the {side} plan {one_line(path)}"

    if (base / "plan.json").exists() or (new / "plan.json").exists():
        a, b = base / "plan.json", new / "plan.json"
        return [(load_plan_file(base), load_plan_file(new), label("base", a), label("new", b))]
    # directories of per-stack plan directories, as the workflow writes them
    names = sorted({p.parent.name for p in [*base.glob("*/plan.json"), *new.glob("*/plan.json")]})
    if not names:
        raise PlanFileError(f"no plan.json in {base} or {new}, nor in a stack folder of either: nothing to compare")
    pairs = []
    for name in names:
        a, b = base / name / "plan.json", new / name / "plan.json"
        empty: dict[str, Any] = {"stack": name, "resources": []}
        pairs.append(
            (
                load_plan_file(a) if a.exists() else empty,
                load_plan_file(b) if b.exists() else empty,
                label("base", a) + ("" if a.exists() else " (absent: no resources)"),
                label("new", b) + ("" if b.exists() else " (absent: no resources)"),
            )
        )
    return pairs


def cmd_diff(args: argparse.Namespace) -> int:
    """Compare two plan directories, or two git refs (each stack rendered at each ref)."""
    from tpuray.components.config.value_types import stack_name_problem
    from tpuray.components.review.diff import PlanInputError, diff_plans, render_markdown
    from tpuray.components.review.git_refs import GitPlanError, is_git_ref, plan_of_ref
    from tpuray.components.review.plan import find_root
    from tpuray.components.review.plan_dir import PlanFileError, write_new_file

    base, new = Path(args.base), Path(args.new)
    diffs = []
    if base.is_dir() or new.is_dir():
        if not (base.is_dir() and new.is_dir()):
            missing = new if base.is_dir() else base
            return _error(f"{missing} is not a plan directory (compare two plan directories, or two git refs)", 2)
        try:
            pairs = _plan_dir_pairs(base, new)
        except PlanFileError as e:
            return _error(one_line(e), 2)
        try:
            diffs = [diff_plans(a, b, a_label, b_label) for a, b, a_label, b_label in pairs]
        except PlanInputError as e:  # names the plan (base or new, with its file) and the field
            return _error(f"not a tpuray plan: {e}", 2)
    else:
        try:
            root = Path(args.root).resolve() if args.root else find_root()
        except FileNotFoundError as e:
            return _error(str(e), 2)
        for ref in (args.base, args.new):
            if not is_git_ref(root, ref):
                return _error(f"{ref!r} is neither a plan directory nor a git ref", 2)
        stacks = _stacks(root, args.stack)
        bad = [p for p in map(stack_name_problem, stacks) if p]
        if bad:
            return _error(f"--stack {bad[0]}", 2)
        if not stacks:
            return _error(f"no Pulumi.<stack>.yaml in {root}: nothing to compare", 2)
        try:
            for stack in stacks:
                a, b = plan_of_ref(root, args.base, stack), plan_of_ref(root, args.new, stack)
                if not a["resources"] and not b["resources"]:
                    return _error(f"stack {stack!r} has no stack file or program at {args.base} nor at {args.new}", 2)
                labels = (f"the {side} plan (git ref {ref!r}, stack {stack!r})" for side, ref in
                          (("base", args.base), ("new", args.new)))  # fmt: skip
                diffs.append(diff_plans(a, b, *labels))
        except GitPlanError as e:
            return _error(str(e), 1)
        except PlanInputError as e:
            return _error(f"not a tpuray plan: {e}", 2)
    text = render_markdown(diffs, args.base, args.new)
    if args.out:
        try:
            write_new_file(Path(args.out), text)  # a new file renamed into place: a hard link of it keeps its bytes
        except OSError as e:
            return _error(f"cannot write {args.out}: {e.strerror or e}", 2)
    else:
        print(text)
    if args.fail_on_replace and any(d.warnings for d in diffs):
        return 3
    return 0


def register(subparsers: Any) -> None:
    plan = subparsers.add_parser("plan", help="render a stack without credentials (plan.json, manifests, topology)")
    plan.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    plan.add_argument("--out", default=None, help="output directory (default out/plan/<stack>)")
    plan.add_argument("--root", default=None, help="project root holding Pulumi.yaml (default: found from cwd)")
    plan.add_argument("--stack-file", default=None, help="a stack file other than Pulumi.<stack>.yaml")
    plan.set_defaults(func=cmd_plan)

    diff = subparsers.add_parser("diff", help="Markdown diff of two plans (plan directories or git refs)")
    diff.add_argument("base", help="plan directory or git ref")
    diff.add_argument("new", help="plan directory or git ref")
    diff.add_argument("--stack", action="append", default=None, help="stack(s) to compare for git refs (default all)")
    diff.add_argument("--root", default=None, help="project root (default: found from cwd)")
    diff.add_argument("--out", default=None, help="write the Markdown here instead of stdout")
    diff.add_argument(
        "--fail-on-replace", action="store_true", help="exit 3 when a node pool or the cluster would be replaced"
    )
    diff.set_defaults(func=cmd_diff)
