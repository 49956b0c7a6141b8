"""The per-chip worker group on Ray: slice placement groups, one actor per chip, PJRT env, process group.

Ray side effects only; which worker is which rank is decided by :func:`tpuray.workloads.placement.plan_workers`.
Ray Train's TPU path drives torch_tpu and refuses ``TPU`` in ``resources_per_worker`` otherwise, so for
PyTorch/XLA the group is plain actors in ``ray.util.tpu`` slice placement groups (one bundle per chip).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ray.util.tpu import SlicePlacementGroup, get_num_ready_tpu_slices, slice_placement_group

from tpuray.components.topology import TpuSlice
from tpuray.workloads.job import JobSpec
from tpuray.workloads.loop import ChunkResult, SetupResult
from tpuray.workloads.pjrt import RAY_SUBHOST_VARS, hostnames_from_env
from tpuray.workloads.placement import (
    LABEL_POD_TYPE,
    LABEL_SLICE_NAME,
    LABEL_WORKER_ID,
    PlacementError,
    Seat,
    WorkerPlan,
    cluster_slices,
    describe_slices,
    plan_workers,
    slices_for_job,
)

__all__ = ["ChipWorker", "WorkerGroup", "available_slices", "nodes"]


def _node_ip() -> str:
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def nodes() -> list[dict[str, Any]]:
    return list(ray.nodes())  # type: ignore[no-untyped-call]


@ray.remote(max_restarts=0)
class ChipWorker:
    """One process per TPU chip. Nothing imports torch_xla before :meth:`configure` has set the PJRT env."""

    def __init__(self) -> None:
        self.plan: WorkerPlan | None = None
        self.trainer: Any = None

    def seat(self, actor_index: int, slice_index: int) -> Seat:
        ctx = ray.get_runtime_context()
        labels = {str(k): str(v) for k, v in ctx.get_node_labels().items()}
        chips = ctx.get_accelerator_ids().get("TPU", [])
        if len(chips) != 1:
            raise PlacementError(f"a per-chip worker must hold exactly one TPU chip, got {chips}")
        return Seat(
            actor_index=actor_index,
            slice_index=slice_index,
            slice_name=str(labels.get(LABEL_SLICE_NAME) or ctx.get_node_id()),
            worker_id=int(labels.get(LABEL_WORKER_ID, "0")),
            chip=int(chips[0]),
            address=_node_ip(),
            hostnames=tuple(hostnames_from_env(os.environ)),
        )

    def free_port(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind(("", 0))
            return _node_ip(), int(s.getsockname()[1])

    def configure(self, plan: WorkerPlan) -> dict[str, str]:
        self.plan = plan
        for key in RAY_SUBHOST_VARS:
            os.environ.pop(key, None)  # Ray's 1-chip defaults would describe a standalone chip
        os.environ.update(plan.env)
        return {k: os.environ[k] for k in plan.env}

    def setup(self, spec: JobSpec, master: tuple[str, int], attempt: int) -> SetupResult:
        from tpuray.workloads.loop import ChipTrainer

        assert self.plan is not None, "configure() first"
        self.trainer = ChipTrainer(spec, self.plan.rank, self.plan.world_size, master[0], master[1], attempt)
        result: SetupResult = self.trainer.setup()
        return result

    def run(self, until: int) -> ChunkResult:
        result: ChunkResult = self.trainer.run(until)
        return result

    def digest(self) -> str:
        return str(self.trainer.digest())

    def pid(self) -> int:
        return os.getpid()


def available_slices(tpu_slice: TpuSlice) -> int:
    """Intact, idle slices of this shape in the cluster (Ray's own count)."""
    return int(get_num_ready_tpu_slices(tpu_slice.topology, tpu_slice.ray_accelerator_type))


class WorkerGroup:
    """``num_slices`` whole slices of ``tpu_slice``, one :class:`ChipWorker` per chip, ordered by rank."""

    def __init__(
        self,
        tpu_slice: TpuSlice,
        num_slices: int,
        reservation: SlicePlacementGroup,
        actors: list[Any],
        plans: list[WorkerPlan],
    ) -> None:
        self.tpu_slice = tpu_slice
        self.num_slices = num_slices
        self.reservation = reservation
        self.plans = plans
        self.actors = [actors[p.actor_index] for p in plans]  # by rank

    @classmethod
    def create(
        cls,
        tpu_slice: TpuSlice,
        *,
        chips: int | None = None,
        num_slices: int | None = None,
        cpus_per_worker: float = 1.0,
        timeout_s: float = 120.0,
    ) -> WorkerGroup:
        have = available_slices(tpu_slice)
        if have == 0:
            raise PlacementError(
                f"the cluster has no idle {tpu_slice} slice ({tpu_slice.pod_type}); it has "
                f"{describe_slices(cluster_slices(nodes()))}"
            )
        n = slices_for_job(tpu_slice, chips, num_slices, have)
        bundles = n * tpu_slice.chips
        reservation = slice_placement_group(
            tpu_slice.topology,
            tpu_slice.spec.pod_type_prefix,  # Ray's accelerator version, e.g. v5litepod, v7x
            resources_per_bundle={"TPU": 1, "CPU": cpus_per_worker},
            num_slices=n,
            chips_per_vm=tpu_slice.chips_per_host,
            pg_per_slice=True,
            # A single-host slice has no slice-name constraint in Ray: keep its bundles on one node.
            strategy="PACK" if tpu_slice.multi_host else "STRICT_PACK",
            bundle_label_selector=[{LABEL_POD_TYPE: tpu_slice.pod_type}] * bundles,
            head_reservation_timeout_s=timeout_s,
        )
        try:
            pgs = reservation.slice_placement_groups
            ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
            if len(ready) != len(pgs):
                raise PlacementError(
                    f"could not reserve {n} {tpu_slice} slice(s) within {timeout_s:.0f} s; the cluster has "
                    f"{describe_slices(cluster_slices(nodes()))}"
                )
            reservation.release_head_pgs()
            actors: list[Any] = []
            refs: list[Any] = []
            for i, pg in enumerate(pgs):
                for b in range(tpu_slice.chips):
                    actor = ChipWorker.options(  # type: ignore[attr-defined]
                        num_cpus=cpus_per_worker,
                        resources={"TPU": 1},
                        scheduling_strategy=PlacementGroupSchedulingStrategy(
                            placement_group=pg, placement_group_bundle_index=b
                        ),
                    ).remote()
                    refs.append(actor.seat.remote(len(actors), i))
                    actors.append(actor)
            seats = ray.get(refs, timeout=timeout_s)
            plans = plan_workers(tpu_slice, n, seats)
            ray.get([actors[p.actor_index].configure.remote(p) for p in plans], timeout=timeout_s)
        except BaseException:
            reservation.shutdown()
            raise
        return cls(tpu_slice, n, reservation, actors, plans)

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def master(self) -> tuple[str, int]:
        """Address and a free port on rank 0's node, for the gloo rendezvous."""
        addr, port = ray.get(self.actors[0].free_port.remote())
        return str(addr), int(port)

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> list[Any]:
        """Call ``method`` on every worker; fail fast if any worker fails (the others may be stuck in a
        collective waiting for it)."""
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        index = {r: i for i, r in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                raise TimeoutError(f"{method} did not finish on {len(pending)} worker(s) within {timeout_s} s")
            results[index[done[0]]] = ray.get(done[0])
        return results

    def placements(self) -> list[dict[str, Any]]:
        return [asdict(p) for p in self.plans]

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []
        self.reservation.shutdown()  # type: ignore[no-untyped-call]
