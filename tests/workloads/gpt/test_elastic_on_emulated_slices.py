"""Elastic whole-slice training through a lost slice, on Ray Train's real elastic path (PyTorch/XLA, emulated).

Two multi-host v5p 2x2x2 slices (GKE Multislice joins only multi-host slices, so no single-host shape can stand
in), trained elastically between one and two slices (``tpu_scaling_config(num_slices=2, min_slices=1)``). Mid-run
the test takes both hosts of one slice away, as GKE taking a preempted slice's VMs: Ray Train restarts the worker
group on the slice that remains, from the last checkpoint; the test then brings the hosts back and Ray Train's
elastic policy grows the group to two slices again. The built-in GPT job goes through both resizes; a user's own
function, written against the public per-worker API, goes through the lost slice and finishes on the one left (each
start is a fresh worker group, so what it would see after the grow is what it saw on its first start, and the
built-in job's test covers the grow itself).

Nothing here races the job: each attempt holds, after the checkpoint the test waits for, until the resize that ends
it (the lost slice, the grown group) or the test's release file, so no run can end before the disruption it waits
for. Every wait follows an event and says which event did not come.

Each worker group start costs about 3 s a worker on two shared cores (Ray's controller logs, Ray 2.60: 16 actors
11 s, the train context 16 s, the backend 21 s, mostly imports of torch and torch_xla), and Ray Train sees returned
hosts only at its autoscaling coordinator's next tick (every 20 s): the grow takes 80 to 90 s (the built-in job
prints its cold start, shrink and grow times).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.train_runs import registered_steps
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.emulation.cluster import EmulatedCluster, HostNode
from tpuray.workloads.signals.drain import CheckpointSignal

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SLICE = TpuSlice.parse("v5p:2x2x2")
MIN_SLICES: int | None = 1  # None: a fixed two-slice group, which must fail these tests
MONITOR_S = 1.0  # elastic_resize_monitor_interval_s: how soon Ray Train sees the hosts back
HOLD_LIMIT_S = 300.0  # a hold that outlives this ends the attempt with an error naming the resize that never came
WAIT_S = 240.0  # the test's bound on each event it waits for

# The built-in job: checkpoints every EVERY steps. The two-slice attempt holds one step after its checkpoint at
# LOST_AT until its slice goes; the one-slice attempt one step after RETURN_AT until the group grows again.
EVERY = 2
LOST_AT = 2
RETURN_AT = 6
STEPS = 10

USER_STEPS = 4  # the user's function checkpoints every step and holds after each attempt's first


class HoldForResize(CheckpointSignal):
    """The built-in trainer's out-of-turn signal with the test's stand-in for time: at step ``LOST_AT + 1`` on
    two slices, and at ``RETURN_AT + 1`` on one, the attempt holds until Ray Train ends it for the resize. The
    step after a checkpoint, so the steps it trained past the checkpoint are the ones a resize may redo."""

    def __call__(self, step: int) -> bool:
        from tpuray.workloads import runtime

        fired = super().__call__(step)
        slices = runtime().world_size // SLICE.chips
        if (step, slices) in ((LOST_AT + 1, 2), (RETURN_AT + 1, 1)):
            time.sleep(HOLD_LIMIT_S)
            raise RuntimeError(f"held at step {step} on {slices} slice(s) for {HOLD_LIMIT_S:.0f} s: no resize came")
        return fired


def train_holding(config: dict[str, Any]) -> None:
    """Each worker's train function: the built-in GPT trainer, with :class:`HoldForResize` as its signal."""
    from tpuray.workloads.gpt import loop

    vars(loop)["CheckpointSignal"] = HoldForResize  # this worker process's trainer only
    loop.train_gpt(config)


