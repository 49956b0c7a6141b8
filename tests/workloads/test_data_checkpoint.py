"""Data sharding and checkpoint files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.workloads import checkpoint
from tpuray.workloads.data import DatasetError, SyntheticTokens, TokenFile, open_dataset


@given(st.integers(2, 512), st.integers(0, 100), st.integers(0, 7), st.integers(1, 8))
def test_synthetic_batches_are_deterministic_per_step_and_rank(vocab: int, step: int, rank: int, b: int) -> None:
    d = SyntheticTokens(vocab, seed=3)
    x = d.batch(step, rank, 8, b, 16)
    assert x.shape == (b, 17) and x.min() >= 0 and x.max() < vocab
    assert np.array_equal(x, SyntheticTokens(vocab, seed=3).batch(step, rank, 8, b, 16))
    # the next token follows from the previous two: a learnable stream
    assert np.array_equal((2 * x[:, 1:-1] - x[:, :-2]) % vocab, x[:, 2:])


def test_synthetic_ranks_and_steps_differ() -> None:
    d = SyntheticTokens(256)
    assert not np.array_equal(d.batch(0, 0, 4, 8, 32), d.batch(0, 1, 4, 8, 32))
    assert not np.array_equal(d.batch(0, 0, 4, 8, 32), d.batch(1, 0, 4, 8, 32))


@settings(deadline=None, max_examples=25)
@given(st.integers(1, 6), st.integers(0, 50))
def test_token_file_shards_are_disjoint(world: int, step: int) -> None:
    import tempfile

    tokens = np.arange(600, dtype=np.uint16)  # distinct ids: a window's contents give away its position
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.bin"
        tokens.tofile(p)
        f = TokenFile(p, vocab_size=600)
        share = 600 // world
        for rank in range(world):
            x = f.batch(step, rank, world, 4, 8)
            assert x.shape == (4, 9)
            assert (x >= rank * share).all() and (x < (rank + 1) * share).all()
            assert (np.diff(x, axis=1) == 1).all()


def test_token_file_formats(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1 2 3\n4 5 6 7 8 9 10")
    np.save(tmp_path / "b.npy", np.arange(11))
    assert TokenFile(tmp_path / "a.txt", 11).tokens.tolist() == list(range(1, 11))
    assert TokenFile(tmp_path / "b.npy", 11).tokens.size == 11
    assert isinstance(open_dataset(None, 5), SyntheticTokens)


def test_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        open_dataset(str(tmp_path / "missing.bin"), 10)
    (tmp_path / "big.txt").write_text("1 2 300")
    with pytest.raises(DatasetError, match="vocabulary"):
        TokenFile(tmp_path / "big.txt", 256)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DatasetError, match="no tokens"):
        TokenFile(tmp_path / "empty.txt", 256)
    (tmp_path / "short.txt").write_text("1 2 3 4 5")
    with pytest.raises(DatasetError, match="fewer than one sequence"):
        TokenFile(tmp_path / "short.txt", 256).check_fits(2, 8)
    (tmp_path / "junk.txt").write_text("hello world")
    with pytest.raises(DatasetError, match="not a token file"):
        TokenFile(tmp_path / "junk.txt", 256)


def _state() -> dict[str, object]:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "fingerprint": "abc", "loss": 1.5}


def test_checkpoint_round_trip_latest_and_prune(tmp_path: Path) -> None:
    state = _state()
    for step in (10, 20, 30):
        checkpoint.save(tmp_path, step, state)
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path)] == [10, 20, 30]
    latest = checkpoint.latest_checkpoint(tmp_path)
    assert latest is not None and latest[0] == 30
    loaded = checkpoint.load(latest[1], {"fingerprint": "abc"})
    assert loaded["step"] == 30 and loaded["loss"] == 1.5
    for k, v in state["model"].items():  # type: ignore[attr-defined]
        assert torch.equal(loaded["model"][k], v)
    assert checkpoint.prune(tmp_path, 2) == [checkpoint.checkpoint_path(tmp_path, 10)]
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path)] == [20, 30]
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind
    assert checkpoint.latest_checkpoint(tmp_path / "nowhere") is None


def test_corrupt_or_foreign_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    bad = checkpoint.checkpoint_path(tmp_path, 5)
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.load(bad, {})
    good = checkpoint.save(tmp_path, 6, _state())
    with pytest.raises(checkpoint.CheckpointError, match="fingerprint"):
        checkpoint.load(good, {"fingerprint": "other-model"})
