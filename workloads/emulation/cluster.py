"""A local Ray cluster that looks like TPU slices to Ray: one Ray node per emulated TPU host.

Each emulated host carries what Ray itself advertises on a real TPU VM (``_private/accelerators/tpu.py``):
resources ``TPU: <chips>``, ``accelerator_type:TPU-<GEN>``, ``<slice name>: 1`` and ``TPU-<pod type>-head: 1``
on worker 0; labels ``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``, ``ray.io/tpu-topology``,
``ray.io/tpu-pod-type``, ``ray.io/accelerator-type``; and the pod env the GKE TPU webhook injects
(:func:`tpuray.workloads.placement.worker_env.emulated_host_env`), which Ray's slice reservation reads; and, like a GKE
TPU node, a device plugin metrics endpoint (:mod:`tpuray.workloads.emulation.device_plugin`, on the loopback) that Ray's
reporter agent reads through ``TPU_DEVICE_PLUGIN_ADDR``. Workers run XLA on CPU. The cluster uses a private temp
dir and no token auth (local only).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuray.components.catalog.metric_names import TPU_DEVICE_PLUGIN_ADDR_ENV
from tpuray.components.catalog.names import (
    RAY_ACCELERATOR_TYPE_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
)
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.device_plugin import EmulatedDevicePlugin, process_usage
from tpuray.workloads.placement.worker_env import emulated_host_env

__all__ = [
    "LOOPBACK",
    "RAY_METRICS_INTERVAL_S",
    "EmulatedCluster",
    "HeadNode",
    "HostNode",
    "emulate",
    "host_node_spec",
]

LOOPBACK = "127.0.0.1"
"""Every emulated node binds here: a local test cluster never listens on, or sends to, another address."""
RAY_METRICS_INTERVAL_S = 10.0
"""Ray's own ``metrics_report_interval_ms`` default (10000 ms: ``ray._raylet.Config.metrics_report_interval_ms()`` in
Ray 2.60), which KubeRay leaves as it is: how often a Ray cluster on GKE reports metrics."""


@dataclass(frozen=True)
class HostNode:
    """The Ray node arguments of one emulated TPU host."""

    resources: dict[str, float]
    labels: dict[str, str]
    env: dict[str, str]
    num_cpus: int


@dataclass(frozen=True)
class HeadNode:
    """The Ray head's arguments: the env of its Ray processes (what a KubeRay head pod's container sets) and the CPUs
    it advertises (its ``rayStartParams`` ``num-cpus``). Jobs submitted with no entrypoint resources run their
    drivers here, in that env. The default is a plain local head with one CPU."""

    env: dict[str, str] = field(default_factory=dict)
    num_cpus: int = 1


def host_node_spec(tpu_slice: TpuSlice, slice_name: str, worker_id: int, user_xla_flags: str = "") -> HostNode:
    """What Ray would advertise for host ``worker_id`` of a slice named ``slice_name`` (pure).

    ``user_xla_flags`` (the caller's ``XLA_FLAGS``) go after the emulation's own: XLA reads the flags in order, so
    the user's win.
    """
    resources: dict[str, float] = {
        "TPU": float(tpu_slice.chips_per_host),
        f"accelerator_type:{tpu_slice.ray_accelerator_type}": 1.0,
        slice_name: 1.0,
    }
    if worker_id == 0:
        resources[f"TPU-{tpu_slice.pod_type}-head"] = 1.0
    labels = {
        RAY_SLICE_NAME_LABEL: slice_name,
        RAY_WORKER_ID_LABEL: str(worker_id),
        RAY_TOPOLOGY_LABEL: tpu_slice.topology,
        RAY_POD_TYPE_LABEL: tpu_slice.pod_type,
        RAY_ACCELERATOR_TYPE_LABEL: tpu_slice.ray_accelerator_type,
    }
    env = emulated_host_env(tpu_slice, slice_name, worker_id)
    mine = user_xla_flags.strip()
    if mine and mine != env["XLA_FLAGS"]:
        env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} {mine}"
    # One logical CPU per chip so each per-chip worker (1 CPU + 1 TPU) fits, whatever the real core count.
    return HostNode(resources=resources, labels=labels, env=env, num_cpus=tpu_slice.chips_per_host)


class EmulatedCluster:
    """Emulated TPU slices plus a CPU-only head node, like a KubeRay TPU cluster.

    ``tpu_slice`` with ``slices`` copies, or a list of ``(slice, copies)`` for a cluster of several shapes.
    Use as a context manager; ``address`` is what ``ray.init(address=...)`` takes, ``dashboard_url`` what Ray's
    job submission client takes. ``head``: the head node's env and CPUs (:class:`HeadNode`; a stack's planned head
    pod, in tests that submit jobs).
    ``metrics_interval_s``: how often Ray's processes report metrics to the node's agent (seconds; 1 here, so a
    short emulated run's gauges are scrapeable before its workers end; Ray's default, what a KubeRay cluster on
    GKE runs, is :data:`RAY_METRICS_INTERVAL_S`).
    """

    def __init__(
        self,
        tpu_slice: TpuSlice | Sequence[tuple[TpuSlice, int]],
        slices: int = 1,
        name_prefix: str = "emulated",
        metrics_interval_s: float = 1.0,
        head: HeadNode | None = None,
    ) -> None:
        self.head = head if head is not None else HeadNode()
        if self.head.num_cpus < 0:
            raise ValueError(f"head.num_cpus: a whole number >= 0, got {self.head.num_cpus}")
        self.layout = [(tpu_slice, slices)] if isinstance(tpu_slice, TpuSlice) else list(tpu_slice)
        for s, n in self.layout:
            if n < 1:
                raise ValueError(f"an emulated cluster needs at least one {s} slice, got {n}")
        if not metrics_interval_s > 0:
            raise ValueError(f"metrics_interval_s: a number of seconds > 0 (e.g. 1), got {metrics_interval_s!r}")
        self.metrics_interval_s = metrics_interval_s
        self.name_prefix = name_prefix
        self._cluster: Any = None
        self._dashboard_port: int | None = None
        self._tmp: str | None = None
        self._hosts: dict[str, tuple[Any, HostNode]] = {}
        self._plugins: dict[tuple[str, int], EmulatedDevicePlugin] = {}
        self._metrics_ports: dict[tuple[str, int], int] = {}

    def __enter__(self) -> EmulatedCluster:
        from tpuray.workloads._ray_compat import is_node_start_timeout

        try:
            self._start_or_clean_up()
        except Exception as e:
            if not is_node_start_timeout(e):
                raise
            # Ray's own start-up limit, not the emulation's: once more, from nothing, and said.
            print(
                "tpuray: a Ray node of the emulated cluster did not register within Ray's 30 s start-up limit "
                "(a busy machine?); starting the cluster once more",
                file=sys.stderr,
            )
            self._start_or_clean_up()
        return self

    def _start_or_clean_up(self) -> None:
        try:
            self.start()
        except BaseException:
            self.shutdown()
            raise

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def address(self) -> str:
        return str(self._cluster.address)

    @property
    def dashboard_url(self) -> str:
        """The head's dashboard, where Ray's job API listens (``JobSubmissionClient(url)``, ``ray job submit``)."""
        return f"http://{LOOPBACK}:{self._dashboard_port}"

    @property
    def head_node_id(self) -> str:
        """The Ray node id (hex) of the head."""
        return str(self._cluster.head_node.node_id)

    def slice_names(self) -> list[str]:
        return [f"{self.name_prefix}-{s.pod_type}-{i}" for s, n in self.layout for i in range(n)]

    def start(self) -> None:
        os.environ["RAY_AUTH_MODE"] = "disabled"  # token auth off: a throw-away cluster on this machine only
        # Ray Train's controller polls its workers every 2 s by default, and a run waits up to one poll to start
        # and to end; a loopback cluster answers in milliseconds, so poll faster (a user's own setting wins).
        os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
        # Bind every node, and this driver, to the loopback: Ray otherwise advertises the machine's outward
        # address, and a local test cluster has no business listening there. Ray reads this switch (named
        # for Windows/macOS, where it is the default) through ray_constants: the env var reaches the child
        # processes, the attribute this already-imported one.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray.cluster_utils import Cluster

        from tpuray.workloads._ray_compat import disable_outward_cluster

        disable_outward_cluster()

        # Short path: Ray's unix sockets live under the temp dir and have a ~100-byte limit.
        base = tempfile.gettempdir()
        if len(base) > 32 and os.path.isdir("/tmp"):
            base = "/tmp"
        self._tmp = tempfile.mkdtemp(prefix="tpuray-", dir=base)
        self._dashboard_port = _free_port()  # not 8265: other clusters on this machine may hold it
        # Ray also keeps its "current cluster" file under RAY_TMPDIR: keep that private too.
        os.environ["RAY_TMPDIR"] = self._tmp
        os.makedirs(os.path.join(self._tmp, "ray"))
        self._cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": self.head.num_cpus,
                # the head's Ray processes (the job drivers it runs among them) get this env, as a pod's container
                **({"env_vars": dict(self.head.env)} if self.head.env else {}),
                "node_ip_address": LOOPBACK,
                "temp_dir": os.path.join(self._tmp, "ray"),
                # The dashboard, as on a KubeRay head: Ray's state API lives there, and Ray Train's placement
                # group cleaner polls it (without it every run logs "Failed to query ... actor state").
                "include_dashboard": True,
                "dashboard_host": LOOPBACK,
                "dashboard_port": self._dashboard_port,
                # Ray starts workers at nice 15; emulated chips share the machine's cores with everything
                # else, and a deprioritised trainer measures the neighbours, not the code.
                "_system_config": {
                    "worker_niceness": 0,
                    "metrics_report_interval_ms": round(self.metrics_interval_s * 1000),
                },
            },
        )
        for s, n in self.layout:
            for i in range(n):
                name = f"{self.name_prefix}-{s.pod_type}-{i}"
                for w in range(s.hosts):
                    self._add_host(host_node_spec(s, name, w, os.environ.get("XLA_FLAGS", "")), s)
        self._cluster.wait_for_nodes()

    def _add_host(self, spec: HostNode, tpu_slice: TpuSlice) -> str:
        key = (spec.labels[RAY_SLICE_NAME_LABEL], int(spec.labels[RAY_WORKER_ID_LABEL]))
        plugin = self._plugins.get(key)
        if plugin is None:  # up before the node: Ray's reporter agent stops asking after one failed read
            plugin = EmulatedDevicePlugin(tpu_slice, *key, host=LOOPBACK)
            plugin.usage = process_usage(tpu_slice.chips_per_host, lambda: self._train_worker_pids(*key))
            self._plugins[key] = plugin
        # A replacement host keeps its metrics export port, as a replacement pod keeps its own: a scraper
        # configured once still finds the host's series.
        port = self._metrics_ports.setdefault(key, _free_port())
        node = self._cluster.add_node(
            node_ip_address=LOOPBACK,
            metrics_export_port=port,
            num_cpus=spec.num_cpus,
            resources=spec.resources,
            labels=spec.labels,
            env_vars={**spec.env, TPU_DEVICE_PLUGIN_ADDR_ENV: plugin.address},
            wait=False,
        )
        self._hosts[str(node.node_id)] = (node, spec)
        return str(node.node_id)

    def host_node_id(self, slice_name: str, worker_id: int) -> str:
        """The Ray node id (hex) of host ``worker_id`` of the slice named ``slice_name``."""
        for node_id, (_, spec) in self._hosts.items():
            if spec.labels[RAY_SLICE_NAME_LABEL] == slice_name and spec.labels[RAY_WORKER_ID_LABEL] == str(worker_id):
                return node_id
        raise KeyError(f"no host {worker_id} of slice {slice_name!r}; slices: {self.slice_names()}")

    def device_plugin_addresses(self) -> list[str]:
        """``host:port`` of every emulated host's device plugin metrics endpoint."""
        return [p.address for p in self._plugins.values()]

    def metrics_export_addresses(self) -> list[str]:
        """``host:port`` of every Ray node's metrics export port (Ray's and ``ray.util.metrics`` series)."""
        nodes = [self._cluster.head_node, *(node for node, _ in self._hosts.values())]
        return [f"{LOOPBACK}:{node.metrics_export_port}" for node in nodes]

    def _train_worker_pids(self, slice_name: str, worker_id: int) -> list[int]:
        """The Ray Train workers on a host, one per chip in start order (an emulated chip's "driver")."""
        try:
            node_id = self.host_node_id(slice_name, worker_id)
            pids = self.worker_pids(node_id)
        except (KeyError, IndexError):
            return []
        return [p for p in pids if b"RayTrainWorker" in _cmdline(p)]

    def worker_pids(self, node_id: str) -> list[int]:
        """The Ray worker processes (``ray::...``) the host's raylet started, from ``/proc`` (Linux)."""
        from tpuray.workloads._ray_compat import raylet_pid

        node, _ = self._hosts[node_id]
        raylet = raylet_pid(node)
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            pid = int(proc.name)
            stat = _stat(pid)  # [] once the process ended while we looked
            if len(stat) > 1 and int(stat[1]) == raylet and _cmdline(pid).startswith(b"ray::"):
                pids.append(pid)
        return sorted(pids)

    def replace_host(self, node_id: str, timeout_s: float = 60) -> str:
        """Take a host away (its raylet and workers are killed) and bring up a new one with the same slice name,
        worker id and resources, like GKE recreating a preempted TPU VM; returns the new node id."""
        (new,) = self.bring_back([self.take_host(node_id)], timeout_s)
        return new

    def take_host(self, node_id: str) -> HostNode:
        """Take a host away, its raylet and workers killed, like GKE taking a TPU VM; returns what
        :meth:`bring_back` needs to bring its replacement up later (an elastic run trains on without it)."""
        node, spec = self._hosts.pop(node_id)
        # SIGTERM, as the kubelet stops a pod: the raylet unregisters from Ray's GCS on the way out, so the GCS
        # drops the host at once instead of after its health checks fail (about 15 s of a dead node looking idle).
        self._cluster.remove_node(node, allow_graceful=True)
        return spec

    def bring_back(self, specs: Sequence[HostNode], timeout_s: float = 60) -> list[str]:
        """New hosts with taken hosts' slice names, worker ids and resources, all started at once (as GKE brings a
        slice's VMs back together); returns their node ids once every one is up."""
        new = [
            self._add_host(spec, next(s for s, _ in self.layout if s.pod_type == spec.labels[RAY_POD_TYPE_LABEL]))
            for spec in specs
        ]
        deadline = time.monotonic() + timeout_s
        from tpuray.workloads._ray_compat import live_node_ids

        while not set(new) <= set(live_node_ids(self._cluster)):
            if time.monotonic() > deadline:
                ids = ", ".join(spec.labels[RAY_WORKER_ID_LABEL] for spec in specs)
                raise TimeoutError(f"the replacements for hosts {ids} did not register")
            time.sleep(0.1)
        return new

    def shutdown(self) -> None:
        if self._cluster is not None:
            import ray

            if ray.is_initialized():  # Ray refuses to remove the node a connected driver uses
                ray.shutdown()
            self._cluster.shutdown()
            self._cluster = None
            self._hosts = {}
        for plugin in self._plugins.values():
            plugin.close()
        self._plugins = {}
        self._metrics_ports = {}
        if self._tmp:
            _remove_private_dir(self._tmp)
            if os.environ.get("RAY_TMPDIR") == self._tmp:
                del os.environ["RAY_TMPDIR"]
            self._tmp = None


