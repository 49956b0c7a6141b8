"""``tpuray compare``: a team's current setup against a tpuray run, in $/h, tokens/s and tokens per dollar.

Registered by :mod:`tpuray.components.cli`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tpuray.components.catalog.data_file import DataFileError, loads_json, read_text
from tpuray.components.catalog.safe_text import one_line

__all__ = ["cmd_compare", "register"]


def _error(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2


def _from_summary(path: str) -> tuple[object, object]:
    """($/h, tokens/s) of the last summary line a ``tpuray.workloads.train`` run printed."""
    lines = read_text(path, what="--summary").splitlines()  # a DataFileError is a ValueError naming the file
    for line in reversed(lines):
        try:
            doc = loads_json(line, what=f"--summary {path}")
        except DataFileError:
            continue
        if isinstance(doc, dict) and doc.get("event") == "summary":
            if doc.get("usd_per_hour") is None:
                raise ValueError(
                    f"--summary {path}: the run has no $/h ({doc.get('usd_source') or 'unpriced'}); give --usd-per-hour"
                )
            return doc["usd_per_hour"], doc.get("tokens_per_s")
    raise ValueError(f"--summary {path}: no training summary line (a JSON object with event: summary)")


def cmd_compare(args: argparse.Namespace) -> int:
    from tpuray.components.catalog.throughput import comparison, setup

    try:
        usd, tps = args.usd_per_hour, args.tokens_per_second
        if args.summary:
            s_usd, s_tps = _from_summary(args.summary)
            usd, tps = usd if usd is not None else s_usd, tps if tps is not None else s_tps
        for flag, value in (("--usd-per-hour", usd), ("--tokens-per-second", tps)):
            if value is None:
                raise ValueError(f"{flag}: missing; give it, or --summary with a training summary that has it")
        ours = setup(args.name, usd, tps, ("--usd-per-hour", "--tokens-per-second"))
        theirs = setup(
            args.current_name,
            args.current_usd_per_hour,
            args.current_tokens_per_second,
            ("--current-usd-per-hour", "--current-tokens-per-second"),
        )
    except ValueError as e:
        return _error(str(e))
    print(comparison(ours, theirs))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare", help="a team's current setup ($/h, tokens/s) against a tpuray run, with the ratios"
    )
    p.add_argument("--current-usd-per-hour", required=True, help="what the current setup costs per hour (USD)")
    p.add_argument("--current-tokens-per-second", required=True, help="tokens/s the current setup trains")
    p.add_argument("--current-name", default="current", help="label of the current setup")
    p.add_argument("--usd-per-hour", default=None, help="the tpuray run's $/h (default: from --summary)")
    p.add_argument("--tokens-per-second", default=None, help="the tpuray run's tokens/s (default: from --summary)")
    p.add_argument("--summary", default=None, help="a file holding the training run's JSON summary line")
    p.add_argument("--name", default="tpuray", help="label of the tpuray run")
    p.set_defaults(func=cmd_compare)
