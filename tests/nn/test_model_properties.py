"""What the Transformer must do whatever its weights: invariants of the whole model.

Causality (§3.2.3), padding and batching invariance, the relative-position property of the
sinusoids (§3.5), incremental decoding with the cache, attention weights, the parameter counts
of Table 3, weight tying and the √d_model scaling (§3.4), the pre-LN option, and clear errors.
Small models (d_model 16 or 32), in eval mode, float32 unless a test says otherwise.
"""

import gc
import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    PositionalEncoding,
    Transformer,
    TransformerConfig,
    sinusoidal_table,
)

V = 23  # vocabulary of the small models; id 0 is padding
ATOL = 1e-5


def small_model(**overrides):
    """A seeded 2-layer model, d_model 16, in eval mode, on the current device."""
    settings_ = dict(n_layers=2, d_model=16, d_ff=32, n_heads=4, p_dropout=0.1, max_len=64)
    mt.manual_seed(0)
    config = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, **{**settings_, **overrides})
    return Transformer(config).eval()


def ids(rows):
    return np.asarray(rows, dtype=np.int64)


def host(x):
    return mt.to_numpy(x.data if isinstance(x, mt.Tensor) else x)


SRC = ids([[5, 3, 7, 2, 9], [4, 8, 1, 6, 0]])  # the second row ends in padding
TGT = ids([[1, 4, 6, 2, 7, 3], [1, 9, 5, 11, 2, 8]])


# ----------------------------------------------------------------------------- causality

@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(j=st.integers(0, TGT.shape[1] - 1), token=st.integers(1, V - 1))
def test_changing_target_token_j_changes_only_positions_from_j_on(device, j, token):
    model = small_model()
    changed = TGT.copy()
    changed[:, j] = token
    changed[changed[:, j] == TGT[:, j], j] = token % (V - 1) + 1  # every row really changes
    before = model(SRC, TGT).numpy()
    after = model(SRC, changed).numpy()
    # i < j never sees position j: exactly the same numbers
    assert_array_equal(after[:, :j], before[:, :j])
    # i >= j does: position j itself changes in every sentence
    diff = np.abs(after[:, j:] - before[:, j:]).max(axis=(1, 2))
    assert (diff > 1e-4).all(), diff


# ----------------------------------------------------------------------------- padding

def test_appending_padding_to_the_source_changes_no_logits(device):
    model = small_model()
    src, tgt = ids([[5, 3, 7, 2]]), ids([[1, 4, 6]])
    padded = ids([[5, 3, 7, 2, 0, 0, 0]])
    assert_allclose(model(padded, tgt).numpy(), model(src, tgt).numpy(), atol=ATOL, rtol=0)


def test_a_sentence_has_the_same_logits_alone_and_beside_a_longer_padded_neighbour(device):
    model = small_model()
    alone = model(ids([[5, 3, 7]]), ids([[1, 4]])).numpy()                # (1, 2, V)
    batch = model(ids([[5, 3, 7, 0, 0, 0], [2, 9, 4, 8, 6, 3]]),
                  ids([[1, 4, 0, 0, 0], [1, 7, 5, 2, 10]])).numpy()         # (2, 5, V)
    assert_allclose(batch[0, :2], alone[0], atol=ATOL, rtol=0)
    neighbour = model(ids([[2, 9, 4, 8, 6, 3]]), ids([[1, 7, 5, 2, 10]])).numpy()
    assert_allclose(batch[1], neighbour[0], atol=ATOL, rtol=0)


# ----------------------------------------------------------------------------- positions

