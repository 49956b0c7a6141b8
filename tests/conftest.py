"""How the suite spreads over CPUs (pytest-xdist, ``--dist loadgroup``).

Tests marked ``slow`` start real processes (a local Ray cluster, ``ray start``, a Prometheus server): they share
one group, so at most one such cluster runs at a time and each keeps the CPUs it was written for, while the
other workers run the rest. (Two cluster groups at once, one per worker, were measured slower on two cores, and
the drain test then missed its checkpoint; so did the slow tests that start no cluster but spawn PyTorch/XLA
processes, when they ran beside the chain: in that CI run the chain's multi-host and contract tests took 1.7 times
as long as in the run before, when those tests were still in the chain.) A slow test also marked
``beside_clusters`` starts only a few short processes (a fresh interpreter, a wheel build, a two-process gloo run):
it is left out of the fast loop like every slow test, but runs beside the chain in its module's group. Every other
test is grouped by its module, so a module's fixtures are built once.
https://pytest-xdist.readthedocs.io/en/stable/distribution.html
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from pathlib import Path

import pluggy
import pytest

from tests.support.prometheus_server import prometheus_binary

# the rendered plans, shared by the review, planning and component tests
pytest_plugins = ("tests.support.plans",)

CLUSTER_GROUP = "local-clusters"
SHARED_CLUSTER_FIXTURE = "emulated_slices"  # tests/workloads/conftest.py's session cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: starts real processes (a Ray cluster, a Prometheus server); not in the fast loop; runs in CI"
    )
    config.addinivalue_line(
        "markers",
        "beside_clusters: a slow test whose processes are few and short (a fresh interpreter, a wheel build, a "
        "two-process run): it runs beside the cluster chain, in its module's group",
    )
    config.addinivalue_line(
        "markers",
        "prometheus: needs a real Prometheus (Debian's prometheus package); skips without one, fails under CI=true",
    )


# tryfirst: before the runner sets up the test's fixtures, so a test skipped for want of Prometheus starts no cluster
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("prometheus"):
        prometheus_binary()


# tryfirst: xdist's own hook, which turns these marks into groups, is otherwise called before this one
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(CLUSTER_GROUP if on_cluster(item) else item.nodeid.split("::", 1)[0]))

    # The cluster group is the suite's longest chain, one test after another: it comes first, and pyproject's
    # --no-loadscope-reorder keeps xdist from queueing the groups by size instead, so a worker starts it at once
    # while the other runs the rest. The tests on the shared session cluster come last: it lives until the
    # session ends, and a driver connects to one cluster at a time (the tests that start clusters of their own,
    # and those that must find Ray unconnected, run before it starts in the same process). The sort is stable.
    # Among the other groups the longest go first (LONG_GROUPS), so the last ones queued are short and neither
    # worker waits long for the other at the end.
    items.sort(
        key=lambda item: (
            SHARED_CLUSTER_FIXTURE in getattr(item, "fixturenames", ()),
            not on_cluster(item),
            _long_rank(item.nodeid.split("::", 1)[0]),
        )
    )


LONG_GROUPS = (
    "tests/doctor/test_doctor.py",
    "tests/config/test_config_corpus.py",
    "tests/workloads/xla/test_emulated_ddp.py",
    "tests/review/test_plan_diff.py",
    "tests/test_torch_tpu_launch_env.py",
    "tests/test_packaging.py",
)
"""The modules whose group took longest beside the chain (``pytest -m "not slow or beside_clusters"
--durations=0``: 10 to 20 s each on two cores; fresh interpreters importing torch, torch_xla or Pulumi, or hundreds
of generated stacks), longest first. Only the queue order depends on it: a module missing from it, or no longer
long, just queues later."""


def _long_rank(module: str) -> int:
    return LONG_GROUPS.index(module) if module in LONG_GROUPS else len(LONG_GROUPS)


TESTS = Path(__file__).parent


# hookwrapper: the report exists only once the runner's own hook has made it
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """Each skip reason once, on one line: ``-ra`` folds the skips that share a place and a reason, and a skip is
    placed where it was raised or marked, a line per test. Every skip here is for want of something outside the
    repository (the CRDs, Prometheus, the torch_tpu venv, a framework), so it is placed at ``tests/`` and its
    reason folded onto one line: the summary then says each missing thing once, with how many tests it skipped."""
    outcome = yield
    _fold_skip(outcome.get_result())


# hookwrapper: a module-level ``pytest.importorskip`` skips the module while it is collected, in this report
@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pluggy.Result[pytest.CollectReport], None]:
    """The same fold for a module skipped while it is collected."""
    outcome = yield
    _fold_skip(outcome.get_result())


def _fold_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        # lineno None is what pytest's own fold uses for a module-wide skip mark (_pytest/terminal.py, _folded_skips)
        report.longrepr = (str(TESTS), None, " ".join(str(report.longrepr[2]).split()))  # type: ignore[assignment]


def on_cluster(item: pytest.Item) -> bool:
    """Whether the test runs in the cluster group: every ``slow`` test not marked ``beside_clusters``."""
    return item.get_closest_marker("slow") is not None and item.get_closest_marker("beside_clusters") is None


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules are imported by now, and with them the Pulumi SDKs: hundreds of thousands of long-lived
    objects that every full collection of Python's cyclic collector would walk again. Move them out of its reach
    (``gc.freeze``), as ``tpuray.components.cli.run`` does for the command; later garbage is collected as usual."""
    gc.freeze()
