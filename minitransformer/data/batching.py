"""Batching by tokens: sentence pairs of similar length, padded, about N tokens per batch.

§5.1: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and
25000 target tokens." Counting tokens instead of sentences keeps the work per step (and the
memory) about constant, and grouping similar lengths wastes little on padding.

``TokenBatcher`` sorts the pairs by (target length, source length), cuts the sorted list into
batches whose padded size B·max(S, T) stays within ``max_tokens``, and each epoch yields those
batches in an order shuffled by a generator seeded with (seed, epoch): epochs differ, runs
repeat exactly. The batches' contents are fixed; only their order changes.

    B pairs in a batch   S longest source   T longest target + 1 (for BOS / EOS)

    src     (B, S)  source ids, PAD after the sentence
    tgt_in  (B, T)  BOS + target, PAD after: what the decoder reads
    tgt_out (B, T)  target + EOS, PAD after: what it must predict (the loss ignores PAD)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DataError
from .tokenizer import BOS_ID, EOS_ID, PAD_ID

Pair = tuple[Sequence[int], Sequence[int]]


@dataclass
class Batch:
    """B padded sentence pairs (host NumPy int64 arrays) and their real token counts.

    ``n_tgt_tokens`` counts the EOS of each target: it is the number of predictions the loss
    scores. ``indices`` are the pairs' positions in the list they were batched from, so
    translations of a shuffled or sorted test set can be put back in order; -1 marks an
    empty row added to reach a fixed shape (``make_batch(shape=...)``).
    """

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    n_src_tokens: int
    n_tgt_tokens: int
    indices: np.ndarray

    def __len__(self) -> int:
        """B, the number of sentence pairs."""
        return self.src.shape[0]


def make_batch(pairs: Sequence[Pair], indices: Sequence[int] | None = None,
               shape: tuple[int, int, int] | None = None) -> Batch:
    """Pad ``pairs`` of token ids (no BOS/EOS) into a Batch.

    An empty source still gets one (pad) column, so every array has a real shape; the model
    masks it. ``indices`` defaults to 0..B-1. ``shape`` (B, S, T), at least the pairs' own,
    pads further: to S and T columns, and to B rows with empty rows (every id PAD, index -1),
    which the model masks and the loss ignores, so that batches share one shape.
    """
    n = len(pairs)
    if n == 0:
        raise DataError("make_batch got no pairs; pass at least one (source, target) pair.")
    src_lens = np.fromiter((len(s) for s, _ in pairs), dtype=np.int64, count=n)
    tgt_lens = np.fromiter((len(t) for _, t in pairs), dtype=np.int64, count=n)
    B, S = n, max(int(src_lens.max()), 1)
    T = int(tgt_lens.max()) + 1                                          # + BOS / EOS
    if shape is not None:
        if shape[0] < B or shape[1] < S or shape[2] < T:
            raise DataError(f"make_batch: the pairs need at least (B, S, T) = {(B, S, T)}, "
                            f"more than the shape {tuple(shape)} asked for.")
        B, S, T = (int(x) for x in shape)
    src = np.full((B, S), PAD_ID, dtype=np.int64)                        # (B, S)
    tgt_in = np.full((B, T), PAD_ID, dtype=np.int64)                     # (B, T)
    tgt_out = np.full((B, T), PAD_ID, dtype=np.int64)                    # (B, T)
    tgt_in[:n, 0] = BOS_ID
    tgt_out[np.arange(n), tgt_lens] = EOS_ID                             # right after the target
    for b, (s, t) in enumerate(pairs):  # one loop over pairs; the copies are vectorized
        src[b, : len(s)] = s
        tgt_in[b, 1 : len(t) + 1] = t
        tgt_out[b, : len(t)] = t
    if indices is None:
        indices = np.arange(n, dtype=np.int64)
    else:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.shape != (n,):
            raise DataError(f"make_batch got {n} pairs but indices of shape {indices.shape}; "
                            f"pass one index per pair.")
    indices = np.concatenate([indices, np.full(B - n, -1, dtype=np.int64)])  # (B,)
    return Batch(src, tgt_in, tgt_out, n_src_tokens=int(src_lens.sum()),
                 n_tgt_tokens=int(tgt_lens.sum()) + n, indices=indices)


class TokenBatcher:
    """One epoch of token-bounded Batches per iteration (§5.1).

    pairs        token-id pairs without BOS/EOS (``encode_pairs`` makes them)
    max_tokens   bound on each batch's padded size B·max(S, T); a pair larger than it
                 alone makes its own batch rather than being dropped
    shuffle      shuffle the order of the batches each epoch (False: sorted order, for
                 validation and test)
    seed         with the epoch, seeds the shuffle: ``set_epoch(e)`` repeats epoch e exactly
    shape_multiple  0 (the default): each batch padded to its own longest pair. m > 0: fixed
                 shapes, for CUDA graphs (which replay a step only for a shape seen before):
                 a pair's width max(S, T) is rounded up to a multiple W of m, and the pairs of
                 one W make batches of one size B (as many as max_tokens allows, evened
                 out), padded to (B, W, W), the last one with empty rows. A run then meets
                 one shape per W, at the cost of more padding (``_fixed_shapes``).

    ``epoch`` starts at 0 and goes up by one after each full pass over the batches.
    """

    def __init__(self, pairs: Sequence[Pair], max_tokens: int, shuffle: bool = True,
                 seed: int = 0, shape_multiple: int = 0):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) \
                or max_tokens < 1:
            raise DataError(f"max_tokens must be a positive integer, got {max_tokens!r}; "
                            f"the paper used 25000 per batch, try 4096 on a CPU.")
        if len(pairs) == 0:
            raise DataError("TokenBatcher got no sentence pairs; check that the files were "
                            "read and that encode_pairs' max_len did not drop them all.")
        if isinstance(shape_multiple, bool) or not isinstance(shape_multiple, (int, np.integer)) \
                or shape_multiple < 0:
            raise DataError(f"shape_multiple must be a non-negative integer, got "
                            f"{shape_multiple!r}; 0 pads each batch to its own longest pair.")
        self.pairs = pairs
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = seed
        self.shape_multiple = int(shape_multiple)
        self.epoch = 0
        # index arrays, fixed for all epochs, and each batch's padded shape (or None)
        if self.shape_multiple:
            self.batches, self.shapes = _fixed_shapes(pairs, self.max_tokens,
                                                      self.shape_multiple)
        else:
            self.batches = _bucket(pairs, self.max_tokens)
            self.shapes = [None] * len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (resuming a run repeats its order)."""
        self.epoch = int(epoch)

    def order(self) -> np.ndarray:
        """The order of the batches in the current epoch: a permutation of range(len(self))."""
        if not self.shuffle:
            return np.arange(len(self.batches))
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.batches))

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        for k in self.order():
            idx = self.batches[k]
            yield make_batch([self.pairs[i] for i in idx], idx, self.shapes[k])
        self.epoch += 1  # only after a full pass: a broken-off epoch is not counted

    def __repr__(self) -> str:
        return (f"TokenBatcher({len(self.pairs)} pairs, {len(self)} batches, "
                f"max_tokens={self.max_tokens}, shuffle={self.shuffle}, epoch={self.epoch})")


