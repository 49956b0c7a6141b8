"""An emulated GKE TPU device plugin metrics endpoint, one per emulated TPU host, on the loopback.

On GKE the ``tpu-device-plugin`` DaemonSet serves each TPU node's chip metrics as Prometheus text on the node's
port 2112 (:mod:`tpuray.components.catalog.metric_names`), and Ray's reporter agent reads it from
``TPU_DEVICE_PLUGIN_ADDR`` to export its ``ray_tpu_*`` gauges. This serves the same metric names and labels
for an emulated host, so Ray's reporter agent, a Prometheus and the dashboard's TPU panels can be exercised
without a TPU.

The shape follows the real plugin: per chip bound to a container, ``duty_cycle``, ``memory_used``,
``memory_total``, ``tensorcore_utilization`` and ``memory_bandwidth_utilization`` with ``namespace``/``pod``/
``container`` labels, and per chip of the node ``duty_cycle_node``, ``tensorcore_utilization_node``,
``memory_bandwidth_utilization_node``; every series carries ``accelerator_id`` (``<instance id>-<chip>``),
``make="cloud-tpu"``, ``model`` (GKE's accelerator name) and ``tpu_topology``. Like the real plugin (Ray's
``_get_tpu_usage`` explains the quirk), the runtime metrics (duty cycle, memory) number the chips across the
slice and the host metrics (TensorCore, bandwidth) number them 0..N-1 on the host.

The values are what an emulated chip can honestly report: the duty cycle and TensorCore utilisation are the CPU
share of the worker process that drives the chip since the last scrape, memory used is its resident memory,
memory total is the host's RAM shared evenly over its chips, and HBM bandwidth is 0 (there is none).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tpuray.components.catalog import metric_names as mn
from tpuray.components.catalog.topology import TpuSlice

__all__ = ["ChipUsage", "EmulatedDevicePlugin", "exposition", "instance_id", "process_usage"]

EMULATED_NAMESPACE = "emulated"
EMULATED_CONTAINER = "ray-worker"


@dataclass(frozen=True)
class ChipUsage:
    """One chip's figures at a scrape."""

    duty_cycle_pct: float
    memory_used_bytes: int
    bound: bool = True
    """Whether a worker process holds the chip (the plugin adds the pod labels and the per-container series)."""


def instance_id(slice_name: str, worker_id: int) -> str:
    """A stable numeric stand-in for the TPU VM's instance id (the ``accelerator_id`` prefix)."""
    digest = hashlib.sha256(f"{slice_name}/{worker_id}".encode()).hexdigest()
    return str(int(digest[:15], 16))


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


def exposition(
    tpu_slice: TpuSlice,
    slice_name: str,
    worker_id: int,
    usage: Sequence[ChipUsage],
    memory_total_bytes: int,
) -> str:
    """The Prometheus text the plugin of host ``worker_id`` serves for its chips' ``usage`` (pure)."""
    if len(usage) != tpu_slice.chips_per_host:
        raise ValueError(f"host of {tpu_slice} has {tpu_slice.chips_per_host} chips, got {len(usage)} readings")
    inst = instance_id(slice_name, worker_id)
    base = {mn.DP_MAKE_LABEL: mn.DP_MAKE, mn.DP_MODEL_LABEL: tpu_slice.gke_accelerator}
    base[mn.DP_TOPOLOGY_LABEL] = tpu_slice.topology
    pod = {
        mn.DP_NAMESPACE_LABEL: EMULATED_NAMESPACE,
        mn.DP_POD_LABEL: f"{slice_name}-{worker_id}",
        mn.DP_CONTAINER_LABEL: EMULATED_CONTAINER,
    }
    first = worker_id * tpu_slice.chips_per_host  # runtime metrics number the chips across the slice

    def series(name: str, help_text: str, rows: list[tuple[dict[str, str], float]]) -> list[str]:
        out = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        out += [f"{name}{_labels(labels)} {value!r}" for labels, value in rows]  # repr: exact bytes
        return out

    def acc(i: int, runtime: bool) -> dict[str, str]:
        return {mn.DP_ACCELERATOR_ID_LABEL: f"{inst}-{first + i if runtime else i}", **base}

    bound = [(i, u) for i, u in enumerate(usage) if u.bound]
    lines: list[str] = []
    lines += series(
        mn.DP_DUTY_CYCLE,
        "Percent of time when the TPU was actively processing",
        [({**acc(i, True), **pod}, u.duty_cycle_pct) for i, u in bound],
    )
    lines += series(
        mn.DP_MEMORY_USED,
        "Allocated TPU memory in bytes",
        [({**acc(i, True), **pod}, u.memory_used_bytes) for i, u in bound],
    )
    lines += series(
        mn.DP_MEMORY_TOTAL,
        "Total memory available on the TPU in bytes",
        [({**acc(i, True), **pod}, memory_total_bytes) for i, _ in bound],
    )
    lines += series(
        mn.DP_TENSORCORE_UTILIZATION,
        "Tensorcore percent utilization of the TPU device",
        [({**acc(i, False), **pod}, u.duty_cycle_pct) for i, u in bound],
    )
    lines += series(
        mn.DP_MEMORY_BANDWIDTH_UTILIZATION,
        "Memory bandwidth utilization of the TPU device",
        [({**acc(i, False), **pod}, 0.0) for i, _ in bound],
    )
    # the runtime node series, like the ones above, only for bound chips (ai-on-gke/tpu-device-plugin
    # pkg/metrics/prom_metrics.go UpdateRuntimeMetrics); the host ones below for every chip of the node
    lines += series(
        mn.DP_DUTY_CYCLE_NODE,
        "Percent of time when the TPU was actively processing",
        [(acc(i, True), u.duty_cycle_pct) for i, u in bound],
    )
    lines += series(
        mn.DP_MEMORY_USED_NODE, "Allocated TPU memory in bytes", [(acc(i, True), u.memory_used_bytes) for i, u in bound]
    )
    lines += series(
        mn.DP_MEMORY_TOTAL_NODE,
        "Total memory available on the TPU in bytes",
        [(acc(i, True), memory_total_bytes) for i, _ in bound],
    )
    lines += series(
        mn.DP_TENSORCORE_UTILIZATION_NODE,
        "Tensorcore percent utilization of the TPU device per node",
        [(acc(i, False), u.duty_cycle_pct) for i, u in enumerate(usage)],
    )
    lines += series(
        mn.DP_MEMORY_BANDWIDTH_UTILIZATION_NODE,
        "Memory bandwidth utilization of the TPU device per node",
        [(acc(i, False), 0.0) for i in range(len(usage))],
    )
    return "\n".join(lines) + "\n"


