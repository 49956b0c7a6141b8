"""The built-in GPT's elastic training math (``gpt/elastic.py``, ``gpt/data.py``'s global rows): the global batch
kept at any live size, the data order independent of the resizes, and a run through resizes training the same model
as an unbroken one. Workers are simulated in one process: each computes its gradient, the runtime's mean averages."""

from __future__ import annotations

import contextlib
import copy
import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.workloads.gpt.data import SyntheticTokens, TokenBatches, TokenFile
from tpuray.workloads.gpt.elastic import ElasticStep, accumulate, elastic_step, record_size
from tpuray.workloads.gpt.metrics import ModelShape
from tpuray.workloads.gpt.model import GPT
from tpuray.workloads.signals.goodput import GoodputRecorder, compute_goodput

CHIPS = 2  # workers per simulated slice: small worlds keep the simulation quick
NULL = contextlib.nullcontext


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The simulated workers share the machine's cores: one torch thread each is quicker than contention."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def plan(rank: int, slices: int, max_slices: int = 3, b: int = 2) -> ElasticStep:
    return ElasticStep(b * CHIPS * max_slices, b, rank, CHIPS * slices, slices, max_slices)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6).flatmap(lambda m: st.tuples(st.integers(1, m), st.just(m), st.integers(1, 5))))
def test_the_live_workers_rows_cover_the_global_batch_once_in_per_chip_forwards(case: tuple[int, int, int]) -> None:
    slices, most, b = case
    plans = [plan(r, slices, most, b) for r in range(CHIPS * slices)]
    rows = [i for p in plans for lo, hi in p.micro_batches() for i in range(lo, hi)]
    assert rows == list(range(b * CHIPS * most))  # every row once, in order
    assert all(hi - lo <= b for p in plans for lo, hi in p.micro_batches())  # a chip's batch never grows
    assert max(len(p.micro_batches()) for p in plans) == plans[0].accumulation
    assert plans[0].accumulation == (1 if slices == most else plans[0].accumulation)


def _token_file(d: str, n_tokens: int) -> TokenFile:
    p = Path(d) / "t.npy"
    np.save(p, np.arange(n_tokens, dtype=np.int32))  # distinct ids: a row's first token says which window it is
    return TokenFile(p, vocab_size=n_tokens)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 3),
    st.lists(st.integers(1, 3), min_size=1, max_size=12),
    st.integers(1, 3),
    st.sampled_from([3, 5, 8]),
)
def test_an_epoch_reads_every_sequence_once_whatever_the_resizes(most: int, sizes: list[int], b: int, seq: int) -> None:
    g = b * CHIPS * most
    steps = 6
    with tempfile.TemporaryDirectory() as d:
        f = _token_file(d, g * steps * seq + 1)  # exactly one epoch of `steps` global batches
        assert f.sequences(seq) == g * steps
        seen: list[int] = []
        for step in range(steps):
            live = min(most, sizes[step % len(sizes)])
            for r in range(CHIPS * live):
                for lo, hi in plan(r, live, most, b).micro_batches():
                    seen += [int(x) // seq for x in f.rows(step, lo, hi, g, seq)[:, 0]]
        assert sorted(seen) == list(range(g * steps))  # no window twice, none skipped
        # the next epoch is another order of the same windows
        nxt = [int(x) // seq for x in f.rows(steps, 0, g, g, seq)[:, 0]]
        assert len(set(nxt)) == g


@pytest.mark.parametrize("data", [SyntheticTokens(64, seed=5), "file"])
def test_a_steps_rows_do_not_depend_on_how_they_are_split(data: TokenBatches | str) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = _token_file(d, 2000) if data == "file" else data
        assert not isinstance(src, str)
        whole = src.rows(7, 0, 24, 24, 8)
        for parts in ([0, 24], [0, 5, 12, 24], [0, 1, 2, 3, 24]):
            got = np.concatenate([src.rows(7, a, z, 24, 8) for a, z in itertools.pairwise(parts)])
            assert np.array_equal(got, whole)
        assert not np.array_equal(src.rows(8, 0, 24, 24, 8), whole)


SHAPE = ModelShape(vocab_size=64, layers=1, d_model=16, heads=2, seq_len=8)


def _step_grads(model: GPT, data: TokenBatches, step: int, slices: int) -> tuple[list[torch.Tensor], float]:
    """One optimizer step's averaged gradient and loss over the simulated live workers."""
    grads: list[list[torch.Tensor]] = []
    losses = []
    for r in range(CHIPS * slices):
        m = copy.deepcopy(model)
        loss = accumulate(plan(r, slices), m, data, step, SHAPE.seq_len, "cpu", NULL(), NULL)
        grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in m.parameters()])
        losses.append(float(loss))
    mean = [torch.stack(g).mean(0) for g in zip(*grads, strict=True)]  # the runtime's gradient mean
    return mean, sum(losses) / len(losses)  # and its loss mean


