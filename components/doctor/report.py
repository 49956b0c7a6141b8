"""The doctor's report: a table for people, JSON for tools, and the exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tpuray.components.doctor.checks import CheckResult

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "exit_code", "render_json", "render_text"]

EXIT_OK = 0
"""Every check passed (warnings allowed)."""
EXIT_FAILED = 1
"""At least one check failed."""
EXIT_BAD_INPUT = 2
"""A malformed snapshot, an unreachable cluster or an unknown stack: nothing was checked."""

_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL"}


def exit_code(results: Sequence[CheckResult]) -> int:
    return EXIT_FAILED if any(r.status == "fail" for r in results) else EXIT_OK


def render_text(results: Sequence[CheckResult], source: str, stack: str) -> str:
    width = max(len(r.id) for r in results)
    lines = [f"tpuray doctor: stack {stack} against {source}"]
    for r in results:
        lines.append(f"{_MARK[r.status]}  {r.id.ljust(width)}  {r.fact}")
        if r.status != "pass":
            lines.append(f"      {''.ljust(width)}  fix: {r.fix}")
            lines.append(f"      {''.ljust(width)}  source: {r.source}")
    counts = {s: sum(1 for r in results if r.status == s) for s in ("pass", "warn", "fail")}
    lines.append(f"{counts['pass']} passed, {counts['warn']} warning(s), {counts['fail']} failed")
    return "\n".join(lines)


def render_json(results: Sequence[CheckResult], source: str, stack: str) -> str:
    return json.dumps(
        {
            "stack": stack,
            "source": source,
            "exit": exit_code(results),
            "checks": [r.as_json() for r in results],
        },
        indent=2,
    )
