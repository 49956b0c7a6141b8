"""``python -m tpuray.workloads.train``: train a small GPT with one Ray worker per TPU chip, through Ray Train.

An example of the public API: ``TorchTrainer(train_gpt, torch_config=XlaChipConfig(),
scaling_config=tpu_scaling_config(...))``, checkpoints through ``ray.train.report`` under
``RunConfig(storage_path, name)``, worker deaths through a bounded ``FailureConfig``. On a cluster (the RayJob
entrypoint) it joins the running Ray cluster and finds the TPU slices from Ray's node labels; with ``--local``
it first starts a local Ray cluster that emulates the stack's slice (XLA on CPU, gloo gradient averaging).
Prints progress on stderr and one JSON summary line on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from tpuray.components.catalog.data_file import loads_json
from tpuray.components.catalog.throughput import slice_usd_per_hour, tokens_per_usd
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.components.config import (
    ConfigError,
    StackConfig,
    WorkloadConfig,
    exclusive_sources,
    find_stack_file,
    load_stack_file,
    validated_as,
)
from tpuray.components.config.value_types import RunName
from tpuray.components.config.workload import require_entrypoint_sharding
from tpuray.workloads.api.runtime import RuntimeMismatch
from tpuray.workloads.gpt.data import DatasetError, TokenFile, open_dataset
from tpuray.workloads.gpt.fsdp2_loop import train_gpt_fsdp2
from tpuray.workloads.gpt.loop import CheckpointError, GptJob, train_gpt
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.gpt.sharded import train_gpt_sharded
from tpuray.workloads.launch import connect, trainer
from tpuray.workloads.placement.seats import (
    PlacementError,
    cluster_slices,
    describe_slices,
    slice_of_cluster,
    slices_for_job,
)
from tpuray.workloads.signals.goodput import (
    EVENTS_FILE,
    JOB_END,
    JOB_START,
    compute_goodput,
    read_events,
    record_job_event,
)

__all__ = ["RunSettings", "Settings", "build_parser", "elastic_bounds", "main", "settings"]


class RunSettings(BaseModel):
    """The run's own settings, beside the stack's workload settings (:class:`WorkloadConfig`); each flag of the
    trainer overrides a field of one of the two, and each default is written here or there, once."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True, strict=True
    )

    run_name: RunName = Field(
        default="train", description="the run's name: runs with other names never share checkpoints"
    )
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(default=0, description="data and initialisation seed")
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=3, description="worker-group restarts allowed per job (bounded)"
    )
    log_every: Annotated[int, Field(ge=1, le=100_000_000)] = Field(
        default=10, description="steps between progress lines"
    )


@dataclass(frozen=True)
class _Flag:
    """A trainer flag that overrides one field of a settings model."""

    name: str
    """``--d-model``"""
    path: tuple[str, ...]
    """The field's aliases from the model's root: ``("model", "dModel")``."""
    field: FieldInfo

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")

    def valid_range(self) -> str:
        """The field's bounds as the model states them, e.g. ``>= 1 and <= 100000000``."""
        if typing.get_origin(self.field.annotation) is Literal:
            return "one of " + ", ".join(map(str, typing.get_args(self.field.annotation)))
        ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        return " and ".join(
            f"{ops[k]} {getattr(m, k)}"
            for m in self.field.metadata
            if isinstance(m, annotated_types.Ge | annotated_types.Gt | annotated_types.Le | annotated_types.Lt)
            for k in ops
            if hasattr(m, k)
        )


def _flags(model: type[BaseModel], skip: frozenset[str] = frozenset(), prefix: tuple[str, ...] = ()) -> list[_Flag]:
    """One flag per field, named after it (``checkpoint_every`` -> ``--checkpoint-every``); a nested model's
    fields are flags of their own (``model.d_model`` -> ``--d-model``)."""
    out: list[_Flag] = []
    for name, f in model.model_fields.items():
        alias = f.alias or name
        sub = f.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out += _flags(sub, skip, (*prefix, alias))
        elif name not in skip:
            out.append(_Flag("--" + name.replace("_", "-"), (*prefix, alias), f))
    return out