def _train(sizes: list[int], steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = GPT(SHAPE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = SyntheticTokens(SHAPE.vocab_size, seed=1)
    history = []
    for step in range(steps):
        grads, loss = _step_grads(model, data, step, sizes[step])
        for p, g in zip(model.parameters(), grads, strict=True):
            p.grad = g
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append(loss)
    return history


def test_a_run_through_resizes_trains_as_an_unbroken_one() -> None:
    """Three slices, one lost for two steps, then back: each step's loss within 1e-4 relative of the unbroken
    three-slice run's (only the order of float sums differs)."""
    unbroken = _train([3] * 6)
    resized = _train([3, 3, 2, 2, 1, 3])
    assert unbroken[-1] < unbroken[0]  # it trains
    for a, b in zip(unbroken, resized, strict=True):
        assert abs(a - b) <= 1e-4 * abs(a)


@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("slices", [1, 2, 3])
def test_the_workers_mean_loss_is_the_global_batchs_at_any_size(slices: int, b: int) -> None:
    """Also where the rows do not split evenly (1 row per chip at 3 slices is 1.5 per worker at 2) and a
    worker's forwards differ in size (3 rows per chip at 3 slices is 4.5 per worker at 2: forwards of 3 and 2)."""
    torch.manual_seed(0)
    model = GPT(SHAPE)
    data = SyntheticTokens(SHAPE.vocab_size, seed=1)
    g = b * CHIPS * 3
    with torch.no_grad():
        global_mean = float(model.loss(torch.from_numpy(data.rows(0, 0, g, g, 8))))
    losses = [
        accumulate(plan(r, slices, b=b), copy.deepcopy(model), data, 0, 8, "cpu", NULL(), NULL)
        for r in range(CHIPS * slices)
    ]
    assert float(torch.stack(losses).mean()) == pytest.approx(global_mean, rel=1e-5)


@pytest.mark.parametrize("b", [1, 3])
def test_in_lockstep_every_worker_runs_as_many_forwards_and_the_padding_weighs_nothing(b: int) -> None:
    """FSDP2's forwards and backwards are collectives: 1 row per chip at 3 slices is 1.5 per worker at 2 (forwards
    of 1 and 2), 3 rows per chip 4.5 (forwards 3+1 and 3+2); a worker with fewer runs its first one again, weighted
    0, so its loss and gradient are those of its own rows."""
    data = SyntheticTokens(SHAPE.vocab_size, seed=1)
    for r in range(CHIPS * 2):
        p = plan(r, 2, b=b)
        torch.manual_seed(0)
        loose = GPT(SHAPE)
        torch.manual_seed(0)
        tight = Counted(SHAPE)
        want = accumulate(p, loose, data, 0, 8, "cpu", NULL(), NULL)
        got = accumulate(p, tight, data, 0, 8, "cpu", NULL(), NULL, lockstep=True)
        assert len(tight.forwards) == p.accumulation == 2 and float(got) == float(want)
        for a, z in zip(loose.parameters(), tight.parameters(), strict=True):
            assert a.grad is not None and z.grad is not None and torch.equal(a.grad, z.grad)


class Counted(GPT):
    """The GPT, counting its forwards."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        self.forwards: list[int] = []

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        self.forwards.append(len(tokens))
        return super().loss(tokens)


def test_the_live_size_comes_from_the_worker_group() -> None:
    c = SimpleNamespace(name="xla", world_size=16, rank=3)
    p = elastic_step((1, 3), 2, "v5p:2x2x2", c)
    assert p is not None and (p.slices, p.max_slices, p.global_batch, p.world) == (2, 3, 48, 16)
    assert elastic_step(None, 2, "v5p:2x2x2", c) is None
    with pytest.raises(ValueError, match="not whole v5p:2x2x2 slices between 1 and 3"):
        elastic_step((1, 3), 2, "v5p:2x2x2", SimpleNamespace(name="xla", world_size=12, rank=0))


def test_torch_tpus_sharded_job_takes_the_live_slices_as_its_data_axis() -> None:
    from tpuray.workloads.gpt.fsdp2_loop import live_plan
    from tpuray.workloads.gpt.loop import GptJob
    from tpuray.workloads.sharding.mesh import MeshError

    job = GptJob(SHAPE, 4, 2, 1e-2, 2, "v5e:2x2", elastic=(1, 3))
    for slices in (1, 2, 3):
        mesh, p = live_plan(job, 4, 1, 3, SimpleNamespace(name="torch_tpu", world_size=4 * slices, rank=1))
        assert mesh.shape == (slices, 4, 1) and mesh.dcn_shape == (slices, 1, 1)
        assert p is not None and (p.slices, p.global_batch, p.world) == (slices, 24, 4 * slices)
    fixed, none = live_plan(GptJob(SHAPE, 4, 2, 1e-2, 2, "v5e:2x2"), 2, 2, 1, SimpleNamespace())
    assert fixed.shape == (1, 2, 2) and none is None
    with pytest.raises(MeshError, match=r"workload\.parallelism\.tensor=2 with workload\.elastic"):
        live_plan(job, 2, 2, 3, SimpleNamespace(name="torch_tpu", world_size=8, rank=0))


def test_each_resize_is_in_the_events_and_the_goodput_breakdown(tmp_path: Path) -> None:
    """Attempt 1 on 3 slices, attempt 2 on 2 (a slice lost), attempt 3 back on 3: the resizes with from, to, step
    and cause; the steps at 2 slices productive, worth 2/3 of their time at full size."""
    t = 1000.0
    events: list[dict[str, object]] = [{"e": "job_start", "t": t}]
    for slices, start, before in ((3, 0, None), (2, 4, 3), (3, 8, 2)):
        rec = GoodputRecorder(tmp_path, started=t)
        record_size(rec, plan(0, slices), None if before is None else {"slices": before}, start)
        rec.prep_done(start)
        for n in range(start, start + 4):
            with rec.step(n):
                pass
    events = [*events]
    from tpuray.workloads.signals.goodput import EVENTS_FILE, read_events

    logged = read_events(tmp_path / EVENTS_FILE)
    resizes = [(e["from"], e["to"], e["step"], e["cause"]) for e in logged if e["e"] == "resize"]
    assert resizes == [
        (3, 2, 4, "slice lost (preempted, drained or failed)"),
        (2, 3, 8, "slice returned"),
    ]
    gp = compute_goodput(logged)
    assert set(gp.productive_s_by_slices) == {2, 3} and gp.max_slices == 3
    assert sum(gp.productive_s_by_slices.values()) == pytest.approx(gp.productive_s)
    equivalent = gp.productive_s_by_slices[3] + gp.productive_s_by_slices[2] * 2 / 3
    assert gp.full_size_equivalent_s == pytest.approx(equivalent)
    d = gp.as_dict()
    assert [(r["from"], r["to"]) for r in d["resizes"]] == [(3, 2), (2, 3)]
    assert "resizes" not in compute_goodput([e for e in logged if e["e"] not in ("size", "resize")]).as_dict()


@pytest.mark.parametrize(
    ("elastic", "num_slices", "want"),
    [
        (None, 3, None),
        ({"minSlices": 1}, 3, (1, 3)),
        ({"minSlices": 1, "maxSlices": 2}, 3, (1, 2)),
        ({"minSlices": 2}, 4, (2, 4)),
        ({"minSlices": 1}, 1, None),
        ({"minSlices": 2, "maxSlices": 3}, 2, None),
    ],
)
def test_the_entrypoint_takes_the_stacks_bounds_on_the_slices_it_runs_on(
    elastic: dict[str, int] | None, num_slices: int, want: tuple[int, int] | None, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpuray.components.config import WorkloadConfig
    from tpuray.workloads.gpt.cli import elastic_bounds

    w = WorkloadConfig.model_validate({"elastic": elastic} if elastic else {}, by_name=False)
    assert elastic_bounds(w, num_slices) == want
    said = capsys.readouterr().err
    assert ("trains at a fixed size" in said) == (elastic is not None and want is None)


def test_throughput_at_a_reduced_size_counts_the_kept_global_batch() -> None:
    """Below the most slices each chip takes more of the kept global batch a step: tokens/s counts those rows, so a
    run that keeps its step time keeps its tokens/s, rather than dropping with the chips."""
    from tpuray.components.catalog.topology import TpuSlice
    from tpuray.workloads.gpt.metrics import speed_metrics

    shape, s = ModelShape(vocab_size=64, layers=1, d_model=16, heads=2, seq_len=8), TpuSlice.parse("v5p:2x2x2")
    full, reduced = plan(0, 3), plan(0, 1)
    assert reduced.rows_per_worker * reduced.world == full.global_batch == full.rows_per_worker * full.world
    at = {p.slices: speed_metrics(shape, s, p.world, p.rows_per_worker, 0.5, False) for p in (full, reduced)}
    assert at[1]["tokens_per_s"] == at[3]["tokens_per_s"] == full.global_batch * shape.seq_len / 0.5
