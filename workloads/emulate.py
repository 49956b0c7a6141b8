"""``python -m tpuray.workloads.emulate (--stack dev | --topology T) -- CMD ...``: run any command against a
local Ray cluster that emulates TPU slices on CPU.

Starts the cluster (one Ray node per emulated TPU host, as :class:`~tpuray.workloads.emulation.cluster.EmulatedCluster`
builds it), runs CMD with ``RAY_ADDRESS`` pointing at it, and tears everything down whatever CMD does (exits,
fails, or is interrupted). Exits with CMD's exit code; 2 for a bad flag or stack.

On a ``torch_tpu`` stack (or ``--backend torch_tpu``) CMD and the head (where a job submitted through Ray's job API
runs its driver) get ``RAY_TRAIN_CALLBACKS`` naming TorchTPU's env callback, as the stack's Ray pods do, so a script
written against Ray's own TorchTPU API runs unchanged, on the stand-in
(:mod:`tpuray.workloads.emulation.torch_tpu_standin`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from tpuray.components.catalog.names import RAY_TRAIN_CALLBACKS_ENV, TORCH_TPU_ENV_CALLBACK
from tpuray.components.catalog.runtimes import BACKENDS, RuntimeBackend
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.components.config import ConfigError, find_stack_file, load_stack_file

__all__ = ["build_parser", "main", "runtime_env"]


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse names the flag in its error)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tpuray.workloads.emulate",
        description=__doc__.split("\n\n")[0],
        usage=(
            "%(prog)s (--stack NAME | --stack-file FILE | --topology GEN:TOPOLOGY) [--num-slices N] "
            "[--backend {xla,torch_tpu}] -- CMD ..."
        ),
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="emulate the workload pool of Pulumi.<stack>.yaml (here or a parent dir)")
    where.add_argument("--stack-file", type=Path, help="path of a Pulumi stack file")
    where.add_argument("--topology", help="slice shape GEN:TOPOLOGY[:MACHINE_TYPE], e.g. v5p:2x2x2")
    p.add_argument("--num-slices", type=_at_least_one, help="emulated slices (default: the stack's pool, else 1)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="the runtime the command trains with (default: the stack's workload.backend, else xla)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    return p


def _stack_file(args: argparse.Namespace) -> Path:
    return Path(args.stack_file) if args.stack_file else find_stack_file(args.stack, Path.cwd())


def _shape(args: argparse.Namespace) -> tuple[TpuSlice, int, RuntimeBackend]:
    backend: RuntimeBackend = "xla"
    if args.topology:
        s, n = TpuSlice.parse(args.topology), 1
    else:
        stack = load_stack_file(_stack_file(args))
        pool = stack.workload_pool()
        s, n, backend = pool.tpu_slice, pool.slices, stack.workload.backend
    return s, args.num_slices if args.num_slices is not None else n, args.backend or backend


def runtime_env(backend: RuntimeBackend) -> dict[str, str]:
    """What the stack's Ray pods of ``backend`` set for the process that builds a trainer (the planner's values)."""
    return {RAY_TRAIN_CALLBACKS_ENV: TORCH_TPU_ENV_CALLBACK} if backend == "torch_tpu" else {}


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        p.error("give the command to run after --, e.g. -- python train.py")
    try:
        tpu_slice, n, backend = _shape(args)
    except (ConfigError, TopologyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from tpuray.workloads.emulation.cluster import HeadNode, emulate

    env = runtime_env(backend)

    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)  # the command decides how to stop; teardown follows when it exits
        else:
            raise KeyboardInterrupt

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with emulate(tpu_slice, n, head=HeadNode(env=env)) as cluster:
            print(
                f"emulating {n} x {tpu_slice} ({tpu_slice.pod_type}, {tpu_slice.chips} chips each, {backend}) at "
                f"{cluster.address}",
                file=sys.stderr,
                flush=True,
            )
            try:
                child = subprocess.Popen(command, env={**os.environ, **env})
            except OSError as e:
                print(f"error: cannot run {command[0]!r}: {e}", file=sys.stderr)
                return 127
            return child.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
