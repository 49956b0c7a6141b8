"""The suite's own scheduling: under pytest-xdist's ``--dist loadgroup`` (pyproject's addopts), each test must carry
the group tests/conftest.py gives it, or xdist schedules every test on its own: two local Ray clusters then run at
once on the two cores, and one module's fixtures are built on both workers (a pytest that drops the group:
https://github.com/pytest-dev/pytest-xdist/issues/1386)."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED_CLUSTER_FIXTURE, on_cluster


def test_this_test_runs_in_its_modules_group(request: pytest.FixtureRequest) -> None:
    if not hasattr(request.config, "workerinput") or request.config.getoption("dist") != "no":
        pytest.skip("not a pytest-xdist worker")  # a plain `pytest` run (no -n) schedules nothing
    assert request.config.getvalue("loadgroup"), "the suite runs with --dist loadgroup (pyproject addopts)"
    assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid


def test_the_cluster_group_is_queued_first(request: pytest.FixtureRequest) -> None:
    """xdist queues the groups in collection order (``--no-loadscope-reorder``; by default it queues them by size),
    and the cluster group, the suite's longest chain, is collected first: a worker starts it at once. The tests on
    the shared session cluster come last."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not a pytest-xdist worker")
    assert request.config.getoption("loadscopereorder") is False, "pyproject addopts: --no-loadscope-reorder"
    items = request.session.items
    if any(on_cluster(item) for item in items):  # not when a run selects no cluster test
        assert on_cluster(items[0]), items[0].nodeid
    shared = [SHARED_CLUSTER_FIXTURE in getattr(item, "fixturenames", ()) for item in items]
    assert shared == sorted(shared), "a test after the shared cluster's tests"


def test_a_test_beside_the_chain_is_slow_and_not_in_the_cluster_group(request: pytest.FixtureRequest) -> None:
    """``beside_clusters`` moves a slow test out of the chain, never into the fast loop: every test so marked is also
    ``slow`` (``-m "not slow"`` leaves it out) and runs in its module's group."""
    beside = [item for item in request.session.items if item.get_closest_marker("beside_clusters")]
    for item in beside:
        assert item.get_closest_marker("slow"), f"{item.nodeid}: beside_clusters without slow"
        assert not on_cluster(item), item.nodeid
    spawning = ("tests/workloads/xla/test_emulated_ddp.py", "tests/test_torch_tpu_launch_env.py")
    for item in request.session.items:  # modules whose every test spawns processes, where this run collected them
        if item.nodeid.split("::", 1)[0] in spawning:
            assert item in beside, item.nodeid


class _Outcome:
    def __init__(self, report: pytest.TestReport) -> None:
        self.report = report

    def get_result(self) -> pytest.TestReport:
        return self.report


def _skip_report(where: str, line: int, reason: str) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid=f"{where}::t{line}",
        location=(where, line, "t"),
        keywords={},
        outcome="skipped",
        longrepr=(where, line, reason),
        when="call",
    )


def test_a_skip_reason_is_said_once_on_one_line(request: pytest.FixtureRequest) -> None:
    """Two tests in two files skipped for the same missing thing, one with a reason over two lines: the summary's
    fold key (place, line, reason) is then the same for both, so ``-ra`` prints the reason once."""
    from tests.conftest import TESTS, pytest_runtest_makereport

    keys: list[object] = []
    for report in (
        _skip_report("tests/a.py", 3, "no CRDs:\n  fetch them"),
        _skip_report("tests/b.py", 9, "no CRDs: fetch them"),
    ):
        hook = pytest_runtest_makereport(request.node, None)  # type: ignore[arg-type]
        next(hook)
        with pytest.raises(StopIteration):
            hook.send(_Outcome(report))  # type: ignore[arg-type]
        keys.append(report.longrepr)
    assert keys == [(str(TESTS), None, "no CRDs: fetch them")] * 2


def test_a_module_skipped_while_collected_is_folded_the_same_way(request: pytest.FixtureRequest) -> None:
    """A module-level ``pytest.importorskip`` skips in the collection report, which the test-report hook never sees."""
    from tests.conftest import TESTS, pytest_make_collect_report

    keys: list[object] = []
    for where in ("tests/a.py", "tests/b.py"):
        report = pytest.CollectReport(where, "skipped", (where, 1, "could not import 'torch_xla':\n  install it"), [])
        hook = pytest_make_collect_report(request.node)
        next(hook)
        with pytest.raises(StopIteration):
            hook.send(_Outcome(report))  # type: ignore[arg-type]
        keys.append(report.longrepr)
    assert keys == [(str(TESTS), None, "could not import 'torch_xla': install it")] * 2
