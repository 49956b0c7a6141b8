"""Ray Data's torch batches on an XLA chip: built on the host in Ray's prefetch thread, moved to the chip on the
thread that reads them.

Ray 2.60 moves a batch to its device in the batch-prefetch thread, and a torch_xla tensor written there while the
main thread cuts the graph (``torch_xla.sync()``: the optimizer step's, the loader's, a gloo collective's) fails
with ``Check failed: data()->tensor_data``; :func:`test_a_cut_on_the_main_thread_breaks_an_xla_tensor_built_beside_it`
shows that condition, the others that tpuray's portable path never creates it. These run in the driver, on the
shared emulated cluster's Ray Data (no cluster of their own).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from tpuray.workloads.xla import portable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def chip(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process as an emulated chip's worker (the portable API installed, as the backend leaves it); yields a
    list of the threads that built an XLA batch in Ray's finalize function."""
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    from ray.data._internal.utils.torch_utils import DefaultFinalizeFn

    built_on: list[int] = []
    original = DefaultFinalizeFn.__call__

    def spy(self: Any, batch: Any) -> Any:
        done = original(self, batch)
        if any(t.device.type == "xla" for t in done.data.values()):
            built_on.append(threading.get_ident())
        return done

    monkeypatch.setattr(DefaultFinalizeFn, "__call__", spy)
    portable.install("CPU")
    try:
        yield built_on
    finally:
        portable.uninstall()


def test_a_cut_on_the_main_thread_breaks_an_xla_tensor_built_beside_it() -> None:
    """The failing condition, without Ray's pipeline: Ray's own concat_tensors_to_device in a thread, beside a main
    thread that cuts the graph. (Beside a main thread that only reads its own tensors, it does not fail.)"""
    import os

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    from ray.data.util.torch_utils import concat_tensors_to_device

    dev = torch_xla.device()
    errors: list[str] = []
    done = threading.Event()

    def prefetch() -> None:
        try:
            for _ in range(5000):
                concat_tensors_to_device([torch.randn(8, 4) for _ in range(3)], dev)
        except RuntimeError as e:
            errors.append(str(e))
        finally:
            done.set()

    t = threading.Thread(target=prefetch)
    t.start()
    while not done.is_set():
        torch_xla.sync()
    t.join()
    assert errors and "data()->tensor_data" in errors[0]


def test_ray_data_batches_reach_the_chip_on_the_reading_thread(emulated_slices: None, chip: list[int]) -> None:
    import torch
    import torch_xla

    ds = ray.data.range(64, override_num_blocks=4)  # batches of 12 span blocks: Ray concatenates on the device
    it = ds.iterator()
    for epoch in range(2):  # the iterable is read twice, as an epoch loop does
        seen: list[int] = []
        for batch in it.iter_torch_batches(batch_size=12):  # the default device: get_device(), the chip
            assert batch["id"].device == torch_xla.device(), epoch
            torch_xla.sync()  # the main thread cuts the graph while Ray prefetches the next batch
            seen.extend(batch["id"].cpu().tolist())
        assert sorted(seen) == list(range(64))
    assert set(chip) == {threading.get_ident()}  # every XLA batch built here, none in Ray's prefetch thread
    on_cpu = next(iter(it.iter_torch_batches(batch_size=12, device="cpu")))
    assert on_cpu["id"].device == torch.device("cpu")
    explicit = next(iter(it.iter_torch_batches(batch_size=12, device=torch_xla.device())))
    assert explicit["id"].device == torch_xla.device()
    numpy = next(iter(it.iter_batches(batch_size=12)))
    assert type(numpy["id"]).__name__ == "ndarray"
