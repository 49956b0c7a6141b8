"""Two-process runs on emulated chips: a spawned process per chip, each joined to the emulated slice's process
group with Ray Train's portable API installed, as the backend leaves a worker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tpuray.workloads.xla import portable


@contextmanager
def emulated_chip(rank: int, world: int, port: int) -> Iterator[Any]:
    """This spawned process as chip ``rank`` of ``world`` on the emulated slice: the slice's process group and Ray
    Train's portable API installed, as the backend leaves them; yields the chip's XLA device."""
    import os

    os.environ["PJRT_DEVICE"] = "CPU"
    import torch
    import torch.distributed as dist
    import torch_xla

    torch.set_num_threads(1)
    dist.init_process_group(
        portable.register_emulated_backend(), init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    portable.install("CPU")
    try:
        yield torch_xla.device()
    finally:
        portable.uninstall()
        dist.destroy_process_group()


def on_two_chips(target: Callable[..., None], *runs: tuple[Any, ...]) -> list[Any]:
    """Each run of ``runs`` on two emulated chips of its own, all at once: ``target(rank, 2, port, *run, out)`` in a
    spawned process per chip; returns what every chip put on ``out``."""
    return on_chips(2, target, *runs)


def on_chips(chips: int, target: Callable[..., None], *runs: tuple[Any, ...]) -> list[Any]:
    """:func:`on_two_chips` with ``chips`` chips a run (one: a fresh process whose autograd engine starts with the
    XLA device, which one that already ran a CPU backward never gets)."""
    import multiprocessing as mp

    from tpuray.workloads.emulation.cluster import _free_port

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = []
    for run in runs:
        port = _free_port()
        procs += [ctx.Process(target=target, args=(r, chips, port, *run, out)) for r in range(chips)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return results
