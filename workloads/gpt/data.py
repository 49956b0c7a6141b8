"""Training data: synthetic token sequences or a tokenised file, sharded by worker. numpy only, no torch.

Every batch is a pure function of ``(seed, step, rank)``, so a resumed run sees exactly the batches it would
have seen without the interruption, and two workers never read the same stream.

An elastic job (its size changes between attempts) reads by global batch instead (``rows``): the ``global_batch``
rows of a step are a pure function of ``(seed, step, global_batch)``, and each live worker takes a contiguous range
of them, however many workers there are. A tokenised file is read in epochs of a seeded permutation of its
sequences, so within an epoch every sequence is read once, whatever the sizes the run went through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["DatasetError", "SyntheticTokens", "TokenBatches", "TokenFile", "open_dataset"]

Batch = npt.NDArray[np.int64]


class DatasetError(ValueError):
    """A dataset that cannot be used: missing, unreadable, too short, or with ids outside the vocabulary."""


class TokenBatches(Protocol):
    def batch(self, step: int, rank: int, world: int, batch_size: int, seq_len: int) -> Batch:
        """``[batch_size, seq_len + 1]`` token ids for worker ``rank`` of ``world`` at ``step``."""
        ...

    def rows(self, step: int, lo: int, hi: int, global_batch: int, seq_len: int) -> Batch:
        """Rows ``lo..hi-1`` (``[hi - lo, seq_len + 1]`` token ids) of the ``global_batch`` rows of ``step``,
        the same whichever worker asks and however many there are."""
        ...


def _check_rows(lo: int, hi: int, global_batch: int) -> None:
    if not 0 <= lo <= hi <= global_batch:
        raise ValueError(f"rows {lo}..{hi}: outside the global batch of {global_batch} rows")


def _rng(seed: int, step: int, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, rank])


class SyntheticTokens:
    """Arithmetic progressions modulo the vocabulary: ``x[t] = (start + t * stride) % vocab``.

    Start and stride are random per sequence, so the next token is predictable from the previous two: a
    model that learns shows a loss that falls from ``ln(vocab)`` towards zero.
    """

    def __init__(self, vocab_size: int, seed: int = 0, max_stride: int = 7) -> None:
        self.vocab_size = vocab_size
        self.seed = seed
        self.max_stride = max(1, min(max_stride, vocab_size - 1))

    def batch(self, step: int, rank: int, world: int, batch_size: int, seq_len: int) -> Batch:
        rng = _rng(self.seed, step, rank)
        start = rng.integers(0, self.vocab_size, size=(batch_size, 1))
        stride = rng.integers(1, self.max_stride + 1, size=(batch_size, 1))
        t = np.arange(seq_len + 1)[None, :]
        return ((start + t * stride) % self.vocab_size).astype(np.int64)

    def rows(self, step: int, lo: int, hi: int, global_batch: int, seq_len: int) -> Batch:
        _check_rows(lo, hi, global_batch)
        rng = np.random.default_rng([self.seed, step, global_batch, _GLOBAL])  # the whole step's rows, then a range
        start = rng.integers(0, self.vocab_size, size=(global_batch, 1))[lo:hi]
        stride = rng.integers(1, self.max_stride + 1, size=(global_batch, 1))[lo:hi]
        t = np.arange(seq_len + 1)[None, :]
        return ((start + t * stride) % self.vocab_size).astype(np.int64)


_GLOBAL = 1 << 31
"""A seed word no per-rank stream uses (ranks are small), so the global rows are not a rank's batch."""


