"""Batching by tokens (§5.1): padding, BOS/EOS placement, token counts, the padded-size
bound, every pair once per epoch, and reproducible shuffling."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from minitransformer.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Batch,
    DataError,
    TokenBatcher,
    batches_in_order,
    make_batch,
)


def random_pairs(n, max_len=30, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(4, 100, rng.integers(1, max_len + 1)).tolist(),
             rng.integers(4, 100, rng.integers(1, max_len + 1)).tolist()) for _ in range(n)]


def check_batch(batch: Batch, pairs) -> None:
    """Every array of ``batch`` is exactly what its pairs (at batch.indices) should give."""
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    chosen = [pairs[i] for i in batch.indices]
    assert len(batch) == B == len(chosen) and batch.tgt_out.shape == (B, T)
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == np.int64
    assert S == max(1, max(len(s) for s, _ in chosen))
    assert T == max(len(t) for _, t in chosen) + 1
    for b, (s, t) in enumerate(chosen):
        assert_array_equal(batch.src[b], list(s) + [PAD_ID] * (S - len(s)))
        assert_array_equal(batch.tgt_in[b], [BOS_ID, *t] + [PAD_ID] * (T - 1 - len(t)))
        assert_array_equal(batch.tgt_out[b], [*t, EOS_ID] + [PAD_ID] * (T - 1 - len(t)))
    assert batch.n_src_tokens == sum(len(s) for s, _ in chosen) == (batch.src != PAD_ID).sum()
    assert batch.n_tgt_tokens == sum(len(t) + 1 for _, t in chosen)
    assert batch.n_tgt_tokens == (batch.tgt_out != PAD_ID).sum() == (batch.tgt_in != PAD_ID).sum()


def check_epoch(batcher: TokenBatcher, pairs, max_tokens) -> list[Batch]:
    batches = list(batcher)
    assert len(batches) == len(batcher)
    seen = np.sort(np.concatenate([b.indices for b in batches]))
    assert_array_equal(seen, np.arange(len(pairs)))  # every pair exactly once
    for batch in batches:
        check_batch(batch, pairs)
        B, S = batch.src.shape
        assert B * max(S, batch.tgt_in.shape[1]) <= max_tokens or B == 1
    return batches


def test_make_batch_layout():
    batch = make_batch([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])], indices=[7, 3])
    assert_array_equal(batch.src, [[5, 6, 7], [10, 0, 0]])
    assert_array_equal(batch.tgt_in, [[2, 8, 9, 0], [2, 11, 12, 13]])
    assert_array_equal(batch.tgt_out, [[8, 9, 3, 0], [11, 12, 13, 3]])
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (4, 7)
    assert_array_equal(batch.indices, [7, 3])
    assert_array_equal(make_batch([([5], [6])]).indices, [0])


def test_make_batch_empty_source_gets_one_pad_column():
    batch = make_batch([([], [8])])
    assert_array_equal(batch.src, [[PAD_ID]])
    assert batch.n_src_tokens == 0


def test_make_batch_errors():
    with pytest.raises(DataError, match="no pairs"):
        make_batch([])
    with pytest.raises(DataError, match="one index per pair"):
        make_batch([([5], [6])], indices=[0, 1])


def test_epoch_covers_every_pair_within_the_bound():
    pairs = random_pairs(500)
    check_epoch(TokenBatcher(pairs, max_tokens=300), pairs, 300)


def test_similar_lengths_share_a_batch():
    pairs = random_pairs(400)
    batches = batches_in_order(pairs, max_tokens=200)
    tgt_lens = [sorted(len(pairs[i][1]) for i in b.indices) for b in batches]
    for before, after in zip(tgt_lens, tgt_lens[1:], strict=False):
        assert before[-1] <= after[0]  # sorted by target length across batches
    padding = sum(b.tgt_out.size for b in batches) / sum(b.n_tgt_tokens for b in batches)
    assert padding < 1.1


def test_oversized_pair_gets_its_own_batch():
    pairs = random_pairs(50, max_len=5) + [([4] * 60, [5] * 3)]
    batches = check_epoch(TokenBatcher(pairs, max_tokens=40), pairs, 40)
    alone = [b for b in batches if 50 in b.indices]
    assert len(alone) == 1 and len(alone[0]) == 1 and alone[0].src.shape == (1, 60)


def order(batcher):
    """One epoch, as the tuple of pair indices of each batch."""
    return [tuple(b.indices) for b in batcher]


def test_shuffle_differs_between_epochs_and_repeats_for_a_seed():
    pairs = random_pairs(300)
    batcher = TokenBatcher(pairs, max_tokens=200, seed=1)
    epoch0, epoch1 = order(batcher), order(batcher)
    assert batcher.epoch == 2
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1)  # same batches, new order
    again = TokenBatcher(pairs, max_tokens=200, seed=1)
    assert order(again) == epoch0 and order(again) == epoch1
    again.set_epoch(1)
    assert order(again) == epoch1
    assert order(TokenBatcher(pairs, max_tokens=200, seed=2)) != epoch0


def test_epoch_advances_only_after_a_full_pass():
    batcher = TokenBatcher(random_pairs(100), max_tokens=100)
    next(iter(batcher))
    assert batcher.epoch == 0
    list(batcher)
    assert batcher.epoch == 1


def test_unshuffled_order_is_deterministic():
    pairs = random_pairs(300)
    batcher = TokenBatcher(pairs, max_tokens=200, shuffle=False)
    first = [tuple(b.indices) for b in batcher]
    assert [tuple(b.indices) for b in batcher] == first  # the same in every epoch
    in_order = batches_in_order(pairs, max_tokens=200)
    assert isinstance(in_order, list) and [tuple(b.indices) for b in in_order] == first
    check_epoch(batcher, pairs, 200)


def test_indices_put_predictions_back_in_order():
    pairs = random_pairs(120)
    restored = [None] * len(pairs)
    for batch in batches_in_order(pairs, max_tokens=150):
        for row, i in zip(batch.src, batch.indices, strict=True):
            restored[i] = row[row != PAD_ID].tolist()
    assert restored == [s for s, _ in pairs]


@pytest.mark.parametrize("max_tokens", [0, -5, 2.5, True])
def test_bad_max_tokens(max_tokens):
    with pytest.raises(DataError, match="max_tokens must be a positive integer"):
        TokenBatcher(random_pairs(3), max_tokens=max_tokens)


def test_no_pairs():
    with pytest.raises(DataError, match="no sentence pairs"):
        TokenBatcher([], max_tokens=100)


sentences = st.lists(st.integers(4, 50), min_size=0, max_size=25)


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(sentences, sentences), min_size=1, max_size=40),
       max_tokens=st.integers(1, 150), seed=st.integers(0, 2**32 - 1),
       shuffle=st.booleans())
def test_batching_invariants(pairs, max_tokens, seed, shuffle):
    batcher = TokenBatcher(pairs, max_tokens=max_tokens, shuffle=shuffle, seed=seed)
    first = check_epoch(batcher, pairs, max_tokens)
    second = check_epoch(batcher, pairs, max_tokens)
    assert sorted(tuple(b.indices) for b in first) == sorted(tuple(b.indices) for b in second)


# ------------------------------------------------------ fixed shapes, for CUDA graphs

@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(sentences, sentences), min_size=1, max_size=40),
       max_tokens=st.integers(1, 150), multiple=st.integers(1, 9), seed=st.integers(0, 99))
def test_fixed_shapes_one_per_width(pairs, max_tokens, multiple, seed):
    """shape_multiple: every pair once, in a batch of shape (B, W, W) with W its width
    max(S, T) rounded up to the multiple and B within the token bound; one shape per width,
    fewer than a batch of empty rows in all; the padding rows empty (index -1, every id PAD),
    and the token counts those of the real pairs."""
    batcher = TokenBatcher(pairs, max_tokens, seed=seed, shape_multiple=multiple)
    batches = list(batcher)
    real = np.concatenate([b.indices[b.indices >= 0] for b in batches])
    assert_array_equal(np.sort(real), np.arange(len(pairs)))
    widths = set()
    for batch in batches:
        B, W = batch.src.shape
        assert W % multiple == 0 and batch.tgt_in.shape == batch.tgt_out.shape == (B, W)
        assert B <= max(1, max_tokens // W)
        widths.add(W)
        rows = batch.indices >= 0
        for i in batch.indices[rows]:
            s, t = pairs[i]
            assert W - multiple < max(len(s), 1, len(t) + 1) <= W
        assert (batch.src[~rows] == PAD_ID).all() and (batch.tgt_in[~rows] == PAD_ID).all()
        assert (batch.tgt_out[~rows] == PAD_ID).all()
        assert batch.n_src_tokens == (batch.src != PAD_ID).sum()
        assert batch.n_tgt_tokens == (batch.tgt_out != PAD_ID).sum()
    assert len({b.src.shape for b in batches}) == len(widths)
    for W in widths:  # the empty rows of a width: fewer than its batches
        of_width = [b for b in batches if b.src.shape[1] == W]
        assert sum((b.indices < 0).sum() for b in of_width) < len(of_width)


def test_fixed_shapes_make_fewer_shapes_than_padding_each_batch():
    pairs = random_pairs(2000, max_len=40)
    loose = {(b.src.shape, b.tgt_in.shape) for b in TokenBatcher(pairs, 2000)}
    fixed = {(b.src.shape, b.tgt_in.shape) for b in TokenBatcher(pairs, 2000, shape_multiple=4)}
    assert len(fixed) <= 11 < len(loose)  # widths 4, 8, ..., 44


def test_make_batch_to_a_shape_and_bad_shape_multiples():
    batch = make_batch([([5, 6], [7])], shape=(3, 4, 5))
    assert batch.src.shape == (3, 4) and batch.tgt_in.shape == batch.tgt_out.shape == (3, 5)
    assert_array_equal(batch.indices, [0, -1, -1])
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (2, 2)
    with pytest.raises(DataError, match=r"need at least \(B, S, T\) = \(1, 2, 2\)"):
        make_batch([([5, 6], [7])], shape=(1, 1, 5))
    for bad in (-1, 1.5, True):
        with pytest.raises(DataError, match="shape_multiple must be a non-negative integer"):
            TokenBatcher([([5], [6])], 10, shape_multiple=bad)
