"""A Ray Serve deployment whose every replica owns one whole TPU slice.

The replica reserves its slice itself, in its constructor, through Ray's own slice reservation
(``ray.util.tpu.slice_placement_group``, Ray 2.60; the bundles: :func:`tpuray.workloads.serving.plan.slice_request`),
starts one :class:`~tpuray.workloads.serving.worker.HostWorker` per host on it (one process driving all of its
host's chips with PyTorch/XLA SPMD), and checks from the workers themselves that they hold every chip of one slice
(:func:`~tpuray.workloads.serving.plan.plan_hosts`). Each request's rows are split over the hosts (one host on a
single-host slice), each host's share sharded over its chips, and the answers joined in host order.

A ``user_config`` change reloads the model on the same workers: the deployment has a fixed code version
(:func:`slice_app`), and with the same code version Serve calls the running replicas' ``reconfigure`` instead of
replacing them (``ray/serve/_private/version.py``, Ray 2.60: ``requires_actor_restart`` compares the code version,
actor and placement group options, not the ``user_config``, which ``requires_actor_reconfigure`` compares).

Why not Serve's own ``placement_group_bundles``: its ``placement_group_bundle_label_selector`` is one list for the
whole deployment (``ray/serve/api.py``), and a multi-host slice is pinned by its own ``ray.io/tpu-slice-name``,
which differs from replica to replica and is known only once Ray has reserved the slice's head
(``ray/util/tpu.py``, ``SlicePlacementGroup._reserve_slice``). So those bundles could land on the hosts of two slices.

The slice is released with the replica: its placement group fate-shares with its creator (Ray's placement group
``lifetime=None``: "deleted once its creator is dead", ``ray/util/tpu.py``), and a graceful stop removes it at once
(``__del__``, which Serve calls on shutdown: ``ray/serve/_private/replica.py``). When any worker dies (its host
lost), or any of its hosts starts draining (a TPU pod's preStop hook drains its Ray node before the VM goes), the
replica fails its health check and ends itself: Serve's router sends the requests that find it dead to
another replica (``ray/serve/_private/router.py``: an ``ActorDiedError`` from the chosen replica is retried), and its
controller starts a new replica at once (a replica that crashed is marked unhealthy immediately,
``ray/serve/_private/deployment_state.py``), which reserves a slice of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Mapping
from typing import Any

import ray

from tpuray.workloads import _ray_compat
from tpuray.workloads.serving.plan import check_rows, parse_slice, plan_hosts, slice_request, split_rows
from tpuray.workloads.serving.worker import WATCH_GROUP, HostPlace, HostWorker, ModelFactory

__all__ = ["SliceLostError", "SliceReplica", "slice_app"]

logger = logging.getLogger("ray.serve")

DEFAULT_READY_TIMEOUT_S = 300.0
"""How long a new replica waits for an idle slice and its workers (seconds): a slice the cluster lacks fails the
replica after this, and Serve starts another."""
_PING_TIMEOUT_S = 10.0
DRAIN_POLL_S = 1.0
"""How often a replica asks Ray's GCS whether one of its hosts is draining (one small call a second)."""


class SliceLostError(RuntimeError):
    """A worker of the replica's slice is gone (its host lost): this replica ends, and Serve replaces it."""


