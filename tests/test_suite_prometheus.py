"""Tests that need a real Prometheus skip on a machine without one, naming Debian's package, before their fixtures
start anything; under ``CI=true`` they fail instead (``.ci/run`` always installs the package)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.support.prometheus_server import prometheus_binary

pytest_plugins = ["pytester"]

MARKED = """
import os
from pathlib import Path

import pytest


@pytest.fixture
def cluster():
    Path(os.environ["STARTED_FILE"]).write_text("a cluster started")
    yield


@pytest.mark.prometheus
def test_needs_prometheus(cluster):
    pass


def test_needs_nothing():
    pass
"""

CONFTEST = "from tests.conftest import pytest_configure, pytest_runtest_setup  # noqa: F401\n"


@pytest.fixture
def no_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the inner runs need no plugin (xdist, randomly...)


def test_a_missing_prometheus_skips_naming_debians_package(no_prometheus: None) -> None:
    with pytest.raises(pytest.skip.Exception) as skipped:
        prometheus_binary()
    assert "Debian's `prometheus` package" in str(skipped.value)
    assert "apt-get install prometheus" in str(skipped.value)


def test_a_missing_prometheus_fails_under_ci(no_prometheus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    try:
        with pytest.raises(pytest.fail.Exception, match="apt-get install prometheus"):
            prometheus_binary()
    except pytest.skip.Exception:
        pytest.fail("a missing Prometheus skipped the test under CI=true instead of failing it")


def test_the_prometheus_on_path_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "prometheus"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert prometheus_binary() == str(binary)


def test_a_marked_test_skips_before_its_fixtures_run(
    pytester: pytest.Pytester, no_prometheus: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = tmp_path / "started"
    monkeypatch.setenv("STARTED_FILE", str(started))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*Debian's `prometheus` package*apt-get install prometheus*"])
    assert not started.exists(), "the skipped test's fixture ran"


def test_a_marked_test_fails_under_ci_without_prometheus(
    pytester: pytest.Pytester, no_prometheus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("STARTED_FILE", str(pytester.path / "started"))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
