"""Every TCP port something in a Ray pod listens on, by who opens it: the facts the review's listener rule
(``tpuray.components.review.listener_rules``) reads to fail a pod with two listeners at one port.

Pure Python, no Pulumi. Each pod's listeners come from four places, each written once here or in the table it cites:

- Ray, from the pod's ``rayStartParams`` and, for a flag the pod does not set, the default of ``ray start`` (Ray
  2.60 ``python/ray/scripts/scripts.py``) or the one KubeRay v1.7.0 writes in its place (``common/pod.go``
  ``generateRayStartCommand``: ``metrics-export-port`` 8080, ``dashboard-agent-listen-port`` 52365). A port Ray
  picks at random when unpinned (the node manager's, the object manager's, the agents' gRPC ports) comes from the
  kernel's ephemeral range and is not listed: no fixed port can be checked against it.
- the TPU runtime's processes: the ranges of the runtime's row (:mod:`tpuray.components.catalog.runtimes`, one port
  per process from the slice's devices per host), those between slices only where the pod's group may run a job
  across slices, and the row's single listeners (TorchTPU's split-compile handshake on rank 0).
- Serve, on the pods of a RayService: its proxy's HTTP port on every node (Ray 2.60 ``serve/config.py``:
  ``proxy_location`` defaults to ``EveryNode``), and its gRPC port when the config asks for gRPC.
- the TPU webhook's per-container env (kuberay-tpu-webhook ``main.go`` at 5da78aa, ``mutatePod``): on tpu7x
  multi-host ``TPU_PROCESS_PORT = 8471 + container``, and ``MEGASCALE_PORT = 8081 (+ container on tpu7x)`` where the
  container already names ``MEGASCALE_NUM_SLICES``. Both runtimes set these in each process before it binds
  (PyTorch/XLA: tpuray's per-chip env; TorchTPU: its C++ glue from the slice-builder list, and Ray then torch_tpu's
  ``AssignMegascalePorts`` for the multislice port), so they are listed as the webhook's values, not as listeners.
- the ports the pod's other containers declare: sidecars in the template, and native sidecars (init containers with
  ``restartPolicy: Always``, which keep running beside the Ray container). GKE's GCS FUSE sidecars declare none
  (GoogleCloudPlatform/gcs-fuse-csi-driver ``pkg/webhook/sidecar_spec.go``, ``GetSidecarContainerSpec`` and
  ``GetMetadataPrefetchSidecarContainerSpec`` set no ``Ports``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tpuray.components.catalog.names import (
    KUBERAY_DEFAULT_METRICS_PORT,
    RAY_CLIENT_PORT,
    RAY_DASHBOARD_PORT,
    RAY_GCS_PORT,
    RAY_SERVE_HTTP_PORT,
    TPU_MEGASCALE_PORT,
    TPU_SLICEBUILDER_PORT,
)
from tpuray.components.catalog.runtimes import Runtime
from tpuray.components.catalog.topology import TpuSlice

__all__ = [
    "RAY_DASHBOARD_AGENT_LISTEN_PORT",
    "RAY_SERVE_GRPC_PORT",
    "Listener",
    "clashes",
    "ray_listeners",
    "runtime_listeners",
    "serve_listeners",
    "webhook_listeners",
]

RAY_DASHBOARD_AGENT_LISTEN_PORT = 52365
"""Ray 2.60 ``ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT``; KubeRay v1.7.0 writes it when a pod sets none."""
RAY_WORKER_PORTS_DEFAULT = (10002, 19999)
"""``ray start``'s ``--min-worker-port`` and ``--max-worker-port`` defaults (Ray 2.60 ``scripts/scripts.py``)."""
RAY_CLIENT_SERVER_PORTS = (23000, 24000)
"""The Ray client proxy's per-client servers on the head (Ray 2.60 ``ray/util/client/server/proxier.py``,
``MIN_SPECIFIC_SERVER_PORT`` and ``MAX_SPECIFIC_SERVER_PORT``)."""
RAY_SERVE_GRPC_PORT = 9000
"""Serve's gRPC proxy port (Ray 2.60 ``serve/_private/constants.py`` ``DEFAULT_GRPC_PORT``)."""
_RAY_PINNED = (
    ("node-manager-port", "the raylet"),
    ("object-manager-port", "the object manager"),
    ("runtime-env-agent-port", "the runtime env agent"),
    ("dashboard-agent-grpc-port", "the dashboard agent's gRPC server"),
)
"""Ray flags whose port is random (ephemeral) unless the pod pins it."""


@dataclass(frozen=True)
class Listener:
    """TCP ports ``first..last`` one kind of listener takes in a pod, and who opens them."""

    first: int
    last: int
    what: str
    binds: bool = True
    """False: a port written into the env for a process that binds another (the TPU webhook's, module docstring)."""

    @property
    def ports(self) -> range:
        return range(self.first, self.last + 1)

    def __str__(self) -> str:
        at = f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.what} ({at})"


def _one(port: int, what: str) -> Listener:
    return Listener(port, port, what)


