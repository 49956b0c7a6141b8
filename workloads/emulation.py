"""A local Ray cluster that looks like TPU slices to Ray: one Ray node per emulated TPU host.

Each emulated host carries what Ray itself advertises on a real TPU VM (``_private/accelerators/tpu.py``):
resources ``TPU: <chips>``, ``accelerator_type:TPU-<GEN>``, ``<slice name>: 1`` and ``TPU-<pod type>-head: 1``
on worker 0; labels ``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``, ``ray.io/tpu-topology``,
``ray.io/tpu-pod-type``, ``ray.io/accelerator-type``; and the pod env the GKE TPU webhook injects
(``TPU_NAME``, ``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``), which Ray's slice reservation reads.
Workers run XLA on CPU. The cluster uses a private temp dir and no token auth (local only).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from tpuray.components.topology import TpuSlice
from tpuray.workloads.placement import (
    LABEL_ACCELERATOR_TYPE,
    LABEL_POD_TYPE,
    LABEL_SLICE_NAME,
    LABEL_TOPOLOGY,
    LABEL_WORKER_ID,
)

__all__ = ["LOCAL_WORKER_ENV", "LOOPBACK", "EmulatedCluster", "host_node_spec"]

LOCAL_WORKER_ENV = {
    "PJRT_DEVICE": "CPU",
    # One XLA CPU thread per worker: the emulated chips share the machine's few cores.
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
}


@dataclass(frozen=True)
class HostNode:
    """The Ray node arguments of one emulated TPU host."""

    resources: dict[str, float]
    labels: dict[str, str]
    env: dict[str, str]
    num_cpus: int


def host_node_spec(tpu_slice: TpuSlice, slice_name: str, worker_id: int) -> HostNode:
    """What Ray would advertise for host ``worker_id`` of a slice named ``slice_name`` (pure)."""
    resources: dict[str, float] = {
        "TPU": float(tpu_slice.chips_per_host),
        f"accelerator_type:{tpu_slice.ray_accelerator_type}": 1.0,
        slice_name: 1.0,
    }
    if worker_id == 0:
        resources[f"TPU-{tpu_slice.pod_type}-head"] = 1.0
    labels = {
        LABEL_SLICE_NAME: slice_name,
        LABEL_WORKER_ID: str(worker_id),
        LABEL_TOPOLOGY: tpu_slice.topology,
        LABEL_POD_TYPE: tpu_slice.pod_type,
        LABEL_ACCELERATOR_TYPE: tpu_slice.ray_accelerator_type,
    }
    env = {"TPU_NAME": slice_name, "TPU_WORKER_ID": str(worker_id), **LOCAL_WORKER_ENV}
    if tpu_slice.multi_host:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(f"{slice_name}-{w}.local" for w in range(tpu_slice.hosts))
    # One logical CPU per chip so each per-chip worker (1 CPU + 1 TPU) fits, whatever the real core count.
    return HostNode(resources=resources, labels=labels, env=env, num_cpus=tpu_slice.chips_per_host)


LOOPBACK = "127.0.0.1"
"""Every emulated node binds here: a local test cluster never listens on, or sends to, another address."""


class EmulatedCluster:
    """``slices`` emulated slices of ``tpu_slice`` plus a CPU-only head node, like a KubeRay TPU cluster.

    Use as a context manager; ``address`` is what ``ray.init(address=...)`` takes.
    """

    def __init__(self, tpu_slice: TpuSlice, slices: int = 1, name_prefix: str = "emulated") -> None:
        self.tpu_slice = tpu_slice
        self.slices = slices
        self.name_prefix = name_prefix
        self._cluster: Any = None
        self._tmp: str | None = None

    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def address(self) -> str:
        return str(self._cluster.address)

    def start(self) -> None:
        os.environ["RAY_AUTH_MODE"] = "disabled"  # token auth off: a throw-away cluster on this machine only
        # Bind every node, and this driver, to the loopback: Ray otherwise advertises the machine's outward
        # address, and a local test cluster has no business listening there. Ray reads this switch (named
        # for Windows/macOS, where it is the default) through ray_constants: the env var reaches the child
        # processes, the attribute this already-imported one.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        import ray._private.ray_constants as ray_constants
        from ray.cluster_utils import Cluster

        ray_constants.ENABLE_RAY_CLUSTER = False

        # Short path: Ray's unix sockets live under the temp dir and have a ~100-byte limit.
        self._tmp = tempfile.mkdtemp(prefix="tpuray-", dir="/tmp" if os.path.isdir("/tmp") else None)
        # Ray also keeps its "current cluster" file under RAY_TMPDIR: keep that private too.
        os.environ["RAY_TMPDIR"] = self._tmp
        os.makedirs(os.path.join(self._tmp, "ray"))
        self._cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "node_ip_address": LOOPBACK,
                "temp_dir": os.path.join(self._tmp, "ray"),
                "include_dashboard": False,
                # Ray starts workers at nice 15; emulated chips share the machine's cores with everything
                # else, and a deprioritised trainer measures the neighbours, not the code.
                "_system_config": {"worker_niceness": 0},
            },
        )
        for i in range(self.slices):
            name = f"{self.name_prefix}-{self.tpu_slice.pod_type}-{i}"
            for w in range(self.tpu_slice.hosts):
                spec = host_node_spec(self.tpu_slice, name, w)
                self._cluster.add_node(
                    node_ip_address=LOOPBACK,
                    num_cpus=spec.num_cpus,
                    resources=spec.resources,
                    labels=spec.labels,
                    env_vars=spec.env,
                    wait=False,
                )
        self._cluster.wait_for_nodes()

    def shutdown(self) -> None:
        if self._cluster is not None:
            import ray

            if ray.is_initialized():  # Ray refuses to remove the node a connected driver uses
                ray.shutdown()
            self._cluster.shutdown()
            self._cluster = None
        if self._tmp:
            if os.environ.get("RAY_TMPDIR") == self._tmp:
                del os.environ["RAY_TMPDIR"]
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