def pe_formula(pos, dim, d_model):
    angle = pos / 10000 ** (2 * (dim // 2) / d_model)
    return math.sin(angle) if dim % 2 == 0 else math.cos(angle)


def rotation(k, d_model):
    """The block-diagonal M with PE(pos + k) = PE(pos) M: a rotation by ω_i k per pair."""
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        a = k / 10000 ** (2 * i / d_model)
        # [sin(x + a), cos(x + a)] = [sin x, cos x] [[cos a, -sin a], [sin a, cos a]]
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[math.cos(a), -math.sin(a)],
                                               [math.sin(a), math.cos(a)]]
    return M


@pytest.mark.parametrize("k", [1, 3, 17])
def test_pe_at_pos_plus_k_is_one_linear_function_of_pe_at_pos(k):
    # 20,000 positions: enough for the slowest pair (wavelength 2π·10000^(14/16)) to turn
    # through several radians, so the least-squares fit below is well conditioned
    C, L = 16, 20000
    with mt.default_dtype("float64"):
        table = mt.to_numpy(sinusoidal_table(L, C))                         # (L, C)
    assert table.dtype == np.float64
    X, Y = table[:-k], table[k:]                                            # PE(pos), PE(pos+k)
    M = rotation(k, C)
    assert_allclose(X @ M, Y, atol=1e-9, rtol=0)
    # least squares over the first half of the positions and over the second half finds the
    # same M both times, the rotation: M does not depend on pos
    half = len(X) // 2
    for rows in (slice(0, half), slice(half, None)):
        M_fit = np.linalg.lstsq(X[rows], Y[rows], rcond=None)[0]
        assert_allclose(M_fit, M, atol=1e-9, rtol=0)
        assert_allclose(X @ M_fit, Y, atol=1e-9, rtol=0)


def test_pe_values_follow_the_formula(device):
    C = 16
    with mt.default_dtype("float64"):
        table = mt.to_numpy(sinusoidal_table(100, C))
    assert_array_equal(table[0], np.tile([0.0, 1.0], C // 2))                # sin 0, cos 0
    for pos in (1, 7, 50, 99):
        expected = [pe_formula(pos, d, C) for d in range(C)]
        assert_allclose(table[pos], expected, atol=1e-12, rtol=0)
    assert table[1, 0] == pytest.approx(math.sin(1.0))
    assert table[1, 1] == pytest.approx(math.cos(1.0))


def test_pe_table_shape_and_dtype(device):
    table = sinusoidal_table(50, 16)
    assert tuple(table.shape) == (50, 16) and table.dtype == np.float32
    assert mt.backend.device_of(table) == device
    with mt.default_dtype("float64"):
        assert sinusoidal_table(50, 16).dtype == np.float64
    assert_allclose(mt.to_numpy(table), mt.to_numpy(sinusoidal_table(50, 16, device="cpu")))


def test_sequence_longer_than_max_len_names_max_len(device):
    pe = PositionalEncoding(16, max_len=10)
    pe(mt.zeros(1, 10, 16))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"11 positions \(0 to 10\).*max_len=10, positions "
                                         r"0 to 9"):
        pe(mt.zeros(1, 11, 16))
    with pytest.raises(ValueError, match=r"11 positions \(0 to 10\).*max_len=10"):
        pe(mt.zeros(1, 2, 16), start=9)  # decoding past the end, one step at a time


# ----------------------------------------------------------------------------- decoding

def full_and_memory(model, src, tgt):
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    return model.decode(tgt, memory, src_mask).numpy(), memory, src_mask


@pytest.mark.parametrize("variant", [{}, {"pre_norm": True}, {"learned_positions": True}],
                         ids=["post-LN", "pre-LN", "learned-positions"])
@pytest.mark.parametrize("chunk", [1, 2])
def test_incremental_decoding_matches_the_full_decode(device, chunk, variant):
    model = small_model(**variant)
    full, memory, src_mask = full_and_memory(model, SRC, TGT)
    cache = model.new_cache()
    steps = []
    T = TGT.shape[1]
    for t in range(0, T, chunk):
        steps.append(model.decode(TGT[:, t:t + chunk], memory, src_mask, cache).numpy())
        assert cache.length == min(t + chunk, T)
    assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("room", [0, 3, 6])
def test_cache_buffers_are_written_in_place_without_gradients(device, room):
    """Without gradients the self-attention keys and values go into buffers with room for
    ``room`` positions, the same buffers step after step until they are full (then larger
    ones), and the steps decode as the full decode does; with no room they are concatenated
    (no buffers)."""
    model = small_model()
    full, memory, src_mask = full_and_memory(model, SRC, TGT)
    cache = model.new_cache(room)
    steps, buffers = [], []
    with mt.no_grad():
        for t in range(TGT.shape[1]):
            steps.append(model.decode(TGT[:, t:t + 1], memory, src_mask, cache).numpy())
            self_cache = cache.layers[0][0]
            buffers.append(self_cache._buffers[0] if room else self_cache._buffers)
            assert self_cache.k.shape[2] == t + 1
    assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL, rtol=0)
    if room:
        assert [b is buffers[0] for b in buffers] == [t < room for t in range(6)]
    else:
        assert buffers == [None] * 6


@pytest.mark.parametrize("room", [-1, 2.5, "8", True])
def test_cache_room_must_be_a_count_of_positions(room):
    with pytest.raises(ValueError, match="new_cache: room must be a number of positions"):
        small_model().new_cache(room)


def test_cache_reorder_follows_a_permutation_of_the_batch(device):
    model = small_model()
    src = ids([[5, 3, 7, 2, 9], [4, 8, 1, 0, 0], [6, 6, 2, 11, 0]])
    tgt = ids([[1, 4, 6, 2, 7], [1, 9, 5, 11, 2], [1, 3, 3, 12, 8]])
    perm = np.array([2, 0, 1])
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, src_mask, cache)  # three positions in the original order
    cache.reorder(perm)
    memory, src_mask = memory[perm], model.source_mask(src[perm])
    rest = model.decode(tgt[perm, 3:], memory, src_mask, cache).numpy()
    expected, _, _ = full_and_memory(model, src[perm], tgt[perm])
    assert_allclose(rest, expected[:, 3:], atol=ATOL, rtol=0)


