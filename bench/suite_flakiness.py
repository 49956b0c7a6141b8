"""How often each slow test passes: whole clean CI runs in a row, and the slow tests with the fast loop beside them.

A green run on a developer's machine says little about CI's when a test's outcome depends on how fast its job runs
against how fast something else arrives. This bench runs, one after the other on this machine:

* ``--ci-runs`` whole CI runs (``CI=true bash .ci/run``), each in a fresh clone of ``HEAD``, so each installs
  everything from the registries and runs the README's test command, as CI does: every slow test runs in each;
* ``--loaded-runs`` runs of the slow tests (``pytest -m slow``) in this checkout with the fast loop
  (``pytest -m "not slow"``) running again and again beside them, on the same cores.

Each run writes pytest's JUnit XML; the bench reads every test's outcome from it and prints, per slow test, its pass
rate over the runs it ran in (a skip is not a run), the tests below 100%, each run's exit status and time, and the
loaded runs' slow-test seconds over the median CI run's (the baseline, measured in the same bench: a CI run's
slow tests run beside nothing but each other). ``TPURAY_SHARED_DIR`` must name the CRDs' folder, as for ``.ci/run``.

    python bench/suite_flakiness.py [--ci-runs 3] [--loaded-runs 1] [--add] [--reports DIR] [--record]

``--add`` pools these runs with the recorded entry's (``counts``: each slow test's passes and runs), so runs taken
apart, a loaded run first and the CI runs later, give one rate per test; each run names the commit it ran.
``--reports DIR`` runs nothing and reads the CI runs an earlier bench kept in ``DIR`` (it prints where).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from figures import FIGURES, add_record_flag, emit

ROOT = Path(__file__).resolve().parents[1]
COMMIT_LINE = "commit: "
"""The first line of a CI run's kept log: the commit its clone checked out."""
NAME = "suite_flakiness"
"""Its entry in the figures file (the name ``emit`` is given below, spelled out for the docs' check)."""


def junit_key(classname: str, name: str) -> str:
    """A test's key as JUnit XML names it (``tests.a.test_b.TestC::test_d[x]``), without the ``@group`` that
    pytest-xdist's ``--dist loadgroup`` appends to a grouped test's name."""
    head, at, group = name.rpartition("@")
    if at and "]" not in group:
        name = head
    return f"{classname}::{name}"


def nodeid_key(nodeid: str) -> str:
    """The :func:`junit_key` of a pytest node id (``tests/a/test_b.py::TestC::test_d[x]``)."""
    path, *rest = nodeid.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return junit_key(".".join([module, *rest[:-1]]), rest[-1])


