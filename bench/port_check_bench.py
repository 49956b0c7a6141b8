"""Benchmark ``tpuray port check`` on a generated 5,000-line script full of GPU-only constructs, against
``ast.parse`` of the same text (the floor: the check parses it once, then walks the tree once).

Prints one JSON line::

    {"lines": 5000, "findings": ..., "check_s": ..., "parse_s": ..., "ratio": ..., "target_s": 2.0, "ok": ...}

``check_s`` and ``parse_s`` are the medians of ``--repeat`` runs (CPU seconds of this process), taken in
alternation. ``ok`` is the target: the check of the file under 2 s. Before the walker was made iterative and each
finding's code read from its own lines, each finding re-split the whole source (``ast.get_source_segment``), so
the check grew with lines x findings. Run from the project root: ``python bench/port_check_bench.py``.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import time

from tpuray.components.review.port_check import check_source

_BLOCK = (
    "x{i} = model.cuda()\n"
    "torch.cuda.synchronize()\n"
    'y{i} = torch.randn(4, device="cuda")\n'
    "with torch.autocast('cuda'):\n"
    "    z{i} = torch.cuda.memory_allocated() + t{i}.cuda().sum()\n"
)


def script(lines: int) -> str:
    """A script of ``lines`` lines: ``import torch`` and blocks of five lines, about six findings each."""
    blocks = (lines - 1) // _BLOCK.count("\n")
    return "import torch\n" + "".join(_BLOCK.format(i=i) for i in range(blocks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    source = script(args.lines)
    check, parse = [], []
    findings = 0
    for _ in range(args.repeat):
        t = time.process_time()
        ast.parse(source, "bench.py")
        parse.append(time.process_time() - t)
        t = time.process_time()
        findings = len(check_source(source, "bench.py"))
        check.append(time.process_time() - t)
    check_s, parse_s = statistics.median(check), statistics.median(parse)
    print(
        json.dumps(
            {
                "lines": source.count("\n"),
                "findings": findings,
                "check_s": round(check_s, 4),
                "parse_s": round(parse_s, 4),
                "ratio": round(check_s / parse_s, 2),
                "target_s": 2.0,
                "ok": check_s < 2.0,
            }
        )
    )


if __name__ == "__main__":
    main()
