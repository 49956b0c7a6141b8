"""A drained TPU VM of an emulated slice: the GPT trainer checkpoints at the drain step and resumes there.

Like GKE taking a TPU VM away: the test drains the VM of the dev slice (v5e 2x2, 4 chips) with the real
``ray drain-node`` CLI (the command of the pods' ``preStop`` hook), waits for the out-of-turn checkpoint and the
drain deadline, SIGKILLs that host's Ray worker processes and replaces the host with a new one. Ray Train restarts
the worker group, and the run resumes at the drain step: no step the run had reached when the drain came is lost,
against ``drain_step % checkpoint_every`` (up to ``checkpoint_every - 1``) from the last periodic checkpoint without
it. Only chip 0's worker watches the node (one watcher per host), so the other three chips learn of the drain
through the agreement over the process group, as the chips of a multi-host slice's other hosts do; a multi-host
slice would cost twice the workers on the suite's two cores.

Nothing here races the job: the run cannot end before the drain it waits for. Its train function is the GPT
trainer's, with one stand-in for time (:class:`HoldForDrain`): the loop holds at :data:`HOLD` (off the periodic
schedule, so only the out-of-turn checkpoint can land there) until the ranks agree the node drains, and once its
drain checkpoint is saved it trains on until its VM goes, as a job does whose VM is taken away mid-run. Each wait
follows the event it waits for, and says which event did not come.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.goodput_by_hand import check_goodput_by_hand
from tests.support.prometheus_server import LocalPrometheus
from tests.support.train_runs import registered_steps
from tpuray.components.catalog import metric_names as mn
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.planning.drain import DRAIN_REASON
from tpuray.workloads.emulation.cluster import EmulatedCluster
from tpuray.workloads.signals.drain import CheckpointSignal

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.prometheus, pytest.mark.timeout(600)]

SLICE = TpuSlice.parse("v5e:2x2")
EVERY = 50  # the first periodic checkpoint (step 50) tells the test to drain; the next one is far off
HOLD = 60  # the first attempt holds here until the drain is agreed: the drain checkpoint's step, off the schedule
AFTER = 5  # steps the first attempt trains after its drain checkpoint before it waits for its VM to go
STEPS = 120
DRAIN_DEADLINE_S = 5
HOLD_LIMIT_S = 300.0  # a hold that outlives this ends the attempt with an error naming the event that never came


class HoldForDrain(CheckpointSignal):
    """The trainer's out-of-turn signal with the test's stand-in for time, in the first attempt only: at step
    :data:`HOLD` every rank asks the agreement again (a collective, so the ranks stay in step) until the drain is
    agreed; :data:`AFTER` steps after the drain checkpoint it waits for its VM to go (the test SIGKILLs it). A
    resumed attempt (a fresh process on a node that is not draining) starts at the drain step and never holds."""

    def __call__(self, step: int) -> bool:
        fired = super().__call__(step)
        if step == HOLD:
            end = time.monotonic() + HOLD_LIMIT_S
            while not fired:
                if time.monotonic() > end:
                    raise RuntimeError(
                        f"held at step {HOLD} for {HOLD_LIMIT_S:.0f} s: the drain never reached the ranks"
                    )
                time.sleep(0.1)
                fired = super().__call__(step)
        elif "drain" in self.fired and step == self.fired["drain"] + AFTER:
            time.sleep(HOLD_LIMIT_S)  # the VM goes while the job trains on
            raise RuntimeError(f"the drained VM did not go within {HOLD_LIMIT_S:.0f} s of its drain checkpoint")
        return fired


def train_holding(config: dict[str, Any]) -> None:
    """Each worker's train function: the GPT trainer, with :class:`HoldForDrain` as its out-of-turn signal."""
    from tpuray.workloads.gpt import loop

    vars(loop)["CheckpointSignal"] = HoldForDrain  # this worker process's trainer only
    loop.train_gpt(config)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(SLICE) as c:
        ray.init(address=c.address, log_to_driver=False)
        yield c
        ray.shutdown()


@pytest.fixture(scope="module")
def prom(cluster: EmulatedCluster) -> Iterator[LocalPrometheus]:
    """A real Prometheus scraping the emulated cluster: every Ray node's metrics export port (Ray's series and
    the trainer's ``ray.util.metrics`` gauges) and every emulated host's device plugin endpoint. It keeps what
    the drain run exported for the module's later tests (query with ``last_over_time(...[10m])``)."""
    jobs = {"ray": cluster.metrics_export_addresses(), "tpu-device-plugin": cluster.device_plugin_addresses()}
    with LocalPrometheus(jobs) as p:
        yield p