def outcomes(report: Path) -> dict[str, tuple[str, float]]:
    """Every test's outcome in a JUnit XML report, ``passed``, ``failed`` (a failure or an error) or ``skipped``,
    and its seconds (setup, call and teardown)."""
    out: dict[str, tuple[str, float]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        key = junit_key(case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        before, seconds = out.get(key, ("passed", 0.0))
        # a teardown error after a pass is a second entry of the same test: failed wins, the times add up
        worst = "failed" if "failed" in (before, outcome) else outcome
        out[key] = (worst, seconds + float(case.get("time", "0")))
    return out


def slow_tests() -> list[str]:
    """The slow tests' keys, as pytest collects them here."""
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "slow", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [nodeid_key(line) for line in got.stdout.splitlines() if "::" in line]


def ci_run(report: Path) -> dict[str, Any]:
    """One whole CI run in a fresh clone of ``HEAD``; the README's test command writes ``report``."""
    with tempfile.TemporaryDirectory(prefix="tpuray-ci-") as d:
        clone = Path(d) / "tpuray"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        # CI's own environment: not this bench's venv (.ci/run makes its own with python3 from PATH)
        path = [e for e in os.environ.get("PATH", "").split(os.pathsep) if not e.startswith(sys.prefix)]
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {
            "CI": "true",
            "PATH": os.pathsep.join(path),
            "PYTEST_ADDOPTS": f"--junitxml={report}",
        }
        commit = _commit(clone)
        t0 = time.monotonic()
        with open(report.with_suffix(".log"), "w") as log:
            log.write(f"{COMMIT_LINE}{commit}\n")
            log.flush()
            rc = subprocess.run(
                ["bash", ".ci/run"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT
            ).returncode
        return {"kind": "ci", "rc": rc, "seconds": round(time.monotonic() - t0), "commit": commit}


def _commit(repo: Path) -> str:
    got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    return got.stdout.strip()


def kept_ci_run(report: Path) -> dict[str, Any]:
    """A CI run of an earlier bench, from the log it kept beside ``report``: ``.ci/run`` prints its last line,
    ``ci: <seconds>s``, only when every step passed (``set -e``); the commit is the log's first line (None in a log
    written before the bench wrote it)."""
    lines = report.with_suffix(".log").read_text(errors="replace").splitlines()
    commit = lines[0].removeprefix(COMMIT_LINE) if lines and lines[0].startswith(COMMIT_LINE) else None
    total = next((int(line[4:-1]) for line in reversed(lines) if re.fullmatch(r"ci: \d+s", line)), None)
    return {"kind": "ci", "rc": 0 if total is not None else 1, "seconds": total, "commit": commit}


def loaded_run(report: Path) -> dict[str, Any]:
    """The slow tests in this checkout with the fast loop run again and again beside them."""
    t0 = time.monotonic()
    slow = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-m", "slow", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fast_loops: list[int] = []
    while slow.poll() is None:
        fast = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            capture_output=True,
        )
        fast_loops.append(fast.returncode)
    seconds = round(time.monotonic() - t0)
    return {
        "kind": "slow beside the fast loop",
        "rc": slow.returncode,
        "seconds": seconds,
        "fast_loops": fast_loops,
        "commit": _commit(ROOT),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ci-runs", type=int, default=3, help="whole clean CI runs, in a row")
    p.add_argument("--loaded-runs", type=int, default=1, help="slow-test runs with the fast loop beside them")
    p.add_argument(
        "--add",
        action="store_true",
        help="add these runs to those of the recorded entry (each run names its commit), the rates over them all",
    )
    p.add_argument(
        "--reports",
        type=Path,
        help="run nothing: read the CI runs an earlier bench kept in this folder (run-N.xml and run-N.log)",
    )
    add_record_flag(p)
    args = p.parse_args()
    if not os.environ.get("TPURAY_SHARED_DIR"):
        p.error("TPURAY_SHARED_DIR must name the folder that holds kuberay-crds/, as for .ci/run")
    slow = slow_tests()
    before: dict[str, Any] = {}
    if args.add and FIGURES.exists():
        before = json.loads(FIGURES.read_text()).get(NAME, {}).get("result", {})
    runs: list[dict[str, Any]] = list(before.get("runs", []))
    counts: dict[str, list[int]] = {k: list(v) for k, v in before.get("counts", {}).items() if k in slow}
    # kept after the bench: each run's report and a CI run's log, for the run that failed
    if args.reports is not None:
        kept = sorted(args.reports.glob("run-*.log"), key=lambda f: int(f.stem.split("-")[1]))
        plan = [(f.with_suffix(".xml"), kept_ci_run) for f in kept]
    else:
        d = Path(tempfile.mkdtemp(prefix="tpuray-flaky-"))
        todo = [ci_run] * args.ci_runs + [loaded_run] * args.loaded_runs
        plan = [(d / f"run-{i}.xml", run) for i, run in enumerate(todo)]
    for i, (report, run) in enumerate(plan):
        done = run(report)
        result = outcomes(report) if report.exists() else {}
        # the slow tests' own time: the baseline the loaded runs compare with (a CI run also installs and lints)
        done["slow_test_seconds"] = round(sum(result[k][1] for k in slow if k in result))
        for key in slow:
            if key in result and result[key][0] != "skipped":
                passed, ran = counts.setdefault(key, [0, 0])
                counts[key] = [passed + (result[key][0] == "passed"), ran + 1]
        runs.append(done)
        print(f"run {i}: {done} (report: {report})", file=sys.stderr)
    # None: the test never ran (skipped in every run)
    rates = {k: round(counts[k][0] / counts[k][1], 3) if k in counts else None for k in slow}
    quiet = sorted(r["slow_test_seconds"] for r in runs if r["kind"] == "ci")
    loaded = [r["slow_test_seconds"] for r in runs if r["kind"] != "ci"]
    emit(
        "suite_flakiness",
        {
            "slow_tests": len(slow),
            "runs": runs,
            "runs_passed_in_a_row": next((i for i, r in enumerate(runs) if r["rc"] != 0), len(runs)),
            "below_100_percent": {k: v for k, v in rates.items() if v != 1.0},
            "pass_rate": rates,
            "counts": counts,
            "loaded_over_quiet_slow_seconds": round(max(loaded) / quiet[len(quiet) // 2], 3)
            if loaded and quiet and quiet[len(quiet) // 2]
            else None,
        },
        record_it=args.record,
    )


if __name__ == "__main__":
    main()
