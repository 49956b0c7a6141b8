"""Where a run's per-chip workers sat, checked against the slice: written once for the train tests that record it,
whichever API their train function uses (tpuray's ``chip()`` or Ray Train's portable one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpuray.components.catalog.names import RAY_POD_TYPE_LABEL, RAY_WORKER_ID_LABEL
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.worker_env import chip_env, hostnames_from_env

ENV_PREFIXES = ("TPU_", "CLOUD_TPU_TASK_ID", "MEGASCALE_")
"""The worker env a seat records: every variable a TPU runtime reads (what the backend sets, and anything Ray or
the host left that it should not have)."""


@dataclass(frozen=True)
class Seat:
    """One worker of a run: its XLA rank, the chip Ray gave it, its node's labels and its TPU env."""

    xla_rank: int
    ray_chip: int
    labels: Mapping[str, str]
    env: Mapping[str, str]


def check_seats(s: TpuSlice, seats: Sequence[Seat]) -> None:
    """One worker per chip of one ``s`` slice, each with exactly the PJRT env of its seat."""
    assert sorted(x.xla_rank for x in seats) == list(range(s.chips))
    # one worker per chip: every (host, chip) of the slice exactly once, as Ray itself assigned the chips
    assert sorted((int(x.labels[RAY_WORKER_ID_LABEL]), x.ray_chip) for x in seats) == [
        (w, c) for w in range(s.hosts) for c in range(s.chips_per_host)
    ]
    for x in seats:
        # on the slice shape asked for, although the cluster's other slices have free chips too
        assert x.labels[RAY_POD_TYPE_LABEL] == s.pod_type
        # the worker's env is chip_env for its seat, and nothing else TPU-shaped (no Ray 1-chip bounds)
        worker_id = int(x.labels[RAY_WORKER_ID_LABEL])
        want = chip_env(s, worker_id, x.ray_chip, hostnames_from_env(x.env))
        tpu_env = {k: v for k, v in x.env.items() if k in want or k.startswith(("TPU_HOST", "TPU_CHIPS_PER_H"))}
        assert tpu_env == want, (worker_id, x.ray_chip)
        assert int(x.env["CLOUD_TPU_TASK_ID"]) == x.xla_rank  # the XLA rank is the task id
    # every host lists the same addresses, one per chip of the slice, so the chips find each other
    addresses = {x.env["TPU_PROCESS_ADDRESSES"] for x in seats}
    assert len(addresses) == 1 and len(addresses.pop().split(",")) == s.chips