def batches_in_order(pairs: Sequence[Pair], max_tokens: int) -> list[Batch]:
    """The unshuffled batches of a validation or test set, all of them, always the same.

    They are sorted by length; put predictions back in input order with ``Batch.indices``.
    """
    return list(TokenBatcher(pairs, max_tokens, shuffle=False))


def _bucket(pairs: Sequence[Pair], max_tokens: int) -> list[np.ndarray]:
    """Cut the pairs, sorted by (target length, source length), into padded-size bounded runs.

    Greedy: a pair joins the current batch unless that would lift (B + 1)·max(S, T) above
    ``max_tokens``. Ties keep input order (a stable sort), so the result is deterministic.
    """
    src_lens = np.fromiter((max(len(s), 1) for s, _ in pairs), dtype=np.int64, count=len(pairs))
    tgt_lens = np.fromiter((len(t) + 1 for _, t in pairs), dtype=np.int64, count=len(pairs))
    order = np.lexsort((src_lens, tgt_lens))   # primary key: the last one, target length
    widths = np.maximum(src_lens, tgt_lens)[order].tolist()
    batches, start, width = [], 0, 0
    for k, w in enumerate(widths):
        new_width = max(width, w)
        if k > start and (k - start + 1) * new_width > max_tokens:
            batches.append(order[start:k])
            start, new_width = k, w
        width = new_width
    batches.append(order[start:])
    return batches


def _fixed_shapes(pairs: Sequence[Pair], max_tokens: int, multiple: int
                  ) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
    """Batches of one shape per width: each pair's max(S, T) rounded up to a multiple W of
    ``multiple``, the pairs sorted by (W, target length, source length); the n pairs of a
    width cut into k = ceil(n / max(1, max_tokens // W)) batches of B = ceil(n / k) pairs
    (the last one short), each padded to (B, W, W)."""
    src_lens = np.fromiter((max(len(s), 1) for s, _ in pairs), dtype=np.int64, count=len(pairs))
    tgt_lens = np.fromiter((len(t) + 1 for _, t in pairs), dtype=np.int64, count=len(pairs))
    widths = -(-np.maximum(src_lens, tgt_lens) // multiple) * multiple
    order = np.lexsort((src_lens, tgt_lens, widths))   # primary key: the width
    batches, shapes = [], []
    for W in np.unique(widths).tolist():
        group = order[widths[order] == W]
        n_batches = -(-len(group) // max(1, max_tokens // W))
        rows = -(-len(group) // n_batches)     # as even as can be: few empty rows
        for start in range(0, len(group), rows):
            batches.append(group[start:start + rows])
            shapes.append((rows, W, W))
    return batches, shapes