class SliceReplica:
    """The deployment class (:func:`slice_app` makes it a Serve deployment): one whole slice per replica."""

    def __init__(self, model: ModelFactory, topology: str, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from ray.util.tpu import slice_placement_group

        self._slice = parse_slice(topology)
        self._model = model
        self._config: dict[str, Any] = {}
        self._broken: str | None = None
        self._stopping = threading.Event()
        self._workers: list[Any] = []
        self._reservation: Any = None
        try:
            request = slice_request(self._slice)
            self._reservation = slice_placement_group(**request.kwargs())
            pg = self._reservation.slice_placement_group
            ready, _ = ray.wait([pg.ready()], timeout=ready_timeout_s)
            if not ready:
                raise TimeoutError(
                    f"no idle {self._slice} slice ({self._slice.pod_type}) was free within ready_timeout_s="
                    f"{ready_timeout_s:g} s: each replica takes one whole slice"
                )
            # Ray's advice once the worker group is scheduled: the head reservation only closed the race window
            # (ray/util/tpu.py, SlicePlacementGroup.release_head_pgs)
            self._reservation.release_head_pgs()
            # concurrency groups are a class option only (Ray refuses them in .options())
            actor: Any = ray.remote(concurrency_groups={WATCH_GROUP: 1})(HostWorker)  # type: ignore[call-overload]
            workers: list[Any] = [
                actor.options(
                    num_cpus=request.bundle["CPU"],
                    resources={"TPU": request.bundle["TPU"]},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                ).remote(i)
                for i in range(self._slice.hosts)
            ]
            self._workers = workers
            seats = ray.get([w.seats.remote() for w in workers], timeout=ready_timeout_s)
            order = plan_hosts(self._slice, [s for host in seats for s in host])
            ranked = [workers[i] for i in order]  # host order: host i takes chunk i
            places: list[HostPlace] = ray.get([w.start.remote() for w in ranked], timeout=ready_timeout_s)
            short = [p for p in places if p.devices != len(p.chips)]
            if short:
                raise RuntimeError(f"a host worker's SPMD program does not see one device per chip it holds: {short}")
        except BaseException:
            self._release()
            raise
        self._ranked = ranked
        self.places = places
        self._watch = [w.watch.remote() for w in workers]
        threading.Thread(target=self._watcher, name="slice-watcher", daemon=True).start()

    @property
    def slice_name(self) -> str:
        return self.places[0].slice_name

    async def reconfigure(self, config: Any) -> None:
        """Serve's ``user_config`` (always set by :func:`slice_app`): every host worker builds the model from it.
        Serve calls this after the constructor and again on a ``user_config`` change, on the same replica: the
        model is reloaded on the workers that already hold the slice (no new reservation, no new process)."""
        if not isinstance(config, Mapping):
            raise ValueError(f"user_config: a mapping (e.g. {{'seed': 0}}), got {type(config).__name__}")
        await asyncio.gather(*(w.load.remote(self._model, dict(config)) for w in self._ranked))
        self._config = dict(config)

    async def __call__(self, request: Any) -> dict[str, Any]:
        """``{"inputs": rows}`` over HTTP, or the rows themselves through a handle; returns ``outputs`` (one row
        per input row), ``hosts`` (where each host's share was computed, as its worker reports it: node, slice,
        pid, chips, devices and each device's bytes of the output), ``config`` and ``replica``."""
        if hasattr(request, "json"):  # an HTTP request (starlette)
            body = await request.json()
            if not isinstance(body, dict) or "inputs" not in body:
                raise ValueError('request body: a JSON object {"inputs": [[...], ...]}')
            request = body["inputs"]
        rows = check_rows(request)
        if self._broken is not None:
            raise SliceLostError(self._broken)
        chunks = split_rows(rows, len(self._ranked))
        try:
            answers = await asyncio.gather(*(w.infer.remote(c) for w, c in zip(self._ranked, chunks, strict=True) if c))
        except ray.exceptions.RayActorError as e:
            self._fail(f"a worker of slice {self.slice_name!r} died during a request: {e}")
            raise SliceLostError(self._broken) from None
        from ray import serve

        return {
            "outputs": [row for out, _ in answers for row in out],
            "hosts": [where for _, where in answers],
            "config": self._config,
            "replica": serve.get_replica_context().replica_id.unique_id,
        }

    async def check_health(self) -> None:
        """Serve's health check: fails when any worker of the slice is gone or does not answer."""
        if self._broken is not None:
            raise SliceLostError(self._broken)
        try:
            await asyncio.wait_for(asyncio.gather(*(w.ping.remote() for w in self._ranked)), _PING_TIMEOUT_S)
        except (ray.exceptions.RayActorError, TimeoutError) as e:
            self._fail(f"a worker of slice {self.slice_name!r} did not answer its health check: {e!r}")
            raise SliceLostError(self._broken) from None

    def _watcher(self) -> None:
        # A watch call ends only on stop() or the worker's death: the first tells of a lost host within Ray's own
        # notice of the actor's death, sooner than Serve's next health check. Between waits it asks the GCS for
        # draining nodes (what a TPU pod's preStop hook does to its node: tpuray.workloads.signals.drain), so a
        # replica moves off a host before the host goes: Serve starts its replacement on a slice Ray still offers.
        hosts = {p.node_id for p in self.places}
        while not self._stopping.is_set():
            done, _ = ray.wait(self._watch, num_returns=1, timeout=DRAIN_POLL_S)
            if self._stopping.is_set():
                return
            if done:
                self._fail(f"a worker of slice {self.slice_name!r} died (its host is gone?)")
                return
            draining = sorted(hosts & set(_ray_compat.draining_nodes()))
            if draining:
                self._fail(f"host {draining[0]} of slice {self.slice_name!r} is draining: this replica moves off it")
                return

    def _fail(self, reason: str) -> None:
        if self._broken is not None:
            return
        self._broken = reason
        logger.error("tpuray serving: %s; this replica ends so that Serve replaces it", reason)
        # The replica ends itself instead of waiting out Serve's health checks (3 failures in a row): until then
        # Serve would keep sending it requests, while a dead replica's requests go to another replica.
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def _release(self) -> None:
        self._stopping.set()
        for w in self._workers:
            ray.kill(w, no_restart=True)
        self._workers = []
        if self._reservation is not None:
            self._reservation.shutdown()
            self._reservation = None

    def __del__(self) -> None:
        self._release()


def slice_app(
    model: ModelFactory,
    topology: str,
    *,
    num_replicas: int = 1,
    user_config: Mapping[str, Any] | None = None,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    code_version: str | None = None,
    **deployment_options: Any,
) -> Any:
    """A Serve application of ``num_replicas`` replicas, each owning one whole ``topology`` slice
    (``GEN:TOPOLOGY``, e.g. ``"v5e:2x2"``), one worker per host holding ``model(user_config)`` replicated on its
    host's chips.

    ``serve.run(slice_app(...))`` deploys it; ``serve.run`` again with only another ``user_config`` reloads the
    model in place (Serve calls each running replica's ``reconfigure``: same replicas, same workers), because the
    deployment's code version is fixed: ``code_version``, by default a digest of the model function's name, the
    topology and ``ready_timeout_s`` (so a change of any of these replaces the replicas). A change of the model
    function's code under the same name needs a new ``code_version``. ``deployment_options`` are Serve's
    (``name``, ``health_check_period_s``, ``ray_actor_options``, ...). The replica itself needs no CPU of its own
    (``num_cpus`` 0 unless ``ray_actor_options`` says otherwise): the slice's CPUs are its workers'. Serve's
    ``placement_group_*`` options are refused: the replica reserves its slice itself.
    """
    from ray import serve

    parse_slice(topology)
    if not callable(model):
        raise ValueError(f"model: a module-level function config -> torch.nn.Module, got {type(model).__name__}")
    if not isinstance(num_replicas, int) or isinstance(num_replicas, bool) or num_replicas < 1:
        raise ValueError(f"num_replicas: a whole number >= 1 (one slice each), got {num_replicas!r}")
    if user_config is not None and not isinstance(user_config, Mapping):
        raise ValueError(f"user_config: a mapping (e.g. {{'seed': 0}}), got {type(user_config).__name__}")
    if not ready_timeout_s > 0:
        raise ValueError(f"ready_timeout_s: a number of seconds > 0, got {ready_timeout_s!r}")
    if code_version is not None and (not isinstance(code_version, str) or not code_version):
        raise ValueError(f"code_version: a non-empty string, got {code_version!r}")
    taken = sorted(k for k in deployment_options if k.startswith("placement_group") or k == "user_config")
    if taken:
        raise ValueError(
            f"{', '.join(taken)}: not options of slice_app (each replica reserves its own slice through "
            "ray.util.tpu; pass user_config as its own argument)"
        )
    actor_options = {"num_cpus": 0, **dict(deployment_options.pop("ray_actor_options", None) or {})}
    deployment = serve.deployment(
        num_replicas=num_replicas,
        user_config=dict(user_config or {}),  # always set, so Serve calls reconfigure (which loads the model)
        ray_actor_options=actor_options,
        **deployment_options,
    )(SliceReplica)
    # a fixed code version, so that a user_config change reconfigures the replicas in place (_ray_compat says how)
    version = code_version or default_code_version(model, topology, ready_timeout_s)
    deployment = _ray_compat.versioned_deployment(deployment, version)
    return deployment.bind(model, topology, ready_timeout_s)


def default_code_version(model: ModelFactory, topology: str, ready_timeout_s: float) -> str:
    """The code version :func:`slice_app` gives its deployment: a digest of what the replica's constructor takes
    (Serve does not compare constructor arguments when it decides between reconfigure and restart)."""
    name = f"{getattr(model, '__module__', '?')}.{getattr(model, '__qualname__', repr(model))}"
    key = f"{name}|{parse_slice(topology)}|{ready_timeout_s!r}"
    return "tpuray-serving-" + hashlib.sha256(key.encode()).hexdigest()[:16]