# How long a stop waits for the cluster's last processes to go before it says what it left.
_STOP_GRACE_S = 15.0


def _remove_private_dir(path: str) -> None:
    """End every process of the cluster and remove its private dir; say on stderr if the dir outlives the wait.

    A node Ray gave up on while it started is no node of the Cluster's to stop, and a worker whose raylet was
    killed exits on its own time, writing its logs on the way out: on a busy machine either can re-create files
    in a dir just removed. Both are known by the dir: named on the command line, or holding a file in it open."""
    deadline = time.monotonic() + _STOP_GRACE_S
    while True:
        pids = _processes_using(path)
        for pid in pids:
            with contextlib.suppress(OSError):  # it ended while we looked
                os.kill(pid, signal.SIGKILL)
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.05)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        if time.monotonic() > deadline:
            print(
                f"tpuray: the emulated cluster's dir {path} is still there after {_STOP_GRACE_S:.0f} s",
                file=sys.stderr,
            )
            return
        time.sleep(0.2)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _processes_using(path: str) -> list[int]:
    """The processes (other than this one) whose command line names ``path`` or that hold a file under it open,
    from ``/proc`` (Linux; another user's open files are not readable, and such a process is not ours)."""
    me, want, inside = os.getpid(), os.fsencode(path), path.rstrip("/") + "/"
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid != me and (want in _cmdline(pid) or any(t.startswith(inside) for t in _open_files(proc))):
            found.append(pid)
    return sorted(found)


