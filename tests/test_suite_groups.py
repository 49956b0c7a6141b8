"""The suite's own scheduling: under pytest-xdist's ``--dist loadgroup`` (pyproject's addopts), each test must carry
the group tests/conftest.py gives it, or xdist schedules every test on its own: two local Ray clusters then run at
once on the two cores, and one module's fixtures are built on both workers (a pytest that drops the group:
https://github.com/pytest-dev/pytest-xdist/issues/1386)."""

from __future__ import annotations

import pytest

from tests.conftest import CLUSTER_GROUP, SHARED_CLUSTER_GROUP, group_of


def test_this_test_runs_in_its_modules_group(request: pytest.FixtureRequest) -> None:
    if not hasattr(request.config, "workerinput") or request.config.getoption("dist") != "no":
        pytest.skip("not a pytest-xdist worker")  # a plain `pytest` run (no -n) schedules nothing
    assert request.config.getvalue("loadgroup"), "the suite runs with --dist loadgroup (pyproject addopts)"
    assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid


def test_the_cluster_groups_are_queued_first(request: pytest.FixtureRequest) -> None:
    """xdist queues the groups in collection order (``--no-loadscope-reorder``; by default it queues them by size)
    and hands the first two to its two workers: the two cluster groups, the suite's longest chains, are collected
    first, the one of the tests with clusters of their own before the shared cluster's."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not a pytest-xdist worker")
    assert request.config.getoption("loadscopereorder") is False, "pyproject addopts: --no-loadscope-reorder"
    groups = list(dict.fromkeys(group_of(item) for item in request.session.items))
    chains = [g for g in (CLUSTER_GROUP, SHARED_CLUSTER_GROUP) if g in groups]  # a run may select neither
    assert groups[: len(chains)] == chains, groups[:3]