class _CpuMeter:
    """CPU share of processes between two readings, from ``/proc/<pid>/stat`` (Linux)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, float]] = {}
        self._tick = float(os.sysconf("SC_CLK_TCK"))
        self._page = int(os.sysconf("SC_PAGE_SIZE"))

    def read(self, pid: int) -> tuple[float, int] | None:
        """(percent of one core since the last reading, resident bytes), or None if the process is gone."""
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        cpu_s = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime (fields 14, 15 of stat)
        rss = int(fields[21]) * self._page
        now = time.monotonic()
        before = self._last.get(pid)
        self._last[pid] = (now, cpu_s)
        if before is None or now <= before[0]:
            return 0.0, rss
        return max(0.0, min(100.0, 100.0 * (cpu_s - before[1]) / (now - before[0]))), rss


def process_usage(chips: int, pids: Callable[[], list[int]]) -> Callable[[], list[ChipUsage]]:
    """Readings for ``chips`` chips from the processes ``pids()`` lists, one process per chip in order; a chip
    without a process reads idle and unbound."""
    meter = _CpuMeter()
    lock = threading.Lock()

    def read() -> list[ChipUsage]:
        with lock:
            procs = pids()[:chips]
            out = []
            for i in range(chips):
                got = meter.read(procs[i]) if i < len(procs) else None
                out.append(ChipUsage(got[0], got[1]) if got else ChipUsage(0.0, 0, bound=False))
            return out

    return read


class EmulatedDevicePlugin:
    """Serves :func:`exposition` for one emulated host at ``http://127.0.0.1:<port>/metrics``."""

    def __init__(
        self,
        tpu_slice: TpuSlice,
        slice_name: str,
        worker_id: int,
        usage: Callable[[], list[ChipUsage]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.tpu_slice, self.slice_name, self.worker_id = tpu_slice, slice_name, worker_id
        idle = [ChipUsage(0.0, 0, bound=False)] * tpu_slice.chips_per_host
        self.usage: Callable[[], list[ChipUsage]] = usage or (lambda: idle)
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.memory_total_bytes = int(ram // tpu_slice.chips_per_host)
        plugin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != mn.TPU_DEVICE_PLUGIN_METRICS_PATH:
                    self.send_error(404)
                    return
                body = plugin.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes are not news

        self._host = host
        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="emulated-device-plugin", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port``, the form of ``TPU_DEVICE_PLUGIN_ADDR``."""
        return f"{self._host}:{self._server.server_port}"

    def render(self) -> str:
        return exposition(self.tpu_slice, self.slice_name, self.worker_id, self.usage(), self.memory_total_bytes)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
