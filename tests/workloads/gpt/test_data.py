"""Training data: synthetic streams, memory-mapped token files read per shard, clear errors for bad files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuray.workloads.gpt.data import DatasetError, SyntheticTokens, TokenFile, open_dataset


@settings(deadline=None)  # no wall-clock bound in a unit test: CI machines are shared
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
@given(st.integers(1, 6), st.integers(0, 50), st.sampled_from([".bin", ".npy"]))
def test_token_file_shards_are_disjoint(world: int, step: int, suffix: str) -> None:
    tokens = np.arange(600, dtype=np.uint16)  # distinct ids: a window's contents give away its position
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"t{suffix}"
        tokens.tofile(p) if suffix == ".bin" else np.save(p, tokens.astype(np.int32))
        f = TokenFile(p, vocab_size=600)
        share = 600 // world
        for rank in range(world):
            x = f.batch(step, rank, world, 4, 8)
            assert x.shape == (4, 9) and x.dtype == np.int64
            assert (x >= rank * share).all() and (x < (rank + 1) * share).all()
            assert (np.diff(x, axis=1) == 1).all()


def test_token_file_is_memory_mapped_and_read_per_shard(tmp_path: Path) -> None:
    """A worker reads only its shard: ids outside the vocabulary in rank 1's half do not stop rank 0."""
    tokens = np.concatenate([np.arange(500, dtype=np.uint16) % 100, np.full(500, 60000, np.uint16)])
    p = tmp_path / "t.bin"
    tokens.tofile(p)
    f = TokenFile(p, vocab_size=100)
    assert isinstance(f.tokens, np.memmap)  # nothing loaded at open
    assert f.batch(0, 0, 2, 4, 8).max() < 100
    with pytest.raises(DatasetError, match=r"60000.*vocabulary is \[0, 100\)"):
        f.batch(0, 1, 2, 4, 8)


def test_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        open_dataset(str(tmp_path / "missing.bin"), 10)
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(DatasetError, match="no tokens"):
        TokenFile(tmp_path / "empty.bin", 256)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(DatasetError, match="odd"):
        TokenFile(tmp_path / "odd.bin", 256)
    np.save(tmp_path / "f.npy", np.ones(10, dtype=np.float32))
    with pytest.raises(DatasetError, match="1-D integer"):
        TokenFile(tmp_path / "f.npy", 256)
    (tmp_path / "junk.npy").write_text("hello world")
    with pytest.raises(DatasetError, match="not a token file"):
        TokenFile(tmp_path / "junk.npy", 256)
    (tmp_path / "ids.txt").write_text("1 2 3")
    with pytest.raises(DatasetError, match=r"\.bin file .* or a \.npy file"):
        TokenFile(tmp_path / "ids.txt", 256)
    np.arange(5, dtype=np.uint16).tofile(tmp_path / "short.bin")
    with pytest.raises(DatasetError, match="fewer than one sequence"):
        TokenFile(tmp_path / "short.bin", 256).check_fits(2, 8)
    assert isinstance(open_dataset(None, 5), SyntheticTokens)
