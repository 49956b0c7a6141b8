"""How the suite spreads over CPUs (pytest-xdist, ``--dist loadgroup``).

Tests marked ``slow`` start real processes (a local Ray cluster, ``ray start``, a Prometheus server): they share
one group, so at most one such cluster runs at a time and each keeps the CPUs it was written for, while the
other workers run the rest. Every other test is grouped by its module, so a module's fixtures are built once.
https://pytest-xdist.readthedocs.io/en/stable/distribution.html
"""

from __future__ import annotations

import pytest

CLUSTER_GROUP = "local-clusters"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts real processes (a Ray cluster, a Prometheus server); runs in CI")


# tryfirst: xdist's own hook, which turns these marks into groups, is otherwise called before this one
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = CLUSTER_GROUP if item.get_closest_marker("slow") else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
