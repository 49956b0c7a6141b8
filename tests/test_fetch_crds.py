"""tools/fetch_crds.py's fetch-and-verify and the suite's CRD lookup that calls it (tests/support/crds.py), against a
server on loopback that serves copies of the pinned CRDs: a good file is cached, a tampered one refused, and no
network is a skip that says how to get them (a failure under CI), never a pass."""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import crds
from tests.support.crds import crd_folder, fetch_crds, find

FOLDERS = tuple(fetch_crds.FILES)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the pinned CRDs (from wherever the suite reads them) served on loopback: (its root, base URLs)."""
    root = tmp_path / "served"
    for folder in FOLDERS:
        shutil.copytree(crd_folder(folder), root / folder, ignore=shutil.ignore_patterns(".*"))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, {folder: f"http://127.0.0.1:{httpd.server_address[1]}/{folder}" for folder in FOLDERS}
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def fresh_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty shared dir and an empty cache (the returned path), outside CI; the lookup forgets what it found
    before and after, so the rest of the session reads the real CRDs again."""
    monkeypatch.setenv("TPURAY_SHARED_DIR", str(tmp_path / "empty-shared"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("CI", raising=False)
    find.cache_clear()
    yield tmp_path / "xdg" / "tpuray" / "crds" / str(fetch_crds.VERSIONS)
    find.cache_clear()


def _point_at(monkeypatch: pytest.MonkeyPatch, bases: dict[str, str]) -> None:
    for folder, base in bases.items():
        monkeypatch.setitem(fetch_crds.FILES, folder, (base, fetch_crds.FILES[folder][1]))


def test_fetch_writes_each_verified_file_once(served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, bases = served
    target = tmp_path / "target"
    written = fetch_crds.fetch(target, bases)
    assert sorted(p.relative_to(target).as_posix() for p in written) == sorted(
        f"{folder}/{name}" for folder in FOLDERS for name in fetch_crds.FILES[folder][1]
    )
    assert fetch_crds.missing(target) == []
    assert fetch_crds.fetch(target, bases) == []  # already there with their checksums: nothing fetched again


def test_fetch_refuses_a_tampered_file_and_writes_nothing_of_it(
    served: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, bases = served
    victim = root / "kueue-crds" / "kueue.x-k8s.io_clusterqueues.yaml"
    victim.write_bytes(victim.read_bytes() + b"\n# one more line\n")
    target = tmp_path / "target"
    with pytest.raises(fetch_crds.ChecksumMismatch, match=r"kueue\.x-k8s\.io_clusterqueues\.yaml has sha256"):
        fetch_crds.fetch(target, bases)
    assert not (target / "kueue-crds" / victim.name).exists()
    assert not list(target.rglob("*.part"))


def test_fetch_names_the_url_it_could_not_reach(tmp_path: Path) -> None:
    with pytest.raises(fetch_crds.Unreachable, match=r"could not fetch http://127\.0\.0\.1:9/ray\.io_rayclusters"):
        fetch_crds.fetch(tmp_path, {folder: "http://127.0.0.1:9" for folder in FOLDERS}, timeout=5)
    assert not list(tmp_path.rglob("*.yaml"))


def test_the_suite_fetches_into_its_cache_and_then_reads_it_from_there(
    served: tuple[Path, dict[str, str]], fresh_lookup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _point_at(monkeypatch, served[1])
    assert crd_folder("kuberay-crds") == fresh_lookup / "kuberay-crds"
    assert {p.parent.name for p in fetch_crds.missing(fresh_lookup)} == {"kueue-crds", "gmp-crds"}  # one folder
    assert crd_folder("gmp-crds") == fresh_lookup / "gmp-crds"
    find.cache_clear()
    _point_at(monkeypatch, {folder: "http://127.0.0.1:9" for folder in FOLDERS})  # a cached run needs no network
    assert crd_folder("gmp-crds") == fresh_lookup / "gmp-crds"


def test_the_suite_fails_on_a_tampered_file(
    served: tuple[Path, dict[str, str]], fresh_lookup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, bases = served
    victim = root / "gmp-crds" / "monitoring.googleapis.com_rules.yaml"
    victim.write_bytes(b"kind: CustomResourceDefinition\n")
    _point_at(monkeypatch, bases)
    with pytest.raises(pytest.fail.Exception, match=r"pinned CRD refused: .*monitoring\.googleapis\.com_rules\.yaml"):
        crd_folder("gmp-crds")


def test_the_suite_fails_on_a_changed_file_in_the_shared_folder(
    tmp_path: Path, fresh_lookup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    (shared / "kuberay-crds").mkdir(parents=True)
    for name in crds.pinned("kuberay-crds"):
        (shared / "kuberay-crds" / name).write_text("not the pinned file\n")
    monkeypatch.setenv("TPURAY_SHARED_DIR", str(shared))
    with pytest.raises(pytest.fail.Exception, match="differ from the pinned sha256"):
        crd_folder("kuberay-crds")


def test_without_network_the_suite_skips_on_one_line_and_fails_under_ci(
    fresh_lookup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _point_at(monkeypatch, {folder: "http://127.0.0.1:9" for folder in FOLDERS})
    monkeypatch.setattr(crds, "FETCH_TIMEOUT", 5.0)
    with pytest.raises(pytest.skip.Exception) as skipped:
        crd_folder("kueue-crds")
    reason = str(skipped.value)
    assert "\n" not in reason
    assert "tools/fetch_crds.py" in reason and "TPURAY_SHARED_DIR" in reason
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"tools/fetch_crds\.py"):
        crd_folder("kueue-crds")


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_skip_names_its_own_folders_source(folder: str, fresh_lookup: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each folder's skip line names the URL of that folder's files, never another's (KubeRay's comes first)."""
    _point_at(monkeypatch, {f: f"http://127.0.0.1:9/{f}-source" for f in FOLDERS})
    monkeypatch.setattr(crds, "FETCH_TIMEOUT", 5.0)
    with pytest.raises(pytest.skip.Exception) as skipped:
        crd_folder(folder)
    named = {f for f in FOLDERS if f"/{f}-source/" in str(skipped.value)}
    assert named == {folder}, str(skipped.value)