def user_train(config: dict[str, Any]) -> None:
    """A user's own PyTorch/XLA train function, one worker per chip, on tpuray's public per-worker API: after
    every (re)start it reads the live slices and their mesh, records them, resumes from its checkpoint, and trains
    a linear model with the runtime's gradient average, checkpointing every step."""
    import tempfile

    import ray.train
    import torch

    from tpuray.workloads import chip, mean_over_chips, optimizer_step
    from tpuray.workloads.sharding.mesh import live_mesh

    out = Path(config["dir"])
    info, mesh = chip(), live_mesh()
    state: dict[str, Any] | None = None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = json.loads((Path(d) / "state.json").read_text())
    start = int(state["step"]) if state is not None else 0
    # every worker's view of the group, averaged: equal to rank 0's only if all workers agree
    view = torch.tensor([info.num_slices, mesh.shape[0], mesh.dcn_shape[0]], dtype=torch.float64)
    agreed = bool(torch.equal(mean_over_chips(view), view))
    if info.rank == 0:
        attempt = {
            "slices": info.num_slices,
            "world_size": info.world_size,
            "mesh": list(mesh.shape),
            "dcn": list(mesh.dcn_shape),
            "ici": list(mesh.ici_shape),
            "resumed_from": state["step"] if state is not None else None,
            "agreed": agreed,
        }
        (out / f"attempt-{time.time_ns()}.json").write_text(json.dumps(attempt))

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False)
    if state is not None:
        model.load_state_dict({"weight": torch.tensor(state["weight"])})
    model = model.to(info.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(start, config["steps"]):
        x = torch.full((2, 4), float(step + info.rank), device=info.device)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        metrics = {"step": step + 1, "slices": info.num_slices, "mesh": list(mesh.shape)}
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if info.rank == 0:  # every chip holds the same weights: one writer
                weight = model.weight.detach().cpu().tolist()
                (Path(tmp) / "state.json").write_text(json.dumps({"step": step + 1, "weight": weight}))
                saved = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=saved)
        if step == start:  # the test's stand-in for time: each attempt holds here until a resize or the release
            end = time.monotonic() + HOLD_LIMIT_S
            while not (out / "release").exists():
                if time.monotonic() > end:
                    raise RuntimeError(f"held at step {step + 1} for {HOLD_LIMIT_S:.0f} s: no resize, no release")
                time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    from tpuray.workloads import _ray_compat
    from tpuray.workloads.emulation.cluster import RAY_METRICS_INTERVAL_S

    # Ray's own metrics interval: nothing here scrapes a gauge, and 8 Ray nodes reporting each second cost CPU
    with EmulatedCluster(SLICE, slices=2, metrics_interval_s=RAY_METRICS_INTERVAL_S) as c:
        ray.init(address=c.address, log_to_driver=False)
        _ray_compat.ready_train_autoscaling_coordinator()
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import the tests
        yield c
        ray.shutdown()


def _trainer(fn: Callable[[dict[str, Any]], None], config: dict[str, Any], storage: Path, name: str) -> Any:
    from ray.train.torch import TorchTrainer
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig

    from tpuray.workloads import XlaChipConfig, tpu_scaling_config

    # Ray Train V2's RunConfig, which its TorchTrainer takes in 2.60 (its stub still names the V1 class)
    run_config: Any = RunConfig(
        name=name,
        storage_path=str(storage),
        checkpoint_config=CheckpointConfig(num_to_keep=None),
        failure_config=FailureConfig(max_failures=4, max_preemption_failures=4, controller_failure_limit=4),
    )
    scaling = tpu_scaling_config(
        SLICE, num_slices=2, min_slices=MIN_SLICES, elastic_resize_monitor_interval_s=MONITOR_S
    )
    return TorchTrainer(
        fn, train_loop_config=config, scaling_config=scaling, torch_config=XlaChipConfig(), run_config=run_config
    )