class TokenFile:
    """A tokenised file, memory-mapped: ``.bin`` (uint16 ids, as nanoGPT writes) or ``.npy`` (a 1-D integer array).

    Opening reads only the header; worker ``rank`` of ``world`` reads only its contiguous ``1/world`` share of
    the tokens, and checks the ids of that share against the vocabulary the first time it uses it.
    """

    def __init__(self, path: str | Path, vocab_size: int, seed: int = 0) -> None:
        p = Path(path)
        if not p.is_file():
            raise DatasetError(f"dataset {str(p)!r} does not exist (or is not a file)")
        try:
            if p.suffix == ".bin":
                if p.stat().st_size % 2:
                    raise ValueError("a .bin file holds uint16 ids (2 bytes each) but its size is odd")
                tokens: npt.NDArray[np.integer] = (
                    np.memmap(p, dtype=np.uint16, mode="r") if p.stat().st_size else np.zeros(0, np.uint16)
                )
            elif p.suffix == ".npy":
                tokens = np.load(p, mmap_mode="r", allow_pickle=False)
                if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
                    raise ValueError(f"a .npy dataset is a 1-D integer array, not {tokens.dtype} {tokens.shape}")
            else:
                raise ValueError("the dataset must be a .bin file (uint16 token ids) or a .npy file (1-D integers)")
        except (OSError, ValueError) as e:
            raise DatasetError(f"dataset {str(p)!r} is not a token file: {e}") from None
        if tokens.size == 0:
            raise DatasetError(f"dataset {str(p)!r} holds no tokens")
        self.path = p
        self.tokens = tokens
        self.vocab_size = vocab_size
        self.seed = seed
        self._checked: set[tuple[int, int]] = set()

    def check_fits(self, world: int, seq_len: int) -> None:
        """Raise :class:`DatasetError` if a worker's share is shorter than one training sequence."""
        share = self.tokens.size // world
        if share < seq_len + 1:
            raise DatasetError(
                f"dataset {str(self.path)!r} has {self.tokens.size} tokens: {share} per worker for {world} workers, "
                f"fewer than one sequence of {seq_len + 1}"
            )

    def _check_ids(self, lo: int, hi: int, chunk: int = 1 << 22) -> None:
        for a in range(lo, hi, chunk):
            part = np.asarray(self.tokens[a : min(hi, a + chunk)])
            if part.min() < 0 or part.max() >= self.vocab_size:
                raise DatasetError(
                    f"dataset {str(self.path)!r} has token ids in [{part.min()}, {part.max()}] at tokens {a}.. but "
                    f"the model's vocabulary is [0, {self.vocab_size}); raise model.vocabSize or re-tokenise"
                )

    def batch(self, step: int, rank: int, world: int, batch_size: int, seq_len: int) -> Batch:
        self.check_fits(world, seq_len)
        share = self.tokens.size // world
        lo = rank * share
        if (rank, world) not in self._checked:
            self._check_ids(lo, lo + share)
            self._checked.add((rank, world))
        starts = _rng(self.seed, step, rank).integers(lo, lo + share - seq_len, size=batch_size)
        return np.stack([np.asarray(self.tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts])

    def sequences(self, seq_len: int) -> int:
        """Sequences of an epoch: the file cut into windows of ``seq_len + 1`` tokens, each starting where the
        previous one's inputs end (its last token is the next one's first input)."""
        return (self.tokens.size - 1) // seq_len

    def epoch_order(self, epoch: int, seq_len: int) -> npt.NDArray[np.int64]:
        """The window each position of ``epoch`` reads: a permutation seeded by ``(seed, epoch)``."""
        n = self.sequences(seq_len)
        if n < 1:
            raise DatasetError(
                f"dataset {str(self.path)!r} has {self.tokens.size} tokens, fewer than one sequence of {seq_len + 1}"
            )
        return np.random.default_rng([self.seed, epoch, _GLOBAL]).permutation(n).astype(np.int64)

    def rows(self, step: int, lo: int, hi: int, global_batch: int, seq_len: int) -> Batch:
        _check_rows(lo, hi, global_batch)
        n = self.sequences(seq_len)
        out = []
        order: tuple[int, npt.NDArray[np.int64]] | None = None
        for g in range(step * global_batch + lo, step * global_batch + hi):  # the run's g-th sequence
            epoch, at = divmod(g, n) if n > 0 else (0, 0)
            if order is None or order[0] != epoch:
                order = (epoch, self.epoch_order(epoch, seq_len))
            w = int(order[1][at]) * seq_len
            out.append(np.asarray(self.tokens[w : w + seq_len + 1], dtype=np.int64))
        batch = np.stack(out) if out else np.zeros((0, seq_len + 1), np.int64)
        if batch.size and (batch.min() < 0 or batch.max() >= self.vocab_size):
            raise DatasetError(
                f"dataset {str(self.path)!r} has token ids in [{batch.min()}, {batch.max()}] but the model's "
                f"vocabulary is [0, {self.vocab_size}); raise model.vocabSize or re-tokenise"
            )
        return batch


def open_dataset(path: str | None, vocab_size: int, seed: int = 0) -> TokenBatches:
    """The dataset at ``path``, or synthetic tokens when ``path`` is None."""
    return SyntheticTokens(vocab_size, seed) if path is None else TokenFile(path, vocab_size, seed)
