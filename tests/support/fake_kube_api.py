"""A fake Kubernetes API server on loopback for ``tpuray doctor`` tests.

It serves a snapshot directory's files on the paths the Kubernetes Python client asks for a GET (an optional file
the snapshot lacks, such as ``gatewayclasses.json`` or ``rayclusters.json``, as the API server answers a resource it
does not serve), answers every other GET with a 404 Status, and records every request (a write gets a 405 and stays
in ``writes``), so a test can assert the doctor only read. Bound to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tpuray.components.doctor.reader import (
    GATEWAY_API_GROUP,
    GATEWAY_API_VERSION,
    LIST_FILES,
    OPTIONAL_LIST_FILES,
    OPTIONAL_LISTS,
    VERSION_FILE,
)

GATEWAY_CLASSES_PATH = f"/apis/{GATEWAY_API_GROUP}/{GATEWAY_API_VERSION}/gatewayclasses"
RAY_CLUSTERS_PATH = "/apis/{}/{}/{}".format(*OPTIONAL_LISTS["ray_clusters"][1:])

PATHS = {
    "/api/v1/nodes": LIST_FILES["nodes"],
    "/api/v1/pods": LIST_FILES["pods"],
    "/apis/apps/v1/deployments": LIST_FILES["deployments"],
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations": LIST_FILES["webhooks"],
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": LIST_FILES["crds"],
    "/version": VERSION_FILE,
    GATEWAY_CLASSES_PATH: OPTIONAL_LIST_FILES["gateway_classes"],
    RAY_CLUSTERS_PATH: OPTIONAL_LIST_FILES["ray_clusters"],
}
"""API path -> the snapshot file that answers it."""


@dataclass
class FakeApi:
    snapshot: Path
    port: int = 0
    gets: list[str] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)
    """Paths answered 403, as to an identity RBAC does not let list them."""

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def body(self, path: str) -> tuple[int, Any]:
        if path in self.forbidden:
            return 403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}
        name = PATHS.get(path)
        if name is None or not (self.snapshot / name).exists():
            return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        doc = json.loads((self.snapshot / name).read_text())
        if name == VERSION_FILE and "serverVersion" in doc:
            doc = doc["serverVersion"]  # the API's /version is kubectl's serverVersion
        return 200, doc


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, doc: Any) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path.rstrip("/") or "/"
            api.gets.append(path)
            self._answer(*api.body(path))

        def _write(self) -> None:
            api.writes.append((self.command, self.path))
            self._answer(405, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 405})

        do_POST = do_PUT = do_PATCH = do_DELETE = _write

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve(snapshot: Path, forbidden: set[str] | None = None) -> Iterator[FakeApi]:
    api = FakeApi(snapshot, forbidden=set(forbidden or ()))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    api.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def write_kubeconfig(path: Path, server: str, context: str = "fake") -> Path:
    """A kubeconfig whose ``context`` (also the current one) points at ``server`` with a bearer token."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": context,
    }
    path.write_text(json.dumps(doc))
    return path