def _checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    """What every checkpoint of the run holds: step and drain steps (read like the trainer reads them)."""
    import torch

    found = []
    for d in sorted(run_dir.glob("checkpoint_*")):
        try:
            state = torch.load(d / "state.pt", map_location="cpu", weights_only=True)
        except Exception:
            continue
        found.append({"step": int(state["step"]), "drains": list(state.get("drains", []))})
    return found


def _wait(what: str, cond: Any, fit: threading.Thread, results: list[Any], timeout_s: float = 240) -> Any:
    """``cond()`` once it holds; fails at once, naming ``what``, if the run ended first (the event cannot come)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        if not fit.is_alive():
            error = getattr(results[0], "error", results[0]) if results else "no result"
            raise AssertionError(f"the run ended before {what}: {error}")
        time.sleep(0.3)  # each look reads every checkpoint: leave the two cores to the chips
    raise AssertionError(f"{what} did not come within {timeout_s:.0f} s")


def test_a_drained_host_loses_no_steps(cluster: EmulatedCluster, prom: LocalPrometheus, tmp_path: Path) -> None:
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig

    from tpuray.workloads import launch
    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.signals.goodput import JOB_END, JOB_START, record_job_event

    run_dir = tmp_path / "drain"
    job = GptJob(
        ModelShape(64, 1, 16, 2, 8),
        STEPS,
        2,
        3e-3,
        EVERY,
        str(SLICE),
        bf16=False,
        log_every=1000,
        cpu_threads=1,
        run_dir=str(run_dir),
        run_name="drain",
    )
    rc = RunConfig(
        name="drain",
        storage_path=str(tmp_path),
        checkpoint_config=CheckpointConfig(num_to_keep=None),
        failure_config=FailureConfig(max_failures=1, controller_failure_limit=1, max_preemption_failures=1),
    )
    results: list[Any] = []
    record_job_event(run_dir, JOB_START)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import the tests
    trainer = launch.trainer(train_holding, {"job": job}, SLICE, 1, rc)

    def run() -> None:
        try:
            results.append(trainer.fit())
        except BaseException as e:  # said by the wait that needed the run alive, or the assertions below
            results.append(e)

    fit = threading.Thread(target=run)
    fit.start()
    _wait(f"the periodic checkpoint at step {EVERY}", lambda: registered_steps(run_dir), fit, results)

    host = cluster.host_node_id(cluster.slice_names()[0], 0)
    gcs = ray.get_runtime_context().gcs_address
    # the `ray` CLI (its console script runs ray.scripts.scripts:main)
    drain = [sys.executable, "-m", "ray.scripts.scripts", "drain-node", "--address", gcs, "--node-id", host]
    drain += ["--reason", DRAIN_REASON, "--reason-message", "test: the TPU VM is going away"]
    drain += ["--deadline-remaining-seconds", str(DRAIN_DEADLINE_S)]
    done = subprocess.run(drain, capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr

    drained = _wait("the drain checkpoint", lambda: [c for c in _checkpoints(run_dir) if c["drains"]], fit, results)
    drain_step = drained[0]["drains"][0]
    assert drained[0]["step"] == drain_step == HOLD  # the checkpoint holds the drain step itself
    # Ray Train counts a checkpoint once the controller has every rank's report; the preStop hook keeps the node up
    # for the deadline, which covers that (on a loaded machine it took seconds). The VM goes as soon as it has.
    _wait("Ray Train to register the drain checkpoint", lambda: drain_step in registered_steps(run_dir), fit, results)
    pids = cluster.worker_pids(host)
    assert pids  # the 4 chips' workers (and any idle Ray workers there)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    cluster.replace_host(host)  # GKE's replacement VM

    fit.join(timeout=400)
    record_job_event(run_dir, JOB_END)
    assert not fit.is_alive() and results
    result = results[0]
    assert not isinstance(result, BaseException) and result.error is None, result
    m = result.metrics
    assert m["step"] == STEPS and m["param_spread"] < 1e-12  # finished, identical parameters on every chip
    assert m["drains"] == [drain_step] and len(m["losses"]) == STEPS
    (resumed,) = m["resumes"]
    assert resumed == drain_step  # the first attempt reached no later checkpoint: it held until its VM went
    periodic = max(c["step"] for c in _checkpoints(run_dir) if c["step"] % EVERY == 0 and c["step"] <= drain_step)
    lost = max(0, drain_step - resumed)
    lost_without = drain_step - periodic  # where Ray Train resumes from without the out-of-turn checkpoint
    assert lost == 0 and lost_without == drain_step % EVERY <= EVERY - 1
    # goodput: the module's split of the run's event log against one by hand. The steps the first attempt ran
    # after the drain checkpoint, until its VM went, were redone: wasted progress, not lost steps of the drain.
    check_goodput_by_hand(run_dir, resumed_at=resumed)
    _check_prometheus(prom)
    print(
        json.dumps(
            {"drain_step": drain_step, "resumed_at": resumed, "steps_lost": lost, "steps_lost_without": lost_without}
        )
    )


def _check_prometheus(prom: LocalPrometheus) -> None:
    """The TPU, Ray and training series of the drain run reached a real Prometheus, one series per chip where
    the series is per chip."""

    def over_run(name: str) -> str:
        return f"last_over_time({name}[10m])"

    chips = SLICE.chips
    # the device plugin, per chip bound to a worker and per chip of the node
    for name in (mn.DP_DUTY_CYCLE, mn.DP_MEMORY_USED, mn.DP_TENSORCORE_UTILIZATION):
        ids = {x[mn.DP_ACCELERATOR_ID_LABEL] for x in prom.series(over_run(name))}
        assert len(ids) == chips, (name, ids)
    # the node series exist only while a chip is bound to a container (the run's workers): over the run, not now
    assert len(prom.series(over_run(mn.DP_DUTY_CYCLE_NODE))) == chips
    # Ray's reporter agent read the plugin (TPU_DEVICE_PLUGIN_ADDR): one series per chip
    for name in mn.RAY_TPU_METRICS:
        got = prom.wait_for(f"count by ({mn.RAY_TPU_INDEX_LABEL}) ({over_run(mn.ray_exported(name))})", 60)
        assert len(got) == chips, (name, got)
    assert prom.query(over_run(mn.ray_exported("node_cpu_utilization")))  # Ray's own node series
    # the trainer's gauges (report_step_metrics), tagged with the run and its slice
    train = f'{{{mn.TRAIN_RUN_TAG}="drain",{mn.TRAIN_SLICE_TAG}="{SLICE}"}}'
    for name in (mn.TRAIN_STEP_TIME, mn.TRAIN_TOKENS_PER_CHIP, mn.TRAIN_GOODPUT, mn.TRAIN_COMPILES):
        assert prom.query(over_run(mn.ray_exported(name) + train)), name
    buckets = {x[mn.TRAIN_BUCKET_TAG] for x in prom.series(over_run(mn.ray_exported(mn.TRAIN_BADPUT) + train))}
    assert buckets == set(mn.BADPUT_BUCKETS)
    assert not prom.query(over_run(mn.ray_exported(mn.TRAIN_MFU)))  # emulated chips: no MFU


def test_every_dashboard_query_finds_the_drain_runs_series(prom: LocalPrometheus) -> None:
    """The dashboard of the dev stack (whose pool is this slice) against what the drain run exported: every chart's
    query and the idle alert's parse on a real Prometheus, and, over the run's window, the per-chip charts find
    one series per chip and the training charts the run's series (after the drain test above, in this module)."""
    import re

    from tpuray.components.config import load_stack_file
    from tpuray.components.planning.dashboard import dashboard_plan, idle_alert_plan

    root = Path(__file__).resolve().parents[3]
    cfg = load_stack_file(root / "Pulumi.dev.yaml")
    (pool,) = cfg.slice_pools
    assert pool.tpu_slice == SLICE
    plan = dashboard_plan(cfg, "dev")
    alert = idle_alert_plan(cfg, "dev")
    assert alert is not None

    def over_run(query: str) -> str:  # every instant selector over the run's window (the run has ended)
        return re.sub(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\})(?!\[)", r"last_over_time(\1[10m])", query)

    for panel in plan.rows[0].panels:
        prom.query(panel.query)  # raises with Prometheus's message on a query it cannot parse
        got = prom.query(over_run(panel.query))
        if panel.per_chip:
            chips = {(x["metric"][mn.RAY_TPU_TYPE_LABEL], x["metric"][mn.RAY_TPU_INDEX_LABEL]) for x in got}
            assert chips == {(SLICE.gke_accelerator, str(i)) for i in range(SLICE.chips)}, panel.query
        elif panel.key == "mfu":
            assert got == []  # emulated chips export no MFU
        elif panel.key == "badput":
            assert {x["metric"][mn.TRAIN_BUCKET_TAG] for x in got} == set(mn.BADPUT_BUCKETS)
        else:
            assert [x["metric"].get(mn.TRAIN_RUN_TAG) for x in got] == ["drain"], panel.query
    prom.query(alert.query)
    assert prom.query(over_run(alert.query.rsplit("<", 1)[0]))  # one series per host that had chips
