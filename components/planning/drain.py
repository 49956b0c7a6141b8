"""How a TPU worker pod leaves: a ``preStop`` hook that drains its Ray node, and a grace period per capacity type.

Pure Python. TPU VMs cannot live-migrate: preemption, host maintenance, node upgrades and Kueue preemption all
delete the worker pod. Kubernetes runs the ``preStop`` hook first and sends SIGTERM only after it returns, all
within ``terminationGracePeriodSeconds`` (https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/).
So the hook tells Ray's GCS that the node is going away (``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION
--deadline-remaining-seconds N``; Ray 2.60 ``ray/scripts/scripts.py``) and then keeps the raylet alive for those
N seconds, while the training side checkpoints at its next step boundary.

``ray drain-node`` defaults ``--node-id`` to ``ray.get_runtime_context().get_node_id()``, which fails in a fresh
CLI process (Ray is not initialised there), so the hook looks the node up through a short-lived driver first.

Each pool's :class:`DrainWindow` (what takes its pods away, the spot node's graceful shutdown, the grace period and
deadline, the ``maxRunDuration`` margin) and a floor of the training job's checkpoint write against it
(:func:`pool_drains`) are what ``tpuray plan`` prints and warns on.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tpuray.components.config import StackConfig
from tpuray.components.config.capacity import (
    MAX_RUN_MARGIN_SECONDS,
    SPOT_DEFAULT_SHUTDOWN,
    CapacityType,
    NodeShutdownSpec,
)

__all__ = [
    "CHECKPOINT_BYTES_PER_PARAMETER",
    "CHECKPOINT_WRITE_BYTES_PER_S",
    "DRAIN_REASON",
    "NODE_ID_SCRIPT",
    "CheckpointEstimate",
    "DrainPlan",
    "DrainWindow",
    "PoolDrain",
    "checkpoint_estimate",
    "drain_node_args",
    "drain_plan",
    "drain_window",
    "pool_drains",
    "pre_stop_command",
    "pre_stop_hook",
]

DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"
"""The enum name ``ray drain-node --reason`` accepts (``autoscaler_pb2.DrainNodeReason``)."""


@dataclass(frozen=True)
class DrainPlan:
    grace_seconds: int
    """The pod's ``terminationGracePeriodSeconds``."""
    deadline_seconds: int
    """What the hook tells Ray is left (and how long it keeps the node up): the grace period less the hook's own
    start-up and the container's shutdown after SIGTERM."""


def drain_plan(capacity: CapacityType) -> DrainPlan:
    """The grace period and drain deadline of a pool's capacity (its ``drain_seconds``: the ``drain_*_seconds``
    traits, where their sources are cited)."""
    grace, deadline = capacity.drain_seconds()
    return DrainPlan(grace_seconds=grace, deadline_seconds=deadline)


@dataclass(frozen=True)
class DrainWindow:
    """How long a pool's workers have to checkpoint once they are told to go, and what tells them."""

    disruption: str
    """What takes the pods away (spot: the preemption notice; other capacity: maintenance, upgrades, Kueue)."""
    drain: DrainPlan
    node_shutdown: NodeShutdownSpec | None
    """Spot VMs: the kubelet's graceful node shutdown the preemption notice starts (GKE's default, or the longer one
    the node pool asks for: :attr:`declared`); None for other capacity (the pod's grace period rules)."""
    declared: bool
    """The node pool declares :attr:`node_shutdown` (``nodeConfig.kubeletConfig``); False: GKE's default, or none."""
    max_run_margin_seconds: int | None
    """Capacity with a ``maxRunDuration``: how long before its end the workers checkpoint (None: no run time)."""

    @property
    def seconds(self) -> int:
        """The window a checkpoint must fit: the drain deadline, what the hook tells Ray is left and keeps the node
        up for (the pod's grace period less the hook's start-up and the container's shutdown)."""
        return self.drain.deadline_seconds


def drain_window(capacity: CapacityType) -> DrainWindow:
    """The drain window of a pool's capacity."""
    return DrainWindow(
        disruption=capacity.disruption,
        drain=drain_plan(capacity),
        node_shutdown=capacity.node_shutdown or (SPOT_DEFAULT_SHUTDOWN if capacity.spot else None),
        declared=capacity.node_shutdown is not None,
        max_run_margin_seconds=MAX_RUN_MARGIN_SECONDS if capacity.max_run_seconds is not None else None,
    )