def test_a_reorder_without_gradients_waits_for_the_next_positions(device, compiled):
    """Without gradients (with the compiled kernels, on the CPU) a reorder is gathered as
    the next step's keys and values are appended (one copy): two reorders in a row compose,
    reading k in between gathers it, and the cache holds the same numbers as gathering at
    once with gradients on."""
    model = small_model()
    src = ids([[5, 3, 7, 2, 9], [4, 8, 1, 0, 0], [6, 6, 2, 11, 0]])
    tgt = ids([[1, 4, 6, 2, 7], [1, 9, 5, 11, 2], [1, 3, 3, 12, 8]])
    first, second = np.array([2, 0, 1, 1]), np.array([3, 0, 2])
    keep = first[second]                                      # the rows both keep: [1, 2, 1]
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    eager, waiting, read = model.new_cache(), model.new_cache(), model.new_cache()
    with mt.no_grad():
        for cache in (eager, waiting, read):
            model.decode(tgt[:, :3], memory, src_mask, cache)
        for cache in (waiting, read):
            cache.reorder(first)
            cache.reorder(second)
        kept_k = read.layers[0][0].k.numpy()                  # read before the next step
    with mt.enable_grad():
        eager.reorder(keep)
    assert_array_equal(kept_k, eager.layers[0][0].k.numpy())
    memory, src_mask = memory[keep], model.source_mask(src[keep])
    with mt.no_grad():
        outs = [model.decode(tgt[keep, 3:], memory, src_mask, cache).numpy()
                for cache in (eager, waiting, read)]
    for out in outs[1:]:
        assert_array_equal(out, outs[0])
    for layers in (waiting.layers, read.layers):
        for (self_cache, _), (self_eager, _) in zip(layers, eager.layers, strict=True):
            assert_array_equal(self_cache.k.numpy(), self_eager.k.numpy())
            assert_array_equal(self_cache.v.numpy(), self_eager.v.numpy())
    expected, _, _ = full_and_memory(model, src[keep], tgt[keep])
    assert_allclose(outs[0], expected[:, 3:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["list", "Tensor", "mask"])
def test_a_reorder_takes_what_indexing_takes(device, compiled, kind):
    """Rows as a list, a Tensor or a mask keep the rows they name, waiting or not; an
    array of rows changed after the reorder does not change what is kept."""
    model = small_model()
    src, tgt = ids([[5, 3, 7], [4, 8, 1], [6, 2, 9]]), ids([[1, 4, 6], [1, 9, 5], [1, 3, 3]])
    rows = np.array([2, 0])
    index = {"list": [2, 0], "Tensor": mt.tensor(rows),
             "mask": np.array([True, False, True])}[kind]
    keep = rows if kind != "mask" else np.array([0, 2])
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache, by_array = model.new_cache(), model.new_cache()
    with mt.no_grad():
        for c in (cache, by_array):
            model.decode(tgt[:, :2], memory, src_mask, c)
        cache.reorder(index)
        changing = keep.copy()
        by_array.reorder(changing)
        changing[:] = 1                     # after the call: no effect on the rows kept
        outs = [model.decode(tgt[keep, 2:], memory[keep], model.source_mask(src[keep]),
                             c).numpy() for c in (cache, by_array)]
    expected, _, _ = full_and_memory(model, src[keep], tgt[keep])
    for out in outs:
        assert_allclose(out, expected[:, 2:], atol=ATOL, rtol=0)


def test_a_waiting_reorder_of_rows_out_of_range_is_refused(device, compiled):
    model = small_model()
    src, tgt = ids([[5, 3, 7], [4, 8, 1]]), ids([[1, 4, 6], [1, 9, 5]])
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    with mt.no_grad(), pytest.raises(IndexError):  # at the reorder, or when it is gathered
        model.decode(tgt[:, :2], memory, src_mask, cache)
        cache.reorder(np.array([0, 2]))
        model.decode(tgt[:, 2:], memory, src_mask, cache)


def test_cache_move_rows_refuses_host_rows_out_of_range(device):
    """On a device too, where the scatter would wrap row 5 of 2 round to row 1."""
    model = small_model()
    src, tgt = ids([[5, 3, 7], [4, 8, 1]]), ids([[1, 4, 6], [1, 9, 5]])
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    with mt.no_grad():
        model.decode(tgt[:, :2], memory, src_mask, cache)
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 2"):
        cache.move_rows(np.array([5]), np.array([0]), 1)


def test_cache_move_rows_keeps_the_rows_going_as_reorder_would(device):
    """Greedy decoding drops finished sentences with move_rows: rows 3 and 4 (still going)
    onto rows 0 and 2 (finished), then the first three rows, the same cache as reorder with
    the index [3, 1, 4], whose last positions decode as the full decode of those sentences."""
    model = small_model()
    src = ids([[5, 3, 7, 2, 9], [4, 8, 1, 0, 0], [6, 6, 2, 11, 0], [7, 2, 2, 0, 0],
               [9, 4, 8, 5, 3]])
    tgt = ids([[1, 4, 6, 2, 7], [1, 9, 5, 11, 2], [1, 3, 3, 12, 8], [1, 5, 7, 9, 4],
               [1, 8, 8, 6, 3]])
    keep = np.array([3, 1, 4])
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    xp = mt.backend.get_array_module(memory.data)  # the cache's rows are indexed on its device
    sources, targets = xp.asarray([3, 4]), xp.asarray([0, 2])
    moved, reordered = model.new_cache(), model.new_cache()
    for cache in (moved, reordered):
        model.decode(tgt[:, :3], memory, src_mask, cache)
    moved.move_rows(sources, targets, 3)
    reordered.reorder(keep)
    for (self_m, cross_m), (self_r, cross_r) in zip(moved.layers, reordered.layers,
                                                    strict=True):
        for m, r in ((self_m, self_r), (cross_m, cross_r)):
            assert_allclose(m.k.numpy(), r.k.numpy(), rtol=0, atol=0)
            assert_allclose(m.v.numpy(), r.v.numpy(), rtol=0, atol=0)
    memory, src_mask = memory[keep], model.source_mask(src[keep])
    rest = model.decode(tgt[keep, 3:], memory, src_mask, moved).numpy()
    expected, _, _ = full_and_memory(model, src[keep], tgt[keep])
    assert_allclose(rest, expected[:, 3:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("mask_rows", ["per sentence", "per query row"])
def test_cached_cross_attention_rows_can_serve_several_query_rows(device, mask_rows):
    """Beam search keeps one cross-attention row per sentence for its g beams: attention of
    B = g·B' query rows on B' cached rows equals attention on the rows repeated g times, with
    the mask given per sentence or per query row, and so do the recorded weights."""
    mt.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    g, B_kv, T, S = 3, 2, 2, 5
    rng = np.random.default_rng(0)
    query = mt.tensor(rng.standard_normal((g * B_kv, T, 16)).astype(np.float32))
    memory = mt.tensor(rng.standard_normal((B_kv, S, 16)).astype(np.float32))
    mask = np.ones((B_kv, 1, 1, S), dtype=bool)
    mask[1, ..., 3:] = False                               # the second sentence is shorter
    shared, repeated = mt.nn.attention.KVCache(), mt.nn.attention.KVCache()
    with mt.no_grad():
        attn(query[:B_kv], memory, memory, mask, cache=shared, static_kv=True)  # fills it
        rows = np.repeat(np.arange(B_kv), g)
        attn(query, memory[rows], memory[rows], mask[rows], cache=repeated, static_kv=True)
        attn.record_weights = True
        given_mask = mask if mask_rows == "per sentence" else mask[rows]
        out, weights = attn(query, memory, memory, given_mask, cache=shared, static_kv=True,
                            return_weights=True)
        recorded = attn.weights
        expected, expected_weights = attn(query, memory[rows], memory[rows], mask[rows],
                                          cache=repeated, static_kv=True, return_weights=True)
    assert shared.k.shape[0] == B_kv and repeated.k.shape[0] == g * B_kv
    assert_allclose(host(out), host(expected), atol=ATOL, rtol=0)
    assert_allclose(host(weights), host(expected_weights), atol=ATOL, rtol=0)
    assert_allclose(host(recorded), host(expected_weights), atol=ATOL, rtol=0)
    assert host(weights)[g:, :, :, 3:].max() == 0  # the shorter sentence's beams
    with pytest.raises(ValueError, match="cannot share"):
        attn(query[:5], memory, memory, None, cache=shared, static_kv=True)


@pytest.mark.parametrize("layout", ["(T, S)", "(1, 1, T, S)", "(B', 1, T, S)",
                                    "(B, 1, T, S)"])
def test_cached_cross_attention_rows_take_masks_per_query_position(device, layout):
    """The shared cached rows take every mask layout that attention on repeated rows takes,
    also with more than one query position (a mask per position must follow its query)."""
    mt.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    g, B_kv, T, S = 3, 2, 3, 5
    rng = np.random.default_rng(1)
    query = mt.tensor(rng.standard_normal((g * B_kv, T, 16)).astype(np.float32))
    memory = mt.tensor(rng.standard_normal((B_kv, S, 16)).astype(np.float32))
    rows = np.repeat(np.arange(B_kv), g)
    banded = np.tril(np.ones((T, S), dtype=bool), k=1)                  # (T, S)
    per_sentence = banded & (np.arange(S) < np.array([5, 3])[:, None, None])[:, None]
    given = {"(T, S)": banded, "(1, 1, T, S)": banded[None, None],
             "(B', 1, T, S)": per_sentence, "(B, 1, T, S)": per_sentence[rows]}[layout]
    per_row = (np.broadcast_to(banded, (g * B_kv, 1, T, S)) if "B" not in layout
               else per_sentence[rows])                                  # (B, 1, T, S)
    shared, repeated = mt.nn.attention.KVCache(), mt.nn.attention.KVCache()
    with mt.no_grad():
        attn(query[:B_kv, :1], memory, memory, None, cache=shared, static_kv=True)
        attn(query[:, :1], memory[rows], memory[rows], None, cache=repeated, static_kv=True)
        out, weights = attn(query, memory, memory, given, cache=shared, static_kv=True,
                            return_weights=True)
        expected, expected_weights = attn(query, memory[rows], memory[rows], per_row,
                                          cache=repeated, static_kv=True, return_weights=True)
    assert_allclose(host(out), host(expected), atol=ATOL, rtol=0)
    assert_allclose(host(weights), host(expected_weights), atol=ATOL, rtol=0)
    assert host(weights)[~np.broadcast_to(per_row, (g * B_kv, 4, T, S))].max() == 0


def test_self_attention_cache_keeps_stacked_weights_only_without_gradients(device):
    """While decoding without gradients a cache keeps the stacked Q/K/V projection of its
    first step for the next steps (the same numbers as stacking them again); with gradients
    it keeps none, so every step's graph reaches the layers' own weights."""
    mt.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = mt.randn(2, 1, 16)
    cache = mt.nn.attention.KVCache()
    with mt.no_grad():
        attn(x, x, x, cache=cache)
        weight, bias = cache.stacked
        second = attn(x, x, x, cache=cache)
    assert weight.shape == (48, 16) and bias.shape == (48,)
    expected = np.concatenate([host(layer.weight) for layer in (attn.w_q, attn.w_k, attn.w_v)])
    assert_array_equal(host(weight), expected)
    fresh = mt.nn.attention.KVCache()
    fresh.k, fresh.v = cache.k[:, :, :1], cache.v[:, :, :1]  # one position, no stacked weights
    with mt.no_grad():
        assert_allclose(host(attn(x, x, x, cache=fresh)), host(second), atol=ATOL, rtol=0)
    with_grad = mt.nn.attention.KVCache()
    attn(x, x, x, cache=with_grad)
    assert with_grad.stacked is None
    attn(x, x, x, cache=with_grad).sum().backward()
    assert attn.w_q.weight.grad is not None and attn.w_v.bias.grad is not None


# ----------------------------------------------------------------------------- attention

def test_attention_weights_are_distributions_with_zero_on_masked_keys(device):
    mt.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    B, T, S = 2, 3, 5
    query, key, value = mt.randn(B, T, 16), mt.randn(B, S, 16), mt.randn(B, S, 16)
    keep = np.array([[True, True, True, False, False], [True, False, True, True, True]])
    mask = keep[:, None, None, :]                                           # (B, 1, 1, S)
    out, weights = attn(query, key, value, mask, return_weights=True)
    assert out.shape == (B, T, 16) and weights.shape == (B, 4, T, S)
    w = weights.numpy()
    assert_allclose(w.sum(axis=-1), 1.0, atol=1e-6, rtol=0)
    blocked = np.broadcast_to(~keep[:, None, None, :], w.shape)
    assert (w[blocked] == 0).all()
    assert (w[~blocked] > 0).all()
    # a masked key's key and value vectors may be anything: the output does not move
    k2, v2 = key.numpy().copy(), value.numpy().copy()
    k2[~keep] = 100.0
    v2[~keep] = -50.0
    out2 = attn(query, mt.tensor(k2), mt.tensor(v2), mask)
    assert_allclose(out2.numpy(), out.numpy(), atol=1e-6, rtol=0)
    # while changing an unmasked value does
    v2[0, 0] += 1.0
    assert not np.allclose(attn(query, key, mt.tensor(v2), mask).numpy(), out.numpy())


# ----------------------------------------------------------------------------- size

PAPER = {"base": 65e6, "big": 213e6}


@pytest.mark.parametrize("name", ["base", "big"])
def test_table3_models_have_the_papers_parameter_counts(name, capsys):
    model = Transformer(TransformerConfig.named(name, 37000))
    count = model.num_parameters()
    del model
    gc.collect()
    with capsys.disabled():
        print(f"\n{name}: {count:,} parameters (paper: {PAPER[name] / 1e6:.0f}M)")
    assert abs(count - PAPER[name]) / PAPER[name] < 0.03


def formula_count(V_src, V_tgt, C, F_, N, share, tie, pre_norm=False):
    attn = 4 * (C * C + C)                      # w_q, w_k, w_v, w_o with biases
    ffn = C * F_ + F_ + F_ * C + C              # w_1, w_2 with biases
    norm = 2 * C                                # gain and bias
    encoder = N * (attn + ffn + 2 * norm)
    decoder = N * (2 * attn + ffn + 3 * norm)
    tables = V_src * C + (0 if share else V_tgt * C) + (0 if tie else V_tgt * C)
    return tables + encoder + decoder + (2 * norm if pre_norm else 0)


def test_tiny_parameter_count_matches_the_formula():
    model = Transformer(TransformerConfig.named("tiny", 20))
    assert model.num_parameters() == formula_count(20, 20, 32, 64, 2, True, True) == 43392
    pre = Transformer(TransformerConfig.named("tiny", 20, pre_norm=True))
    assert pre.num_parameters() == formula_count(20, 20, 32, 64, 2, True, True, pre_norm=True)


@pytest.mark.parametrize("share, tie", [(True, True), (True, False), (False, True),
                                        (False, False)])
def test_tied_tables_are_counted_once(share, tie):
    Vs, Vt = (20, 20) if share else (20, 24)
    config = TransformerConfig.named("tiny", 20, src_vocab_size=Vs, tgt_vocab_size=Vt,
                                     share_embeddings=share, tie_output=tie)
    count = Transformer(config).num_parameters()
    assert count == formula_count(Vs, Vt, 32, 64, 2, share, tie)
    shared = formula_count(Vs, Vt, 32, 64, 2, True, True)
    assert count - shared == (0 if share else Vt * 32) + (0 if tie else Vt * 32)


# ----------------------------------------------------------------------------- §3.4

def test_tied_weights_are_one_parameter_and_logits_are_hidden_times_E_transposed(device):
    model = small_model()
    E = model.src_embed.weight
    assert model.tgt_embed.weight is E and model.out_proj is None
    tables = [n for n, p in model.named_parameters() if p.shape == (V, 16)]
    assert tables == ["src_embed.weight"]
    assert sum(p is E for p in model.parameters()) == 1
    src_mask = model.source_mask(SRC)
    memory = model.encode(SRC, src_mask)
    x = model._embed(model._ids(TGT, "target"), model.tgt_embed, model.tgt_positions)
    hidden = model.decoder(x, memory, model.target_mask(TGT), src_mask)    # (B, T, C)
    logits = model.decode(TGT, memory, src_mask).numpy()                  # (B, T, V)
    assert_allclose(logits, hidden.numpy() @ E.numpy().T, atol=ATOL, rtol=1e-5)
    # one Parameter: the gradients of all three uses land in the same .grad
    model(SRC, TGT).sum().backward()
    assert E.grad is not None and model.tgt_embed.weight.grad is E.grad


def test_untied_model_has_separate_tables():
    model = small_model(share_embeddings=False, tie_output=False)
    weights = [model.src_embed.weight, model.tgt_embed.weight, model.out_proj.weight]
    assert len({id(w) for w in weights}) == 3
    names = [n for n, _ in model.named_parameters()]
    assert {"src_embed.weight", "tgt_embed.weight", "out_proj.weight"} <= set(names)


def test_embeddings_are_multiplied_by_sqrt_d_model(device, monkeypatch):
    model = small_model(p_dropout=0.0)
    model.train()  # p = 0: dropout is the identity even in training mode
    seen = {}

    def capture(x, mask=None):
        seen["x"] = x.numpy()
        return x

    monkeypatch.setattr(model.encoder, "forward", capture)
    model.encode(SRC)
    E = model.src_embed.weight.numpy()
    embedded = np.where((SRC == 0)[..., None], 0.0, E[SRC])                 # pad embeds to 0
    pe = mt.to_numpy(sinusoidal_table(SRC.shape[1], 16))
    assert_allclose(seen["x"], embedded * math.sqrt(16) + pe, atol=ATOL, rtol=1e-6)
    direct = model._embed(model._ids(SRC, "source"), model.src_embed, model.src_positions)
    assert_allclose(direct.numpy(), seen["x"], atol=0, rtol=0)


# ----------------------------------------------------------------------------- pre-LN

def test_pre_norm_adds_final_norms_and_changes_the_output(device):
    post, pre = small_model(), small_model(pre_norm=True)
    assert post.encoder.final_norm is None and post.decoder.final_norm is None
    assert pre.encoder.final_norm is not None and pre.decoder.final_norm is not None
    names = [n for n, _ in pre.named_parameters()]
    assert {"encoder.final_norm.gain", "decoder.final_norm.gain"} <= set(names)
    assert not any("final_norm" in n for n, _ in post.named_parameters())
    residuals = [m for m in pre.modules() if type(m).__name__ == "Residual"]
    assert residuals and all(m.pre_norm for m in residuals)
    out_pre, out_post = pre(SRC, TGT).numpy(), post(SRC, TGT).numpy()
    assert out_pre.shape == out_post.shape == (2, TGT.shape[1], V)
    assert np.isfinite(out_pre).all()
    assert not np.allclose(out_pre, out_post, atol=1e-3)


# ----------------------------------------------------------------------------- errors

def test_d_model_not_divisible_by_heads_is_refused():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible .*heads \(4\)"):
        MultiHeadAttention(30, 4)


@pytest.mark.parametrize("make, message", [
    (lambda: MultiHeadAttention(32, 0), "MultiHeadAttention: n_heads must be a positive integer, "
                                        "got 0"),
    (lambda: MultiHeadAttention(32, -4), "MultiHeadAttention: n_heads must be a positive "
                                         "integer, got -4"),
    (lambda: Linear(-1, 3), "Linear: in_features must be a positive integer, got -1"),
    (lambda: Linear(3, 2.5), "Linear: out_features must be a positive integer, got 2.5"),
    (lambda: Embedding(5, -3), "Embedding: embedding_dim must be a positive integer, got -3"),
    (lambda: LayerNorm(-1), "LayerNorm: d_model must be a positive integer, got -1"),
    (lambda: LayerNorm(8, eps=-1e-6), "LayerNorm: eps must be a number > 0 (it keeps "
                                      "1/√(σ² + eps) finite for a constant row), got -1e-06"),
    (lambda: LayerNorm(8, eps=True), "LayerNorm: eps must be a number > 0"),
    (lambda: Dropout("a"), "dropout: p must satisfy 0 <= p < 1 (the probability of zeroing an "
                           "entry), got p='a'"),
    (lambda: Dropout(1.0), "got p=1.0"),
    (lambda: PositionalEncoding(8, max_len=0), "PositionalEncoding: max_len must be a positive "
                                               "integer, got 0"),
    (lambda: TransformerConfig(10, 10, pad_id=1.5), "pad_id must be a token id of the "
                                                    "vocabulary, an int from 0 to 9, got 1.5"),
    (lambda: TransformerConfig(10, 10, pad_id=10), "an int from 0 to 9, got 10"),
    (lambda: TransformerConfig(10, 10, p_dropout="0.1"), "p_dropout must be a number in [0, 1), "
                                                         "got '0.1'"),
])
def test_layers_of_impossible_sizes_are_refused_naming_the_argument(make, message):
    """These once failed deep in NumPy (negative dimensions), with a ZeroDivisionError
    (n_heads=0), or not at all (n_heads=-4, eps < 0: nan at the first call)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_keys_and_values_of_the_wrong_shape_are_named():
    attn, q = MultiHeadAttention(16, 4), mt.randn(2, 3, 16)
    with pytest.raises(ValueError, match=re.escape("attention expects keys of shape (batch, "
                                                   "length, 16), got (5, 16)")):
        attn(q, mt.randn(5, 16), mt.randn(5, 16))  # a memory without its batch axis


@pytest.mark.parametrize("bad", [-1, V, V + 5])
def test_token_ids_outside_the_vocabulary_name_the_id_and_the_size(device, bad):
    model = small_model()
    with pytest.raises(ValueError, match=rf"token id {bad} .*vocabulary of {V} entries"):
        model(ids([[5, bad, 2]]), TGT)
    with pytest.raises(ValueError, match=rf"token id {bad} .*vocabulary of {V} entries"):
        model(SRC, ids([[1, 2, bad], [1, 2, 3]]))


def test_float_token_ids_are_refused(device):
    model = small_model()
    with pytest.raises(TypeError, match="source token ids must be integers.*float"):
        model(np.array([[1.0, 2.0]]), TGT)
    with pytest.raises(TypeError, match="target token ids must be integers"):
        model(SRC, TGT.astype(np.float32))


def test_one_dimensional_token_ids_ask_for_batch_and_length(device):
    model = small_model()
    with pytest.raises(ValueError, match=re.escape("(batch, length)")):
        model(np.array([5, 3, 7]), TGT)
    with pytest.raises(ValueError, match=re.escape("target token ids must have shape (batch, "
                                                   "length), got (6,)")):
        model(SRC, TGT[0])


def test_sequences_longer_than_max_len_are_refused(device):
    model = small_model(max_len=8)
    with pytest.raises(ValueError, match=r"max_len=8"):
        model(ids([[3] * 9]), ids([[1, 2]]))
    with pytest.raises(ValueError, match=r"max_len=8"):
        model(ids([[3, 4]]), ids([[1] * 9]))


def test_a_mask_that_does_not_broadcast_to_the_scores_is_refused(device):
    attn = MultiHeadAttention(16, 4)
    q, kv = mt.randn(2, 3, 16), mt.randn(2, 5, 16)
    with pytest.raises(ValueError, match=re.escape("mask of shape (2, 1, 1, 4) does not "
                                                   "broadcast to the scores' shape (2, 4, 3, 5)")):
        attn(q, kv, kv, np.ones((2, 1, 1, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"does not broadcast to the scores"):
        F.scaled_dot_product_attention(mt.randn(2, 3, 4), mt.randn(2, 5, 4), mt.randn(2, 5, 4),
                                       np.ones((3, 3), dtype=bool))


def test_loading_a_state_from_another_configuration_lists_the_names():
    two = Transformer(TransformerConfig.named("tiny", 20))
    one = Transformer(TransformerConfig.named("tiny", 20, n_layers=1))
    with pytest.raises(ValueError, match=r"unexpected encoder\.layers\.1\.self_attn\.w_q\.weight"):
        one.load_state_dict(two.state_dict())
    with pytest.raises(ValueError, match=r"missing encoder\.layers\.1\.self_attn\.w_q\.weight"):
        two.load_state_dict(one.state_dict())
    wide = Transformer(TransformerConfig.named("tiny", 20, d_ff=48))
    with pytest.raises(ValueError, match=re.escape(
            "encoder.layers.0.feed_forward.w_1.weight: saved (48, 32), model (64, 32)")):
        two.load_state_dict(wide.state_dict())
    with pytest.raises(ValueError, match=r"another configuration"):
        two.load_state_dict(Transformer(TransformerConfig.named("tiny", 30)).state_dict())


def test_unknown_named_config_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown configuration 'huge'.*tiny, small, base, big"):
        TransformerConfig.named("huge", 100)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match=r"share_embeddings needs one vocabulary.*100.*120"):
        TransformerConfig.named("tiny", 100, tgt_vocab_size=120)
    TransformerConfig.named("tiny", 100, tgt_vocab_size=120, share_embeddings=False)


def test_numpy_numbers_are_kept_as_python_numbers():
    """The configuration goes into every checkpoint as JSON, which takes no NumPy scalars."""
    config = TransformerConfig(np.int64(10), 10, d_model=np.int32(8), n_heads=2, d_ff=16,
                               p_dropout=np.float32(0.25), pad_id=np.int64(1))
    assert type(config.p_dropout) is float and config.p_dropout == 0.25
    assert type(config.d_model) is type(config.pad_id) is type(config.src_vocab_size) is int
    assert json.loads(json.dumps(config.to_dict()))["pad_id"] == 1


@pytest.mark.parametrize("field", ["d_model", "n_layers", "pad_id"])
def test_a_boolean_is_not_a_size_or_an_id(field):
    with pytest.raises(ValueError, match=f"{field} must be .*, got True"):
        TransformerConfig(10, 10, **{"d_model": 8, "n_heads": 2, "d_ff": 16, field: True})
