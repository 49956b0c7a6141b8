"""How the suite spreads over CPUs (pytest-xdist, ``--dist loadgroup``).

Tests marked ``slow`` start real processes (a local Ray cluster, ``ray start``, a Prometheus server). Those on the
emulated cluster that tests/workloads/conftest.py shares for the session (the ``emulated_slices`` fixture) form
one group, :data:`SHARED_CLUSTER_GROUP`; those that start clusters of their own (a command's, ``ray start``, one
they take hosts from) another, :data:`CLUSTER_GROUP`. The two groups are the suite's longest chains: they are
queued first, so the two workers start one each at once, and at most two clusters run at a time. A ``slow`` test
that starts no Ray cluster (fresh PyTorch/XLA processes, a Prometheus server) says so with ``no_ray_cluster``:
it is grouped by its module, off the chains. Every other test is grouped by its module, so a module's fixtures
are built once.
https://pytest-xdist.readthedocs.io/en/stable/distribution.html
"""

from __future__ import annotations

import gc

import pytest

from tests.components.prometheus_server import prometheus_binary

CLUSTER_GROUP = "local-clusters"
SHARED_CLUSTER_GROUP = "shared-cluster"
SHARED_CLUSTER_FIXTURE = "emulated_slices"  # tests/workloads/conftest.py


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts real processes (a Ray cluster, a Prometheus server); runs in CI")
    config.addinivalue_line(
        "markers",
        "prometheus: needs a real Prometheus (Debian's prometheus package); skips without one, fails under CI=true",
    )
    config.addinivalue_line(
        "markers", "no_ray_cluster: a slow test that starts no Ray cluster; runs beside the cluster tests, not after"
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
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    # The cluster groups come first, and pyproject's --no-loadscope-reorder keeps xdist from queueing the groups by
    # size instead: xdist hands the first two groups to its two workers, which start both chains at once. The
    # tests with clusters of their own come before the shared cluster's, which lives until the session ends: a
    # driver connects to one cluster at a time, and in a run without xdist (-n 0) both chains share one process.
    # The sort is stable: each group keeps its own order.
    order = {CLUSTER_GROUP: 0, SHARED_CLUSTER_GROUP: 1}
    items.sort(key=lambda item: order.get(group_of(item), 2))


def group_of(item: pytest.Item) -> str:
    """The test's xdist group: one of the two cluster groups for a ``slow`` test not marked ``no_ray_cluster``,
    else its module."""
    if item.get_closest_marker("slow") is None or item.get_closest_marker("no_ray_cluster") is not None:
        return item.nodeid.split("::", 1)[0]
    return SHARED_CLUSTER_GROUP if SHARED_CLUSTER_FIXTURE in getattr(item, "fixturenames", ()) else CLUSTER_GROUP


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules are imported by now, and with them the Pulumi SDKs: hundreds of thousands of long-lived
    objects that every full collection of Python's cyclic collector would walk again. Move them out of its reach
    (``gc.freeze``), as ``tpuray.components.cli.run`` does for the command; later garbage is collected as usual."""
    gc.freeze()
