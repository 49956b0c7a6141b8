"""A real Prometheus server (Debian's ``prometheus`` package) on the loopback, for tests.

:class:`LocalPrometheus` writes a config that scrapes the given ``host:port`` targets, starts ``prometheus`` with its
own temp dir on a free loopback port, and answers PromQL through the HTTP API (``/api/v1/query``). Tests use it to
scrape an emulated cluster's Ray metrics export ports and device-plugin endpoints. Absent binary: the test skips,
except in CI (``CI=true``), where it fails (``.ci/run`` installs the package): :func:`prometheus_binary`.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus_server import prometheus_binary

__all__ = ["LocalPrometheus", "prometheus_binary"]

SCRAPE_INTERVAL_S = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPrometheus:
    """``with LocalPrometheus({"ray": [...], "tpu-device-plugin": [...]}) as prom: prom.query("up")``."""

    def __init__(self, jobs: Mapping[str, Sequence[str]]) -> None:
        self.jobs = {name: list(targets) for name, targets in jobs.items()}
        self._dir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> LocalPrometheus:
        binary = prometheus_binary()
        self._dir = tempfile.mkdtemp(prefix="tpuray-prom-")
        config = {
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
            "scrape_configs": [
                {"job_name": name, "static_configs": [{"targets": targets}]} for name, targets in self.jobs.items()
            ],
        }
        (Path(self._dir) / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = _free_port()
        log = open(Path(self._dir) / "prometheus.log", "wb")
        self._proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self._dir}/prometheus.yml",
                f"--storage.tsdb.path={self._dir}/data",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2)
                return self
            except (urllib.error.URLError, ConnectionError):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    text = (Path(self._dir) / "prometheus.log").read_text()[-2000:]
                    self.__exit__()
                    raise RuntimeError(f"prometheus did not start: {text}") from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
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
            time.sleep(SCRAPE_INTERVAL_S)