def _open_files(proc: Path) -> list[str]:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return []
    targets = []
    for fd in fds:
        with contextlib.suppress(OSError):  # closed while we looked
            targets.append(os.readlink(fd))
    return targets


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended: its parent only has not read its status yet)."""
    state = _stat(pid)[:1]
    return bool(state) and state != ["Z"]


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, then parent pid, ...; ``man 5 proc``), or
    ``[]`` once the process has ended. The name is in parentheses and may itself hold spaces and parentheses."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@contextlib.contextmanager
def emulate(
    tpu_slice: TpuSlice | str | Sequence[tuple[TpuSlice, int]],
    slices: int = 1,
    metrics_interval_s: float = 1.0,
    head: HeadNode | None = None,
) -> Iterator[EmulatedCluster]:
    """Run the body against a local Ray cluster emulating ``slices`` slices of ``tpu_slice``
    (``metrics_interval_s`` and ``head``: see :class:`EmulatedCluster`).

    ``RAY_ADDRESS`` points at the cluster inside the block, so ``ray.init()`` and ``TorchTrainer.fit()`` there
    (or in a subprocess) use it; everything is torn down on the way out, whatever the body does.
    """
    shape = TpuSlice.parse(tpu_slice) if isinstance(tpu_slice, str) else tpu_slice
    before = os.environ.get("RAY_ADDRESS")
    with EmulatedCluster(shape, slices, metrics_interval_s=metrics_interval_s, head=head) as cluster:
        os.environ["RAY_ADDRESS"] = cluster.address
        try:
            yield cluster
        finally:
            if before is None:
                os.environ.pop("RAY_ADDRESS", None)
            else:
                os.environ["RAY_ADDRESS"] = before