# The pool a job runs on is told by --topology/--num-slices (the stack's workload.slicePool picks them for the
# RayJob), not by a pool name the trainer could not look up on a cluster.
WORKLOAD_FLAGS = _flags(WorkloadConfig, skip=frozenset({"slice_pool"}))
RUN_FLAGS = _flags(RunSettings)


def _flag_help(flag: _Flag, where: str) -> str:
    parts = [flag.field.description or ""]
    rng = flag.valid_range()
    if rng:
        parts.append(rng)
    parts.append(f"default: {where}{flag.field.default}")
    return "; ".join(p for p in parts if p).replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    """The trainer's flags. A setting's flag has no default of its own (``None``: not given): the effective value
    comes from :func:`settings`, which lays the given flags over the settings models and their defaults."""
    p = argparse.ArgumentParser(prog="python -m tpuray.workloads.train", description=__doc__.split("\n\n")[0])
    where = p.add_argument_group("where")
    where.add_argument("--local", action="store_true", help="emulate the stack's slice on a local Ray cluster")
    where.add_argument(
        "--stack",
        help="stack name: reads Pulumi.<stack>.yaml from here or a parent directory (default with --local: dev)",
    )
    where.add_argument("--stack-file", type=Path, help="path of a Pulumi stack file (instead of --stack)")
    where.add_argument(
        "--workload",
        metavar="JSON",
        help="the stack's workload settings as JSON (camelCase keys, as in the stack file), instead of --stack: "
        "what the stack's RayJob passes",
    )
    where.add_argument("--address", help="Ray address (default: the cluster this job runs in)")
    where.add_argument(
        "--topology",
        help="slice shape GEN:TOPOLOGY[:MACHINE_TYPE], e.g. v5e:4x4 "
        "(default: the stack's workload pool, else the cluster's only slice shape)",
    )
    where.add_argument("--num-slices", type=int, help="data-parallel replicas, one whole slice each (default 1)")
    where.add_argument("--chips", type=int, help="total chips (a multiple of the slice's chips)")
    what = p.add_argument_group("what (overrides of the stack's workload section, or of --workload)")
    for flag in WORKLOAD_FLAGS:
        what.add_argument(
            flag.name, dest=flag.dest, metavar=flag.dest.upper(), help=_flag_help(flag, "the stack's, else ")
        )
    ck = p.add_argument_group("checkpoints (Ray Train's RunConfig(storage_path, name))")
    ck.add_argument(
        "--checkpoint-dir",
        help="Ray Train storage path: checkpoints go to <this>/<run name>/ and a run with the same name resumes "
        "from its newest readable one (default: on a cluster <checkpoints.mountPath>; locally a fresh temp "
        "dir); a gs:// URI works too",
    )
    run = p.add_argument_group("the run")
    for flag in RUN_FLAGS:
        run.add_argument(flag.name, dest=flag.dest, metavar=flag.dest.upper(), help=_flag_help(flag, ""))
    cost = p.add_argument_group("cost (the summary's $/h and tokens per dollar)")
    cost.add_argument(
        "--cost-json",
        type=Path,
        help="the stack plan's cost.json (tpuray plan): $/h = the job's pool's price per chip-hour x chips in use",
    )
    cost.add_argument("--usd-per-hour", type=float, help="$/h of the slices in use (instead of --cost-json)")
    return p


@dataclass(frozen=True)
class Settings:
    """What the trainer runs: the workload settings and the run's own, each validated by its model."""

    workload: WorkloadConfig
    run: RunSettings