class _Fit:
    """``trainer.fit()`` in a thread: Ray adds a node only from the main thread, where the test takes hosts away
    and brings them back."""

    def __init__(self, trainer: Any) -> None:
        self._out: list[Any] = []
        self._thread = threading.Thread(target=self._run, args=(trainer,), daemon=True)
        self._thread.start()

    def _run(self, trainer: Any) -> None:
        try:
            self._out.append(trainer.fit())
        except BaseException as e:  # said by the wait that needed the run alive, or by result()
            self._out.append(e)

    def wait(self, what: str, cond: Callable[[], Any]) -> Any:
        """``cond()`` once it holds; fails at once, naming ``what``, if the run ended first (it cannot come)."""
        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:
            got = cond()
            if got:
                return got
            if not self._thread.is_alive():
                error = getattr(self._out[0], "error", self._out[0]) if self._out else "no result"
                raise AssertionError(f"the run ended before {what}: {error}")
            time.sleep(0.3)  # each look reads a few small files: leave the two cores to the chips
        raise AssertionError(f"{what} did not come within {WAIT_S:.0f} s")

    def __enter__(self) -> _Fit:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # a failed test's run ends before the module's next test needs the slices
            self._thread.join(timeout=WAIT_S)

    def result(self) -> Any:
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive(), f"the run did not end within {WAIT_S:.0f} s of the slice's return"
        got = self._out[0]
        assert not isinstance(got, BaseException) and got.error is None, got
        return got


class _LostSlice:
    """Both hosts of the second slice taken away, as GKE taking a preempted slice's VMs, until :meth:`bring_back`
    (or the end of the ``with``, so a failed test leaves the module's cluster whole)."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self._cluster = cluster
        self._specs: list[HostNode] = []
        self.lost_at = 0.0
        self.returned_at: float | None = None

    def __enter__(self) -> _LostSlice:
        name = self._cluster.slice_names()[1]
        ids = [self._cluster.host_node_id(name, w) for w in range(SLICE.hosts)]
        self._specs = [self._cluster.take_host(i) for i in ids]
        self.lost_at = time.time()
        return self

    def bring_back(self) -> None:
        self._cluster.bring_back(self._specs)  # the slice's VMs back together, as GKE recreates them
        self._specs = []
        self.returned_at = time.time()

    def __exit__(self, *exc: object) -> None:
        if self._specs:
            self.bring_back()


def _unbroken_losses(job: Any) -> list[float]:
    """An unbroken two-slice run's loss at each step, computed here on the CPU and independently of the elastic
    split: each step one forward and backward of the whole global batch (the per-chip batch times the chips of two
    slices, rows as :meth:`~tpuray.workloads.gpt.data.TokenBatches.rows` defines them), one AdamW step. With equal
    rows per worker its loss and gradient are the workers' mean, which a wrong accumulation weight, micro-batch
    split or data order at one slice would not reproduce."""
    import torch

    from tpuray.workloads.gpt.data import open_dataset
    from tpuray.workloads.gpt.model import GPT

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(job.seed)  # the trainer's initial weights
        model = GPT(job.model)
        opt = torch.optim.AdamW(model.parameters(), lr=job.learning_rate, weight_decay=0.01)
        data = open_dataset(job.dataset, job.model.vocab_size, job.seed)
        g = job.batch_size_per_chip * SLICE.chips * 2
        losses = []
        for step in range(job.steps):
            loss = model.loss(torch.from_numpy(data.rows(step, 0, g, g, job.model.seq_len)))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        return losses
    finally:
        torch.set_num_threads(threads)


def _attempt_steps(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The step events of each attempt, in order (an attempt of an elastic run starts with its size event)."""
    attempts: list[list[dict[str, Any]]] = []
    for e in events:
        if e["e"] == "size":
            attempts.append([])
        elif e["e"] == "step" and attempts:
            attempts[-1].append(e)
    return attempts


def _timeline(events: list[dict[str, Any]], lost_at: float, returned_at: float) -> dict[str, float]:
    """Seconds from the run's start to its first step, from the loss to the first step on one slice, and from the
    return to the first step on two again (what bench/elastic_resize.py measures; printed, not asserted)."""
    start = next(e["t"] for e in events if e["e"] == "attempt_start")
    _, one, two = (steps[0]["t1"] for steps in _attempt_steps(events))
    first = _attempt_steps(events)[0][0]["t1"]
    return {"cold_start_s": first - start, "shrink_s": one - lost_at, "grow_s": two - returned_at}


