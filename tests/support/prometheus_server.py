"""A real Prometheus (Debian's ``prometheus`` package, ``/usr/bin/prometheus``) on loopback, for evaluating PromQL
through the real query API. Both ways of running one start it the same way (:func:`_running`):

- :func:`prometheus_scraping` scrapes a loopback exporter that serves a given Prometheus text exposition. The
  exposition can change between scrapes (:meth:`Exporter.set`), so counters and histograms grow and ``rate()`` has
  something to work on.
- :class:`LocalPrometheus` scrapes the given ``host:port`` targets (an emulated cluster's Ray metrics export ports and
  device-plugin endpoints), with its own temp dir.

:func:`prometheus_binary` finds the executable for every test that needs one (the ``prometheus`` marker of
tests/conftest.py calls it before the test's fixtures start anything): missing, the test skips with a message naming
the package, except under ``CI=true``, where it fails (``.ci/run`` installs the package).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

SCRAPE_SECONDS = 1
MISSING = (
    "needs a real Prometheus and finds no `prometheus` on PATH: install Debian's `prometheus` package "
    "(apt-get install prometheus, which puts it at /usr/bin/prometheus)"
)


def prometheus_binary() -> str:
    """The ``prometheus`` executable; a missing one skips the test, or fails it under ``CI=true``."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI {MISSING}; .ci/run installs it")
    pytest.skip(MISSING)


class Exporter:
    """``/metrics`` on 127.0.0.1 serving whatever :meth:`set` last gave."""

    def __init__(self) -> None:
        self._text = ""
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter._lock:
                    body = exporter._text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, text: str) -> None:
        with self._lock:
            self._text = text

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> dict[str, Any]:
        """``/api/v1/query`` at the current time: the decoded answer (``status`` ``success`` or ``error``)."""
        data = urllib.parse.urlencode({"query": promql}).encode()
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as r:
                answer: dict[str, Any] = json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad query is a 400 with the error as JSON
            answer = json.loads(e.read())
        return answer

    def series(self, promql: str) -> list[dict[str, Any]]:
        answer = self.query(promql)
        assert answer["status"] == "success", f"{promql}: {answer.get('error')}"
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_for_scrapes(self, n: int, timeout: float = 60.0) -> None:
        """Until the exporter's target has been scraped ``n`` times (``prometheus_target_interval`` is too coarse)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.query('count_over_time(up{job="exporter"}[10m])')
            result = got["data"]["result"] if got.get("status") == "success" else []
            if result and float(result[0]["value"][1]) >= n:
                return
            time.sleep(0.3)
        raise TimeoutError(f"Prometheus did not scrape the exporter {n} times in {timeout} s")


@contextmanager
def _running(config: Path, workdir: Path) -> Iterator[int]:
    """``prometheus`` with ``config`` on a free loopback port, its data and log (``prometheus.log``) in ``workdir``:
    the port once it answers ready; stopped (by its own process id) on exit."""
    port = _free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def prometheus_scraping(exporter: Exporter, workdir: Path) -> Iterator[Prometheus]:
    """A Prometheus that scrapes ``exporter`` every second; stopped (by its own process id) on exit."""
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_SECONDS}s\n  evaluation_interval: {SCRAPE_SECONDS}s\n"
        f"scrape_configs:\n  - job_name: exporter\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.port}']\n"
    )
    with _running(config, workdir) as port:
        yield Prometheus(f"http://127.0.0.1:{port}")


class LocalPrometheus:
    """``with LocalPrometheus({"ray": [...], "tpu-device-plugin": [...]}) as prom: prom.query("up")``: a Prometheus
    scraping each job's ``host:port`` targets every second, in a temp dir of its own (removed on exit)."""

    def __init__(self, jobs: Mapping[str, Sequence[str]]) -> None:
        self.jobs = {name: list(targets) for name, targets in jobs.items()}
        self._dir: str | None = None
        self._stack = ExitStack()
        self.port = 0

    def __enter__(self) -> LocalPrometheus:
        self._dir = tempfile.mkdtemp(prefix="tpuray-prom-")
        config = {
            "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
            "scrape_configs": [
                {"job_name": name, "static_configs": [{"targets": targets}]} for name, targets in self.jobs.items()
            ],
        }
        (Path(self._dir) / "prometheus.yml").write_text(yaml.safe_dump(config))
        try:
            self.port = self._stack.enter_context(_running(Path(self._dir) / "prometheus.yml", Path(self._dir)))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``; a PromQL error raises ``ValueError`` with Prometheus's message."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            body = json.loads(urllib.request.urlopen(url, timeout=30).read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        if body.get("status") != "success":
            raise ValueError(f"{params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each item ``{"metric": labels, "value": [t, "v"]}``)."""
        data = self.api("query", query=promql)
        return list(data["result"]) if isinstance(data["result"], list) else [data["result"]]

    def series(self, promql: str) -> list[dict[str, str]]:
        """The label sets of the query's result."""
        return [dict(r["metric"]) for r in self.query(promql)]

    def wait_for(self, promql: str, timeout_s: float = 120) -> list[dict[str, Any]]:
        """Poll until the query returns something."""
        end = time.monotonic() + timeout_s
        while True:
            got = self.query(promql)
            if got or time.monotonic() > end:
                return got
            time.sleep(SCRAPE_SECONDS)
