"""``python -m tpuray.workloads.train``: train a small GPT with one Ray worker per TPU chip.

On a cluster (the RayJob entrypoint) it joins the running Ray cluster and finds the TPU slices from Ray's node
labels; with ``--local`` it first starts a local Ray cluster that emulates the stack's slice (XLA on CPU,
gloo gradient averaging). Prints progress on stderr and one JSON summary line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from tpuray.components.config import (
    ConfigError,
    ModelConfig,
    StackConfig,
    WorkloadConfig,
    load_stack_file,
    problems,
)
from tpuray.components.topology import TopologyError, TpuSlice
from tpuray.workloads.checkpoint import CheckpointError
from tpuray.workloads.data import DatasetError, TokenFile, open_dataset
from tpuray.workloads.job import JobSpec
from tpuray.workloads.metrics import ModelShape
from tpuray.workloads.placement import PlacementError, SliceInfo

__all__ = ["build_parser", "main", "slice_from_cluster"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tpuray.workloads.train", description=__doc__.split("\n\n")[0])
    where = p.add_argument_group("where")
    where.add_argument("--local", action="store_true", help="emulate the stack's slice on a local Ray cluster")
    where.add_argument(
        "--stack",
        help="stack name: reads Pulumi.<stack>.yaml from here or a parent directory (default with --local: dev)",
    )
    where.add_argument("--stack-file", type=Path, help="path of a Pulumi stack file (instead of --stack)")
    where.add_argument("--address", help="Ray address (default: the cluster this job runs in)")
    where.add_argument(
        "--topology",
        help="slice shape GEN:TOPOLOGY[:MACHINE_TYPE], e.g. v5e:4x4 "
        "(default: the stack's workload pool, else the cluster's only slice shape)",
    )
    where.add_argument("--num-slices", type=int, help="data-parallel replicas, one whole slice each (default 1)")
    where.add_argument("--chips", type=int, help="total chips (a multiple of the slice's chips)")
    what = p.add_argument_group("what (defaults: the stack's workload section)")
    what.add_argument("--steps", type=int)
    what.add_argument("--batch-size-per-chip", type=int)
    what.add_argument("--seq-len", type=int)
    what.add_argument("--learning-rate", type=float)
    what.add_argument("--vocab-size", type=int, help="model: vocabulary size")
    what.add_argument("--layers", type=int, help="model: decoder layers")
    what.add_argument("--d-model", type=int, help="model: width")
    what.add_argument("--heads", type=int, help="model: attention heads (must divide --d-model)")
    what.add_argument("--dataset", help="tokenised file (.bin uint16, .npy, or whitespace-separated ids)")
    what.add_argument("--seed", type=int, default=0)
    what.add_argument("--backend", choices=["xla", "torch_tpu"])
    ck = p.add_argument_group("checkpoints")
    ck.add_argument(
        "--checkpoint-dir",
        help="resume from / save to this directory (default: on a cluster "
        "<checkpoints.mountPath>/<run name>; locally a fresh temp dir)",
    )
    ck.add_argument("--checkpoint-every", type=int)
    ck.add_argument("--run-name", default="train")
    ck.add_argument("--max-restarts", type=int, default=3, help="worker deaths survived per job")
    p.add_argument("--log-every", type=int, default=10, help="steps between progress lines")
    p.add_argument("--fail-at-step", type=int, help=argparse.SUPPRESS)  # fault injection for tests
    p.add_argument("--fail-rank", type=int, default=1, help=argparse.SUPPRESS)
    return p


def _find_stack_file(stack: str, start: Path) -> Path:
    name = f"Pulumi.{stack}.yaml"
    for d in (start, *start.parents):
        if (d / name).is_file():
            return d / name
    raise ConfigError([("--stack", f"no {name} in {start} or its parents; pass --stack-file")])


def slice_from_cluster(slices: Sequence[SliceInfo]) -> TpuSlice:
    """The slice shape of a cluster that has exactly one shape (from Ray's pod type and topology labels)."""
    shapes = {(s.pod_type, s.topology, s.chips // max(1, len(s.worker_ids))) for s in slices}
    if len(shapes) != 1:
        from tpuray.workloads.placement import describe_slices

        raise PlacementError(
            f"cannot choose a slice shape: the cluster has {describe_slices(slices)}; pass --topology GEN:TOPOLOGY"
        )
    pod_type, topology, per_host = next(iter(shapes))
    shape = TpuSlice.parse_pod_type(pod_type, topology)
    machine = next(m for m, c in shape.spec.machine_types.items() if c == per_host)
    return TpuSlice.parse(shape.generation, topology, machine)


def _model_size(args: argparse.Namespace, w: WorkloadConfig) -> ModelConfig:
    """The stack's model sizes with any command-line overrides, validated by the config model."""
    overrides = {k: getattr(args, k) for k in ("vocab_size", "layers", "d_model", "heads") if getattr(args, k)}
    try:
        return ModelConfig.model_validate({**w.model.model_dump(), **overrides})
    except ValidationError as e:
        # name the flag ("--d-model") where the config model says "dModel"
        raise ConfigError(
            [("--" + re.sub(r"([A-Z])", r"-\1", path).lower().replace("_", "-"), msg) for path, msg in problems(e)]
        ) from None


def _spec(args: argparse.Namespace, w: WorkloadConfig, tpu_slice: TpuSlice, ckpt: str | None) -> JobSpec:
    from tpuray.workloads.emulation import LOCAL_WORKER_ENV

    m = _model_size(args, w)
    shape = ModelShape(
        vocab_size=m.vocab_size, layers=m.layers, d_model=m.d_model, heads=m.heads, seq_len=args.seq_len or w.seq_len
    )
    return JobSpec(
        slice_spec=str(tpu_slice),
        model=shape,
        steps=args.steps or w.steps,
        batch_size_per_chip=args.batch_size_per_chip or w.batch_size_per_chip,
        learning_rate=args.learning_rate or w.learning_rate,
        checkpoint_every=args.checkpoint_every or w.checkpoint_every,
        checkpoint_dir=ckpt,
        dataset=args.dataset if args.dataset is not None else w.dataset,
        seed=args.seed,
        backend=args.backend or w.backend,
        collective="gloo" if args.local else "xla",
        bf16=not args.local,
        log_every=args.log_every,
        fail_at_step=args.fail_at_step,
        fail_rank=args.fail_rank,
        cpu_threads=1 if args.local else None,
        extra_env=dict(LOCAL_WORKER_ENV) if args.local else {},
    )


def run(args: argparse.Namespace) -> dict[str, object]:
    stack: StackConfig | None = None
    if args.stack_file or args.stack or (args.local and not args.topology):
        stack = load_stack_file(args.stack_file or _find_stack_file(args.stack or "dev", Path.cwd()))
    w = stack.workload if stack else WorkloadConfig()
    pool = stack.workload_pool() if stack else None
    tpu_slice = TpuSlice.parse(args.topology) if args.topology else (pool.tpu_slice if pool else None)
    if args.local and tpu_slice is None:
        raise PlacementError("--local needs a slice shape: --stack, --stack-file or --topology")
    if args.local:
        ckpt = args.checkpoint_dir or tempfile.mkdtemp(prefix="tpuray-ckpt-")
    else:
        mount = stack.checkpoints.mount_path if stack else "/checkpoints"
        ckpt = args.checkpoint_dir or os.path.join(mount, args.run_name)

    # Fail on a bad dataset before any cluster work.
    dataset = args.dataset if args.dataset is not None else w.dataset
    data = open_dataset(dataset, _model_size(args, w).vocab_size, args.seed)

    if (args.backend or w.backend) == "torch_tpu":
        from tpuray.workloads.torch_tpu import run_torch_tpu

        if args.local:
            raise PlacementError("the torch_tpu backend needs real TPUs (torch_tpu has no CPU emulation)")
        from tpuray.workloads.driver import connect

        connect(args.address)
        assert tpu_slice is not None
        return run_torch_tpu(_spec(args, w, tpu_slice, ckpt), num_slices=args.num_slices or 1)

    from tpuray.workloads.driver import connect, run_job
    from tpuray.workloads.report import Progress

    cluster = None
    try:
        if args.local:
            from tpuray.workloads.emulation import EmulatedCluster

            assert tpu_slice is not None
            # Emulate what the stack provisions (a job asking for more is refused like on the cluster);
            # without a stack, as many slices as the job asks for.
            emulate = (
                pool.slices
                if pool and not args.topology
                else max(args.num_slices or 1, -(-(args.chips or 0) // tpu_slice.chips))
            )
            cluster = EmulatedCluster(tpu_slice, slices=emulate).__enter__()
            connect(cluster.address)
        else:
            connect(args.address)
        if tpu_slice is None:
            from tpuray.workloads.group import nodes
            from tpuray.workloads.placement import cluster_slices

            tpu_slice = slice_from_cluster(cluster_slices(nodes()))
        spec = _spec(args, w, tpu_slice, ckpt)
        if isinstance(data, TokenFile):
            n = args.chips or (args.num_slices or 1) * tpu_slice.chips
            data.check_fits(n, spec.model.seq_len)
        return run_job(
            spec,
            chips=args.chips,
            num_slices=args.num_slices,
            max_restarts=args.max_restarts,
            progress=Progress(spec.steps),
            emulated=bool(args.local),
        )
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = run(args)
    except (ConfigError, TopologyError, DatasetError, PlacementError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
