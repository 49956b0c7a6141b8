"""How a TPU worker pod leaves: a ``preStop`` hook that drains its Ray node, and a grace period per capacity type.

Pure Python. TPU VMs cannot live-migrate: preemption, host maintenance, node upgrades and Kueue preemption all
delete the worker pod. Kubernetes runs the ``preStop`` hook first and sends SIGTERM only after it returns, all
within ``terminationGracePeriodSeconds`` (https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/).
So the hook tells Ray's GCS that the node is going away (``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION
--deadline-remaining-seconds N``; Ray 2.60 ``ray/scripts/scripts.py``) and then keeps the raylet alive for those
N seconds, while the training side checkpoints at its next step boundary.

``ray drain-node`` defaults ``--node-id`` to ``ray.get_runtime_context().get_node_id()``, which fails in a fresh
CLI process (Ray is not initialised there), so the hook looks the node up through a short-lived driver first.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tpuray.components.config.capacity import CapacityType

__all__ = ["DRAIN_REASON", "DrainPlan", "drain_plan", "pre_stop_command", "pre_stop_hook"]

DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"
"""The enum name ``ray drain-node --reason`` accepts (``autoscaler_pb2.DrainNodeReason``)."""


@dataclass(frozen=True)
class DrainPlan:
    grace_seconds: int
    """The pod's ``terminationGracePeriodSeconds``."""
    deadline_seconds: int
    """What the hook tells Ray is left (and how long it keeps the node up): the grace period less the hook's own
    start-up and the container's shutdown after SIGTERM."""


def drain_plan(capacity: CapacityType | type[CapacityType]) -> DrainPlan:
    """The grace period and drain deadline of a capacity type (its ``drain_*_seconds`` traits, where their sources
    are cited)."""
    return DrainPlan(grace_seconds=capacity.drain_grace_seconds, deadline_seconds=capacity.drain_deadline_seconds)


_NODE_ID = (
    'import ray; ray.init(address="auto", logging_level="ERROR", log_to_driver=False); '
    "print(ray.get_runtime_context().get_node_id())"
)


def pre_stop_command(plan: DrainPlan) -> str:
    """The hook's shell script. A failure to drain never blocks the pod's shutdown (it just ends the hook)."""
    drain = [
        "ray",
        "drain-node",
        "--node-id",
        "$node",
        "--reason",
        DRAIN_REASON,
        "--reason-message",
        "pod $HOSTNAME is terminating",
        "--deadline-remaining-seconds",
        str(plan.deadline_seconds),
    ]
    drain_cmd = " ".join(f'"{a}"' if "$" in a else shlex.quote(a) for a in drain)
    return f"node=$(python -c {shlex.quote(_NODE_ID)}) || exit 0; {drain_cmd} || exit 0; sleep {plan.deadline_seconds}"


def pre_stop_hook(plan: DrainPlan) -> dict[str, object]:
    """The container's ``lifecycle`` field."""
    return {"preStop": {"exec": {"command": ["/bin/sh", "-c", pre_stop_command(plan)]}}}