def test_the_built_in_job_trains_on_through_a_lost_slice_and_grows_back(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    from tpuray.workloads.gpt.elastic import resize_cause
    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.signals.goodput import EVENTS_FILE, read_events

    run_dir = tmp_path / "gpt"
    job = GptJob(
        ModelShape(vocab_size=64, layers=1, d_model=16, heads=2, seq_len=8),
        STEPS,
        batch_size_per_chip=2,
        learning_rate=3e-3,
        checkpoint_every=EVERY,
        slice_spec=str(SLICE),
        bf16=False,
        log_every=EVERY,
        cpu_threads=1,
        run_dir=str(run_dir),
        run_name="gpt",
        elastic=(1, 2),
    )
    with _Fit(_trainer(train_holding, {"job": job}, tmp_path, "gpt")) as fit:
        fit.wait(f"the checkpoint at step {LOST_AT} on 2 slices", lambda: LOST_AT in registered_steps(run_dir))
        with _LostSlice(cluster) as lost:
            last_before_loss = max(registered_steps(run_dir))
            fit.wait(f"the checkpoint at step {RETURN_AT} on 1 slice", lambda: RETURN_AT in registered_steps(run_dir))
            last_before_return = max(registered_steps(run_dir))
            lost.bring_back()
        result = fit.result()
    events = read_events(run_dir / EVENTS_FILE)

    m = result.metrics
    assert m["step"] == STEPS and m["param_spread"] < 1e-12  # finished, identical parameters on every chip
    assert [e["slices"] for e in events if e["e"] == "size"] == [2, 1, 2]
    resizes = [(e["from"], e["to"], e["step"], e["cause"]) for e in events if e["e"] == "resize"]
    assert resizes == [
        (2, 1, last_before_loss, resize_cause(2, 1)),
        (1, 2, last_before_return, resize_cause(1, 2)),
    ]
    # no step lost beyond the last checkpoint: each attempt resumed exactly there
    assert m["resumes"] == [last_before_loss, last_before_return] == [LOST_AT, RETURN_AT]
    starts = [e["step"] for e in events if e["e"] == "prep_end"]
    assert starts == [0, LOST_AT, RETURN_AT]
    # the one-slice attempt trained while the slice was away: it did not wait for it
    assert lost.returned_at is not None
    one_slice = _attempt_steps(events)[1]
    assert [e["n"] for e in one_slice] == list(range(LOST_AT, RETURN_AT + 1))  # up to the held step
    assert all(lost.lost_at < e["t"] and e["t1"] < lost.returned_at for e in one_slice)
    print(json.dumps(_timeline(events, lost.lost_at, lost.returned_at)))

    losses, reference = list(m["losses"]), _unbroken_losses(job)
    assert len(losses) == STEPS and reference[-1] < reference[0]  # every step's loss; the reference trains
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))
    assert worst <= 1e-4, (losses, reference)


def _attempts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("attempt-*.json"))]


def test_a_users_train_function_sees_the_live_slices_and_mesh_after_each_resize(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    out = tmp_path / "user-records"
    out.mkdir()
    run_dir = tmp_path / "user"
    with _Fit(_trainer(user_train, {"dir": str(out), "steps": USER_STEPS}, tmp_path, "user")) as fit:
        try:
            fit.wait("the checkpoint at step 1 on 2 slices", lambda: 1 in registered_steps(run_dir))
            with _LostSlice(cluster):
                fit.wait("an attempt on 1 slice and its checkpoint at step 2", lambda: 2 in registered_steps(run_dir))
                (out / "release").touch()  # the one-slice attempt finishes while the slice is away
                result = fit.result()
        finally:
            (out / "release").touch()  # a failed test's run ends before the module's next test needs the slices

    chips = SLICE.chips
    got = [(a["slices"], a["world_size"], a["mesh"], a["dcn"], a["ici"], a["resumed_from"]) for a in _attempts(out)]
    assert got == [
        (2, 2 * chips, [2 * chips, 1, 1], [2, 1, 1], [chips, 1, 1], None),
        (1, chips, [chips, 1, 1], [1, 1, 1], [chips, 1, 1], 1),  # the data axis is the live slices'
    ]
    assert all(a["agreed"] for a in _attempts(out))  # every worker saw the same group
    assert result.metrics == {"step": USER_STEPS, "slices": 1, "mesh": [chips, 1, 1]}