CHECKPOINT_BYTES_PER_PARAMETER = 12
"""What the built-in GPT trainer's checkpoint holds per parameter: the fp32 weight and AdamW's two fp32 moments (its
``state.pt`` holds the model's and the optimizer's state, ``tpuray.workloads.gpt.loop``): the training state of
``config.workload.TRAIN_BYTES_PER_PARAMETER`` less the gradient, which is not saved."""

CHECKPOINT_WRITE_BYTES_PER_S = 462_000_000
"""One writer's sequential write to a Cloud Storage FUSE mount: gcsfuse's published benchmark (GoogleCloudPlatform/
gcsfuse ``docs/benchmarks.md``, gcsfuse v3.4.3, "Sequential Writes": 1 GiB files, 10 jobs, 4,624.59 MB/s in all, on
a C4-standard-192 VM with 200 Gbps egress) over its 10 writers. The GPT trainer's rank 0 writes the whole state
alone. A TPU host's network and the mount sidecar's CPU are not that VM's: the estimate is a floor of the write,
without the drain's own path (the hook, the poll, the step in flight: ``bench/drain_to_checkpoint.py`` measures
those), so where even it does not fit the window, no checkpoint will."""


@dataclass(frozen=True)
class CheckpointEstimate:
    """A floor of the time a checkpoint takes to write (:data:`CHECKPOINT_WRITE_BYTES_PER_S`)."""

    parameters: int
    bytes: int

    @property
    def seconds(self) -> float:
        return self.bytes / CHECKPOINT_WRITE_BYTES_PER_S


def checkpoint_estimate(parameters: int) -> CheckpointEstimate:
    """The write of the GPT trainer's checkpoint of a model of ``parameters`` parameters."""
    if parameters < 1:
        raise ValueError(f"parameters: a model has at least one, got {parameters}")
    return CheckpointEstimate(parameters, parameters * CHECKPOINT_BYTES_PER_PARAMETER)


NODE_ID_SCRIPT = (
    'import ray; ray.init(address="auto", logging_level="ERROR", log_to_driver=False); '
    "print(ray.get_runtime_context().get_node_id())"
)
"""The hook's first step, run with ``python -c``: the Ray node id of the pod it runs in."""


def drain_node_args(plan: DrainPlan, node_id: str) -> list[str]:
    """``ray drain-node``'s arguments after ``ray``, as the hook passes them (``$node`` and ``$HOSTNAME`` are the
    shell's, in the hook)."""
    return [
        "drain-node",
        "--node-id",
        node_id,
        "--reason",
        DRAIN_REASON,
        "--reason-message",
        "pod $HOSTNAME is terminating",
        "--deadline-remaining-seconds",
        str(plan.deadline_seconds),
    ]


def pre_stop_command(plan: DrainPlan) -> str:
    """The hook's shell script. A failure to drain never blocks the pod's shutdown (it just ends the hook)."""
    drain = ["ray", *drain_node_args(plan, "$node")]
    drain_cmd = " ".join(f'"{a}"' if "$" in a else shlex.quote(a) for a in drain)
    return (
        f"node=$(python -c {shlex.quote(NODE_ID_SCRIPT)}) || exit 0; {drain_cmd} || exit 0; "
        f"sleep {plan.deadline_seconds}"
    )


@dataclass(frozen=True)
class PoolDrain:
    """One slice pool's drain window and, for the pool the training job runs on, its checkpoint's estimate."""

    pool: str
    capacity: str
    window: DrainWindow
    checkpoint: CheckpointEstimate | None
    """The training job's checkpoint, on its own pool (``workload.slicePool``); None on the others."""

    @property
    def fits(self) -> bool:
        """Whether the checkpoint's estimate fits the window (True where there is no estimate)."""
        return self.checkpoint is None or self.checkpoint.seconds <= self.window.seconds


def pool_drains(cfg: StackConfig) -> list[PoolDrain]:
    """Every slice pool's drain window, in config order, with the training job's checkpoint on its pool."""
    trains_on = cfg.workload_pool().name
    estimate = checkpoint_estimate(cfg.workload.model_parameters)
    return [
        PoolDrain(p.name, p.capacity.type, drain_window(p.capacity), estimate if p.name == trains_on else None)
        for p in cfg.slice_pools
    ]


def pre_stop_hook(plan: DrainPlan) -> dict[str, object]:
    """The container's ``lifecycle`` field."""
    return {"preStop": {"exec": {"command": ["/bin/sh", "-c", pre_stop_command(plan)]}}}