def _port(params: Mapping[str, str], flag: str, default: int | None) -> int | None:
    raw = params.get(flag)
    if raw is None:
        return default
    try:
        return int(str(raw))
    except ValueError:
        raise ValueError(f"rayStartParams {flag}: {raw!r} is not a port number") from None


def ray_listeners(params: Mapping[str, str], *, head: bool) -> list[Listener]:
    """Ray's listeners on a node started with ``params`` (``rayStartParams``), as KubeRay v1.7.0 starts it."""
    out = []
    if head:
        out.append(_one(_port(params, "port", RAY_GCS_PORT) or RAY_GCS_PORT, "Ray's GCS (port)"))
        if str(params.get("include-dashboard", "true")).lower() != "false":
            dash = _port(params, "dashboard-port", RAY_DASHBOARD_PORT) or RAY_DASHBOARD_PORT
            out.append(_one(dash, "Ray's dashboard (dashboard-port)"))
        client = _port(params, "ray-client-server-port", RAY_CLIENT_PORT) or RAY_CLIENT_PORT
        out.append(_one(client, "Ray's client server (ray-client-server-port)"))
        out.append(Listener(*RAY_CLIENT_SERVER_PORTS, "Ray client's per-client servers"))
    for flag, what in _RAY_PINNED:
        port = _port(params, flag, None)
        if port:
            out.append(_one(port, f"{what} ({flag})"))
    agent = _port(params, "dashboard-agent-listen-port", RAY_DASHBOARD_AGENT_LISTEN_PORT)
    out.append(_one(agent or RAY_DASHBOARD_AGENT_LISTEN_PORT, "Ray's dashboard agent (dashboard-agent-listen-port)"))
    metrics = _port(params, "metrics-export-port", KUBERAY_DEFAULT_METRICS_PORT) or KUBERAY_DEFAULT_METRICS_PORT
    out.append(_one(metrics, "Ray's metrics export (metrics-export-port)"))
    lo = _port(params, "min-worker-port", RAY_WORKER_PORTS_DEFAULT[0]) or RAY_WORKER_PORTS_DEFAULT[0]
    hi = _port(params, "max-worker-port", RAY_WORKER_PORTS_DEFAULT[1]) or RAY_WORKER_PORTS_DEFAULT[1]
    out.append(Listener(lo, hi, "Ray's worker processes (min-worker-port..max-worker-port)"))
    return out


def runtime_listeners(runtime: Runtime, tpu_slice: TpuSlice, *, multislice: bool) -> list[Listener]:
    """The listeners of ``runtime``'s processes on one host of ``tpu_slice``; the multislice ones only when a job
    on the pod's group may span slices."""
    label = {"xla": "PyTorch/XLA", "torch_tpu": "TorchTPU"}[runtime.name]
    out = [
        Listener(r.first, r.last, f"{label}'s {r.name}")
        for r in runtime.ports(tpu_slice)
        if multislice or r.between == "hosts"
    ]
    out += [_one(port, f"{label}'s {name}") for name, port in runtime.single_listeners]
    return out


def serve_listeners(serve_config: Mapping[str, object]) -> list[Listener]:
    """Serve's proxies on each node of a RayService, from its ``serveConfigV2``."""
    http = serve_config.get("http_options")
    port = http.get("port", RAY_SERVE_HTTP_PORT) if isinstance(http, Mapping) else RAY_SERVE_HTTP_PORT
    out = [_one(int(str(port)), "Serve's HTTP proxy (http_options.port)")]
    grpc = serve_config.get("grpc_options")
    if isinstance(grpc, Mapping) and grpc.get("grpc_servicer_functions"):
        out.append(_one(int(str(grpc.get("port", RAY_SERVE_GRPC_PORT))), "Serve's gRPC proxy (grpc_options.port)"))
    return out


def webhook_listeners(tpu_slice: TpuSlice, container: int, env: Mapping[str, str]) -> list[Listener]:
    """The port variables the TPU webhook 1.3.1 writes into TPU container ``container`` (numbered from 0 among the
    pod's TPU containers) where they are unset: values the runtime replaces, so none binds (module docstring)."""
    v7x = tpu_slice.generation == "tpu7x"  # main.go's isV7x
    out = []
    if tpu_slice.multi_host and v7x and "TPU_PROCESS_PORT" not in env:
        port = TPU_SLICEBUILDER_PORT + container
        out.append(Listener(port, port, f"the TPU webhook's TPU_PROCESS_PORT of container {container}", binds=False))
    if "MEGASCALE_NUM_SLICES" in env and "MEGASCALE_PORT" not in env:
        port = TPU_MEGASCALE_PORT + (container if v7x else 0)
        out.append(Listener(port, port, f"the TPU webhook's MEGASCALE_PORT of container {container}", binds=False))
    return out


def clashes(listeners: Iterable[Listener]) -> list[tuple[Listener, Listener, list[int]]]:
    """Every pair of ``listeners`` that bind a port in common, with those ports."""
    found = []
    ls = [x for x in listeners if x.binds]
    for i, a in enumerate(ls):
        for b in ls[i + 1 :]:
            common = list(range(max(a.first, b.first), min(a.last, b.last) + 1))
            if common:
                found.append((a, b, common))
    return found