def _given(args: argparse.Namespace, flags: Sequence[_Flag]) -> dict[str, Any]:
    """The flags the user gave, as a nested dict by alias (``{"model": {"dModel": "96"}}``)."""
    out: dict[str, Any] = {}
    for flag in flags:
        value = getattr(args, flag.dest, None)
        if value is not None:
            node = out
            for key in flag.path[:-1]:
                node = node.setdefault(key, {})
            node[flag.path[-1]] = value
    return out


def _overlay(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = _overlay(base.get(key) or {}, value) if isinstance(value, Mapping) else value
    return out


M = TypeVar("M", bound=BaseModel)


def _validated(
    model: type[M], base: Mapping[str, Any], args: argparse.Namespace, flags: Sequence[_Flag], where: str
) -> M:
    """``model`` from ``base`` with the given flags laid over it. A flag's text is parsed by the model (lax, as
    a command line is text); a problem names the flag, and the valid range where the model bounds the field."""
    given = _given(args, flags)
    by_path = {".".join(f.path): f for f in flags}

    def name(path: str, msg: str) -> tuple[str, str]:
        flag = by_path.get(path)
        if flag is None or getattr(args, flag.dest, None) is None:
            return f"{where}.{path}", msg
        rng = flag.valid_range()
        if msg.startswith("Input should be"):  # pydantic's own words: add the bounds and the value
            msg = f"{msg}{'; valid range: ' + rng if rng else ''}; got {getattr(args, flag.dest)!r}"
        return flag.name, msg

    return validated_as(model, _overlay(base, given), name, strict=False)


def settings(args: argparse.Namespace, stack: StackConfig | None = None) -> Settings:
    """The effective settings: the workload from ``--workload`` (on a cluster) or the stack file (``stack``),
    else the model's defaults, with the flags the user gave laid over it; checked before any cluster work."""
    exclusive_sources({"--workload": args.workload is not None, "--stack/--stack-file": stack is not None})
    if args.workload is not None:
        base = validated_as(
            WorkloadConfig,
            loads_json(args.workload, what="--workload"),
            lambda p, m: ("--workload" + ("" if p == "(root)" else f".{p}"), m),
        ).model_dump(by_alias=True)
    else:
        base = (stack.workload if stack else WorkloadConfig()).model_dump(by_alias=True)
    workload = _validated(WorkloadConfig, base, args, WORKLOAD_FLAGS, "workload")
    return Settings(workload, _validated(RunSettings, {}, args, RUN_FLAGS, "run"))


def checkpoint_dir_problem(path: str) -> str | None:
    """Why ``--checkpoint-dir`` cannot be a local Ray Train storage directory (a regular file, or below one), or
    None; a URI (``gs://...``) is left to its file system."""
    if "://" in path:
        return None
    p = Path(path).absolute()
    for at in (p, *p.parents):
        if at.exists():
            if not at.is_dir():
                which = "is" if at == p else f"is below {at}, which is"
                return f"{path} {which} a file, not a directory; give a directory (it is created if missing)"
            return None
    return None


def _job(s: Settings, tpu_slice: TpuSlice, local: bool, run_dir: str | None = None) -> GptJob:
    w, m = s.workload, s.workload.model
    shape = ModelShape(vocab_size=m.vocab_size, layers=m.layers, d_model=m.d_model, heads=m.heads, seq_len=w.seq_len)
    return GptJob(
        model=shape,
        steps=w.steps,
        batch_size_per_chip=w.batch_size_per_chip,
        learning_rate=w.learning_rate,
        checkpoint_every=w.checkpoint_every,
        slice_spec=str(tpu_slice),
        dataset=w.dataset,
        seed=s.run.seed,
        bf16=not local,
        log_every=s.run.log_every,
        cpu_threads=1 if local else None,
        run_dir=run_dir,
        run_name=s.run.run_name,
    )


def _nodes() -> list[dict[str, object]]:
    import ray

    return list(ray.nodes())  # type: ignore[no-untyped-call]


def _slices_for(tpu_slice: TpuSlice, args: argparse.Namespace) -> int:
    """Whole slices for the job, checked against the idle slices Ray can see (before Ray Train waits for them)."""
    from ray.util.tpu import get_num_ready_tpu_slices

    available = int(get_num_ready_tpu_slices(tpu_slice.topology, tpu_slice.ray_accelerator_type))
    if available == 0:
        raise PlacementError(
            f"--topology {tpu_slice}: the cluster has no idle {tpu_slice} slice ({tpu_slice.pod_type}); it has "
            f"{describe_slices(cluster_slices(_nodes()))}"
        )
    return slices_for_job(tpu_slice, args.chips, args.num_slices, available)


@dataclass(frozen=True)
class RunPrice:
    """What the slices of a run cost: per chip-hour (from the plan) or per hour in total (given), and how."""

    usd_per_chip_hour: float | None = None
    usd_per_hour: float | None = None
    capacity: str | None = None
    source: str = "unpriced (no --cost-json or --usd-per-hour)"

    def for_chips(self, chips: int) -> float | None:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        return None if self.usd_per_chip_hour is None else self.usd_per_chip_hour * chips


def run_price(args: argparse.Namespace, pool: str | None, capacity: str | None) -> RunPrice:
    """The run's price from ``--usd-per-hour`` or the plan's ``cost.json`` (checked before any cluster work)."""
    if args.usd_per_hour is not None:
        if not math.isfinite(args.usd_per_hour) or args.usd_per_hour <= 0:
            raise ValueError(f"--usd-per-hour: {args.usd_per_hour} must be a positive number of USD per hour")
        return RunPrice(usd_per_hour=args.usd_per_hour, capacity=capacity, source="--usd-per-hour")
    if args.cost_json is None:
        return RunPrice(capacity=capacity)
    per_chip, plan_capacity, source = slice_usd_per_hour(args.cost_json, pool, 1)
    return RunPrice(usd_per_chip_hour=per_chip, capacity=plan_capacity, source=source)


def _summary(
    result: Any,
    job: GptJob,
    tpu_slice: TpuSlice,
    num_slices: int,
    backend: str,
    emulated: bool,
    wall: float,
    price: RunPrice | None = None,
) -> dict[str, object]:
    if result.error is not None:
        raise result.error
    m = dict(result.metrics or {})
    losses = list(m.get("losses", []))
    # goodput over the run's whole log (every attempt, and earlier invocations of the same run name)
    goodput = compute_goodput(read_events(Path(job.run_dir) / EVENTS_FILE)).as_dict() if job.run_dir else None
    chips = num_slices * tpu_slice.chips
    tps = m.get("tokens_per_s")
    price = price or RunPrice()
    usd = price.for_chips(chips)
    return {
        "event": "summary",
        "backend": backend,
        "emulated": emulated,
        "slice": str(tpu_slice),
        "pod_type": tpu_slice.pod_type,
        "num_slices": num_slices,
        "chips": num_slices * tpu_slice.chips,
        "steps": job.steps,
        "final_step": m.get("step"),
        "restarts": len(m.get("resumes", [])),
        "resumed_from_steps": m.get("resumes", []),
        "drain_checkpoint_steps": m.get("drains", []),
        "loss_first": losses[0] if losses else None,
        "loss_final": losses[-1] if losses else None,
        "losses": losses,
        "step_time_s": m.get("step_time_s"),
        "tokens_per_s": m.get("tokens_per_s"),
        "mfu": m.get("mfu"),
        "tokens_per_s_per_chip": tps / chips if tps is not None else None,
        "capacity": price.capacity,
        "usd_per_hour": usd,
        "usd_source": price.source,
        "tokens_per_usd": tokens_per_usd(tps, usd) if tps is not None else None,
        "peak_bf16_tflops_per_chip": tpu_slice.spec.peak_bf16_tflops_per_chip,
        "model_params": job.model.params,
        "time_to_first_step_s": m.get("first_step_s"),
        "wall_s": wall,
        "params_identical": m.get("param_spread", 1.0) < 1e-12,
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "goodput": goodput,
        "compile_cache": m.get("compile_cache"),
        # sharded runs: the (data, fsdp, tensor) mesh and what one device holds, measured from its local shards
        "mesh": m.get("mesh"),
        "bytes_per_device": m.get("bytes_per_device"),
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    t0, wall0 = time.perf_counter(), time.time()
    stack: StackConfig | None = None
    if args.stack_file or args.stack or (args.local and not args.topology and args.workload is None):
        stack = load_stack_file(args.stack_file or find_stack_file(args.stack or "dev", Path.cwd()))
    s = settings(args, stack)  # every setting checked before any cluster work
    w = s.workload
    pool = stack.workload_pool() if stack else None
    tpu_slice = TpuSlice.parse(args.topology) if args.topology else (pool.tpu_slice if pool else None)
    if args.local and tpu_slice is None:
        raise PlacementError("--local needs a slice shape: --stack, --stack-file or --topology")
    problem = checkpoint_dir_problem(args.checkpoint_dir) if args.checkpoint_dir else None
    if problem:
        raise ValueError(f"--checkpoint-dir {problem}")
    if args.local:
        storage = args.checkpoint_dir or tempfile.mkdtemp(prefix="tpuray-ckpt-")
    else:
        mount = stack.checkpoints.mount_path if stack else "/checkpoints"
        storage = args.checkpoint_dir or mount  # Ray Train adds the run name: <mount>/<run name>/
    if "://" not in storage:
        storage = os.path.abspath(storage)
    # the goodput log lives in the run's directory, on a file system (a gs:// storage path has no appends)
    run_dir = os.path.join(storage, s.run.run_name) if "://" not in storage else None

    # Fail on a bad dataset before any cluster work.
    data = open_dataset(w.dataset, w.model.vocab_size, s.run.seed)
    price = run_price(args, pool.name if pool else None, pool.capacity.type if pool else None)

    emulate = 0
    if args.local:
        assert tpu_slice is not None
        # Emulate what the stack provisions (a job asking for more is refused like on the cluster, and before
        # the emulated cluster starts); without a stack, as many slices as the job asks for.
        emulate = (
            pool.slices
            if pool and not args.topology
            else max(args.num_slices or 1, -(-(args.chips or 0) // tpu_slice.chips))
        )
        slices_for_job(tpu_slice, args.chips, args.num_slices, emulate)
    fsdp, tensor = w.parallelism.fsdp, w.parallelism.tensor
    if tpu_slice is not None:  # before any cluster work where the slice is known
        require_entrypoint_sharding(w.backend, tpu_slice, args.num_slices or 1, fsdp, tensor)
    with connect(w.backend, tpu_slice, emulate=emulate, address=args.address):
        if run_dir is not None:
            record_job_event(run_dir, JOB_START, t=wall0)
        if tpu_slice is None:
            tpu_slice = slice_of_cluster(cluster_slices(_nodes()))
        num_slices = _slices_for(tpu_slice, args)
        job = _job(s, tpu_slice, bool(args.local), run_dir)
        if isinstance(data, TokenFile):
            data.check_fits(num_slices * tpu_slice.chips, job.model.seq_len)
        run_config = _run_config(s.run, storage)
        cache = _local_cache(args, storage)
        require_entrypoint_sharding(w.backend, tpu_slice, num_slices, fsdp, tensor)
        if fsdp * tensor > 1 and w.backend != "torch_tpu":  # PyTorch/XLA SPMD: one worker driving the host's chips
            config = {"job": job, "fsdp": fsdp, "tensor": tensor}
            pjrt = "CPU" if args.local else None
            job_trainer = trainer(train_gpt_sharded, config, tpu_slice, 1, run_config, spmd=True, pjrt_device=pjrt)
        else:
            bounds = elastic_bounds(w, num_slices)  # whole slices; FSDP2's data axis grows and shrinks with them
            job = dataclasses.replace(job, elastic=bounds)
            most, least = (bounds[1], bounds[0]) if bounds else (num_slices, None)
            if fsdp * tensor > 1:  # TorchTPU's FSDP2 and DTensor, one worker per device
                config = {"job": job, "fsdp": fsdp, "tensor": tensor, "num_slices": most}
                job_trainer = trainer(
                    train_gpt_fsdp2, config, tpu_slice, most, run_config, backend="torch_tpu", min_slices=least
                )
            else:
                job_trainer = trainer(
                    train_gpt,
                    {"job": job},
                    tpu_slice,
                    most,
                    run_config,
                    backend=w.backend,
                    compile_cache_dir=cache,
                    min_slices=least,
                )
        result = job_trainer.fit()
        if run_dir is not None:
            record_job_event(run_dir, JOB_END)
        wall = time.perf_counter() - t0
        return _summary(result, job, tpu_slice, num_slices, w.backend, bool(args.local), wall, price)


def elastic_bounds(w: WorkloadConfig, num_slices: int) -> tuple[int, int] | None:
    """The job's ``(min, max)`` slices from ``workload.elastic`` on the ``num_slices`` slices it runs on (the most
    it may hold); None for a fixed-size job, said on stderr where the stack asked for elasticity but the job runs
    on no more slices than its minimum."""
    if w.elastic is None:
        return None
    lo, hi = w.elastic.bounds(num_slices)
    hi = min(hi, num_slices)
    if lo >= hi:
        print(
            f"note: workload.elastic.minSlices={lo} but the job runs on {num_slices} slice(s): it trains at a fixed "
            "size, with nothing to shrink to",
            file=sys.stderr,
        )
        return None
    return lo, hi


def _local_cache(args: argparse.Namespace, storage: str) -> str | None:
    """The emulated slice's compile cache: ``<storage>/compile-cache``, as the stack puts it beside the checkpoints
    (on the cluster the workers read the stack's ``TPURAY_COMPILE_CACHE_DIR``)."""
    return os.path.join(storage, "compile-cache") if args.local and "://" not in storage else None


def _run_config(run: RunSettings, storage: str) -> Any:
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig

    n = run.max_restarts
    return RunConfig(
        name=run.run_name,
        storage_path=storage,
        checkpoint_config=CheckpointConfig(num_to_keep=3),
        # Ray Train retries some failures forever by default (controller errors, preemptions): bound them all.
        failure_config=FailureConfig(max_failures=n, controller_failure_limit=n, max_preemption_failures=n),
        # Ray Train's own INFO lines (each report's full metrics, each checkpoint's path) drown the progress
        # lines; its warnings still show, and its log files keep everything.
        logging_config=LoggingConfig(log_level="WARNING"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = run(args)
    except (
        ConfigError,
        TopologyError,
        DatasetError,
        PlacementError,
        CheckpointError,
        RuntimeMismatch,
        ValueError,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # Ray Train wraps a worker's error: report the user-facing cause if there is one
        cause = _user_cause(e)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        return 2
    print(json.dumps(summary), flush=True)
    return 0


def _user_cause(e: BaseException) -> BaseException | None:
    """The dataset/checkpoint/placement error inside an error Ray Train raised for a worker, if any."""
    seen: set[int] = set()
    stack: list[BaseException] = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, DatasetError | CheckpointError | PlacementError | RuntimeMismatch):
            return x
        stack += [y for y in (x.__cause__, x.__context__, getattr(x, "cause", None)) if isinstance(y, BaseException)]
        stack += [y for y in getattr(x, "worker_failures", {}).values() if isinstance(y, BaseException)]
    return None


if __name__ == "__main__":
    sys.exit(main())
