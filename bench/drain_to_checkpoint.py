"""From a drain notice to the drain checkpoint's last byte on disk, and its parts, on the emulated slice.

The GPT trainer (``train_gpt`` through ``tpuray.workloads.launch.trainer``, as the drain test runs it) trains on an
emulated v5e 2x2 slice (PyTorch/XLA, one worker per chip) for far more steps than the bench waits for, so the job
cannot end before the drain arrives. After its first periodic checkpoint the bench does what a worker pod's
``preStop`` hook does (``tpuray.components.planning.drain``): the node lookup (``python -c`` of the hook's script) and
then the real ``ray drain-node`` CLI with the hook's arguments (a spot pool's deadline), and times each part from the
events themselves:

- ``hook_node_lookup_s``: the hook's ``python -c`` node lookup (a fresh interpreter importing Ray and connecting);
- ``cli_to_gcs_s``: from the CLI's start until the GCS lists the node as draining (the bench's own
  ``GcsClient.get_draining_nodes`` poll, or the CLI's return, whichever comes first: the CLI returns once the GCS
  accepted the drain); ``cli_return_s`` is the CLI's whole run;
- ``worker_poll_s``: from then until the worker's ``DrainWatch`` saw it (its ``observed_at``; it polls every
  ``poll_s``);
- ``step_in_flight_s``: from then until the step it was in ended (the goodput log's step events);
- ``agreement_s``: from that step's end until the save began (the ranks' agreement at the step boundary and the
  chunk's report);
- ``save_s``: from the save's start (the goodput log's save event) until the checkpoint's last byte is on disk
  (the newest change time of the files of the checkpoint Ray Train persisted in the run's directory).

``drain_to_checkpoint_s`` is their sum, from the notice (the hook's start) to the last byte. The baselines of the same
run: ``periodic_save_s``, the first periodic checkpoint's save (what a checkpoint costs without a drain),
``poll_s``, the watch's poll interval (the most the poll part can add), and ``cli_import_s``, a fresh interpreter
importing Ray's CLI (how much of the CLI's part is its own start-up). ``ratio`` is the drain path over the
periodic save. ``registered_s`` (after the last byte) is when Ray Train's controller had registered the checkpoint,
which a restart needs. Each repeat drains the host once, then kills its workers (the job ends: no failures allowed)
and replaces the host, as GKE replaces a preempted VM.

``--backend torch_tpu`` runs it on TorchTPU's stand-in (``tpuray.workloads.emulation.torch_tpu_standin``), recorded as
``drain_to_checkpoint_torch_tpu``; on a TPU the same parts apply, with the save and the step at the chips' speed.

Prints one JSON line. ``--record`` writes it to docs/figures.json.

    python bench/drain_to_checkpoint.py [--repeats 3] [--every 20] [--record]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

from figures import add_record_flag, emit

from tpuray.components.catalog.runtimes import RuntimeBackend
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config.capacity import Spot
from tpuray.components.planning.drain import NODE_ID_SCRIPT, drain_node_args, drain_plan

SLICE = TpuSlice.parse("v5e:2x2")
STEPS = 10**7
"""Far more steps than any repeat waits for: the job ends only when the bench takes its host away."""
OBSERVED_FILE = "drain-observed.json"
PARTS = ("hook_node_lookup_s", "cli_to_gcs_s", "worker_poll_s", "step_in_flight_s", "agreement_s", "save_s")


def train_fn(config: dict[str, Any]) -> None:
    """The GPT trainer, with its drain watch writing when it first saw the drain (``observed_at``) to the run's
    directory: the watch runs in a worker process, and this is how its time reaches the bench."""
    import json as _json
    from pathlib import Path as _Path

    from tpuray.workloads.gpt.loop import train_gpt
    from tpuray.workloads.signals import drain as _drain

    out = _Path(config["job"].run_dir) / OBSERVED_FILE

    class RecordingWatch(_drain.DrainWatch):
        def poll_once(self) -> bool:
            hit = super().poll_once()
            if hit and self.observed_at is not None and not out.exists():
                out.write_text(_json.dumps({"observed_at": self.observed_at, "poll_s": self.poll_s}))
            return hit

    _drain.DrainWatch = RecordingWatch  # type: ignore[misc]  # CheckpointSignal builds its watch by this name
    train_gpt(config)


def _events(run_dir: Path) -> list[dict[str, Any]]:
    from tpuray.workloads.signals.goodput import EVENTS_FILE, read_events

    return read_events(run_dir / EVENTS_FILE)


def _wait(what: str, cond: Any, timeout_s: float = 300, every_s: float = 0.05) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every_s)
    raise TimeoutError(f"timed out waiting for {what}")


def _drain_checkpoint(run_dir: Path) -> tuple[int, float] | None:
    """(drain step, newest change time of its files) of the checkpoint Ray Train persisted for the drain."""
    import torch

    for d in sorted(run_dir.glob("checkpoint_*")):
        try:
            state = torch.load(d / "state.pt", map_location="cpu", weights_only=True)
        except Exception:  # not all there yet
            continue
        if state.get("drains"):
            return int(state["drains"][0]), max(f.stat().st_ctime for f in d.rglob("*") if f.is_file())
    return None


def _registered(run_dir: Path, step: int) -> float | None:
    """When the controller's snapshot first listed the checkpoint of ``step`` (the file's change time)."""
    path = run_dir / "checkpoint_manager_snapshot.json"
    try:
        snapshot = json.loads(path.read_text())
        steps = [int(r["metrics"]["step"]) for r in snapshot["checkpoint_results"]]
        return path.stat().st_ctime if step in steps else None
    except (OSError, ValueError, KeyError):
        return None


def one_drain(
    cluster: Any, storage: Path, name: str, every: int, replace: bool, backend: RuntimeBackend = "xla"
) -> dict[str, Any]:
    """Train, drain the slice's host after the first periodic checkpoint, and time each part of the drain; then take
    the host away (and, with ``replace``, bring up a new one)."""
    import ray
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig

    from tpuray.workloads import _ray_compat, launch
    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.gpt.metrics import ModelShape
    from tpuray.workloads.signals.goodput import JOB_START, record_job_event

    run_dir = storage / name
    job = GptJob(
        ModelShape(64, 1, 16, 2, 8),
        STEPS,
        2,
        3e-3,
        every,
        str(SLICE),
        bf16=False,
        log_every=10**6,
        cpu_threads=1,
        run_dir=str(run_dir),
        run_name=name,
    )
    rc = RunConfig(
        name=name,
        storage_path=str(storage),
        checkpoint_config=CheckpointConfig(num_to_keep=None),
        failure_config=FailureConfig(max_failures=0),
    )
    record_job_event(run_dir, JOB_START)
    ended: list[Any] = []

    def fit() -> None:
        try:
            ended.append(launch.trainer(train_fn, {"job": job}, SLICE, 1, rc, backend=backend).fit())
        except Exception as e:  # the end this bench causes: the drained host's workers are killed
            ended.append(e)

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    saves = _wait("the first periodic checkpoint", lambda: [e for e in _events(run_dir) if e["e"] == "save"])
    periodic_save_s = saves[0]["t1"] - saves[0]["t"]

    host = cluster.host_node_id(cluster.slice_names()[0], 0)
    gcs = ray.get_runtime_context().gcs_address
    plan = drain_plan(Spot(type="spot"))
    env = {**os.environ, "RAY_ADDRESS": gcs}
    seen: list[float] = []
    stop = threading.Event()

    def watch_gcs() -> None:
        while not stop.is_set():
            if host in _ray_compat.draining_nodes():
                seen.append(time.time())
                return
            time.sleep(0.01)

    t = time.time()  # a baseline: the CLI's own start-up (a fresh interpreter importing Ray's CLI), under the same load
    subprocess.run([sys.executable, "-c", "import ray.scripts.scripts"], check=True, env=env)
    cli_import_s = time.time() - t

    t_notice = time.time()
    lookup = subprocess.run([sys.executable, "-c", NODE_ID_SCRIPT], capture_output=True, text=True, env=env)
    if lookup.returncode != 0:
        raise RuntimeError(f"the hook's node lookup failed: {lookup.stderr.strip()[-400:]}")
    t_cli = time.time()
    poller = threading.Thread(target=watch_gcs, daemon=True)
    poller.start()
    cli = [sys.executable, "-m", "ray.scripts.scripts", *drain_node_args(plan, host), "--address", gcs]
    done = subprocess.run(cli, capture_output=True, text=True, env=env)
    t_cli_return = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"ray drain-node failed: {done.stderr.strip()[-400:]}")
    drain_step, last_byte = _wait("the drain checkpoint on disk", lambda: _drain_checkpoint(run_dir))
    observed = json.loads(_wait("the watch's observation", lambda: _read(run_dir / OBSERVED_FILE)))
    registered = _wait("Ray Train to register the drain checkpoint", lambda: _registered(run_dir, drain_step))
    poller.join(timeout=5)
    stop.set()
    t_gcs = min([*seen, t_cli_return])

    events = _events(run_dir)
    (in_flight,) = [e for e in events if e["e"] == "step" and e["n"] == drain_step - 1]
    save = next(e for e in events if e["e"] == "save" and e["t"] >= in_flight["t1"])
    t_obs = max(float(observed["observed_at"]), t_gcs)  # one clock; the bench's poll may see it a little later
    t_step_end = max(in_flight["t1"], t_obs)  # seen after the step ended: the flag is read at that boundary
    chain = [t_notice, t_cli, t_gcs, t_obs, t_step_end, save["t"], last_byte]
    if any(b < a for a, b in itertools.pairwise(chain)):
        raise RuntimeError(f"the drain's events are out of order: {chain}")
    parts = {k: round(b - a, 4) for k, (a, b) in zip(PARTS, itertools.pairwise(chain), strict=True)}

    for pid in cluster.worker_pids(host):  # the drain deadline is over: GKE takes the VM away
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    thread.join(timeout=300)
    if thread.is_alive():
        raise RuntimeError("the run did not end after its host was taken away")
    if replace:  # GKE's replacement VM, for the next repeat
        cluster.replace_host(host)
    return {
        "drain_step": drain_step,
        "drain_to_checkpoint_s": round(last_byte - t_notice, 4),
        **parts,
        "cli_return_s": round(t_cli_return - t_cli, 4),
        "cli_import_s": round(cli_import_s, 4),
        "registered_s": round(registered - last_byte, 4),
        "step_s": round(in_flight["t1"] - in_flight["t"], 4),
        "periodic_save_s": round(periodic_save_s, 4),
        "poll_s": float(observed["poll_s"]),
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text() or None
    except OSError:
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="drains, each of a fresh run on a fresh host")
    p.add_argument("--every", type=int, default=20, help="the periodic checkpoint's interval (steps)")
    p.add_argument("--backend", choices=("xla", "torch_tpu"), default="xla")
    add_record_flag(p)
    args = p.parse_args()
    import ray

    from tpuray.workloads import _ray_compat
    from tpuray.workloads.emulation.cluster import EmulatedCluster

    runs = []
    with tempfile.TemporaryDirectory(prefix="tpuray-drain-bench-") as tmp, EmulatedCluster(SLICE) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        _ray_compat.ready_train_autoscaling_coordinator()
        for i in range(args.repeats):
            last = i + 1 == args.repeats
            runs.append(one_drain(cluster, Path(tmp), f"drain{i}", args.every, replace=not last, backend=args.backend))
            print(json.dumps(runs[-1]), file=sys.stderr)
        ray.shutdown()

    def med(key: str) -> float:
        return round(float(median(r[key] for r in runs)), 4)

    total, periodic = med("drain_to_checkpoint_s"), med("periodic_save_s")
    emit(
        "drain_to_checkpoint" + ("" if args.backend == "xla" else f"_{args.backend}"),
        {
            "bench": "drain_to_checkpoint",
            "runtime": args.backend,
            "slice": str(SLICE),
            "repeats": args.repeats,
            "checkpoint_every": args.every,
            "drain_deadline_s": drain_plan(Spot(type="spot")).deadline_seconds,
            "drain_to_checkpoint_s": total,
            "parts_s": {k: med(k) for k in PARTS},
            "cli_return_s": med("cli_return_s"),
            "cli_import_s": med("cli_import_s"),
            "registered_after_s": med("registered_s"),
            "step_s": med("step_s"),
            "periodic_save_s": periodic,
            "poll_s": runs[0]["poll_s"],
            "ratio": round(total / periodic, 2) if periodic > 0 else None,
            "note": (
                "medians over the repeats, each on its own (the median parts need not sum to the median total; each "
                "run's parts sum to its total); ratio: drain notice to safe checkpoint over the periodic save"
            ),
            "runs": runs,
        },
        record_it=args.record,
    )


if __name__ == "__main__":
    main()
