"""Gradients kept packed as their inputs were (functional/_packed.py): attention writes dQ, dK
and dV where Q, K and V lie in their projection, and Split's backward hands on the array they
make up instead of concatenating them. Whatever the arrays, the helpers' results are the
numbers the plain code gives: separate arrays, a concatenation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.functional import _packed, indexing
from minitransformer.nn import Transformer, TransformerConfig


def heads(projected, n, H):
    """Split (B, L, n·C) into n views (B, H, L, D), as multi-head attention does."""
    B, L, width = projected.shape
    C = width // n
    return [projected[..., i * C:(i + 1) * C].reshape(B, L, H, C // H).transpose(0, 2, 1, 3)
            for i in range(n)]


def test_views_of_one_projection_get_one_buffer_laid_out_as_it():
    q, k, v = heads(np.zeros((2, 5, 48), np.float32), 3, 4)
    dq, dk, dv = _packed.empty_like_views(np, [q, k, v])
    assert dq.base is dk.base is dv.base
    assert dq.base.nbytes == q.base.nbytes
    for a, d in ((q, dq), (k, dk), (v, dv)):
        assert d.shape == a.shape and d.strides == a.strides
    dq[...], dk[...], dv[...] = 1, 2, 3
    whole = dq.base.view(np.float32).reshape(2, 5, 48)
    assert_array_equal(whole[..., :16], 1)
    assert_array_equal(whole[..., 32:], 3)


def test_only_the_views_that_make_up_one_array_share_a_buffer():
    """Cross-attention: Q from its own projection, K and V from one."""
    (q,) = heads(np.zeros((2, 5, 16), np.float32), 1, 4)
    k, v = heads(np.zeros((2, 7, 32), np.float32), 2, 4)
    dq, dk, dv = _packed.empty_like_views(np, [q, k, v])
    assert dk.base is dv.base and dq.base is not dk.base
    assert dq.shape == q.shape and dk.strides == k.strides


@pytest.mark.parametrize("case", ["same array twice", "part of the array", "not views"])
def test_arrays_that_are_not_a_partition_of_one_array_stay_separate(case):
    projected = np.zeros((2, 5, 48), np.float32)
    q, k, v = heads(projected, 3, 4)
    arrays = {"same array twice": [q, q, v], "part of the array": [q, k],
              "not views": [np.zeros((2, 3)), np.zeros((2, 3))]}[case]
    grads = _packed.empty_like_views(np, arrays)
    assert all(g.base is None for g in grads)
    assert [g.shape for g in grads] == [a.shape for a in arrays]


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), axis_seed=st.integers(0, 9),
       n=st.integers(1, 4), packed=st.booleans(), order=st.permutations(range(4)))
def test_split_backward_is_the_concatenation_whatever_its_gradients_are(
        shape, axis_seed, n, packed, order):
    """Split's backward gives concat(douts) for separate arrays, for sections of one array in
    their order (handed on without a copy), and for sections out of order (copied)."""
    axis = axis_seed % len(shape)
    shape[axis] *= n
    rng = np.random.default_rng(axis_seed)
    whole = rng.standard_normal(shape)
    parts = np.split(whole, n, axis=axis)
    if packed:
        order = [i for i in order if i < n]
        parts = [parts[i] for i in order]
    else:
        parts = [p.copy() for p in parts]
    split = indexing.Split(n, axis)
    split.forward(np.empty(shape))
    result = split.backward(*parts)
    assert_array_equal(result, np.concatenate(parts, axis=axis))
    if packed and order == sorted(order) and n > 1:
        assert np.shares_memory(result, whole)  # handed on, not copied


def test_side_by_side_refuses_gaps_and_other_buffers():
    whole = np.arange(24.0).reshape(2, 12)
    a, b, c = whole[:, :4], whole[:, 4:8], whole[:, 8:]
    assert _packed.side_by_side((a, b, c), 1) is not None
    assert _packed.side_by_side((a, c), 1) is None            # a gap: b's columns
    assert _packed.side_by_side((a, b.copy()), 1) is None     # another buffer
    assert _packed.side_by_side((a, b), 0) is None            # not consecutive along axis 0


def test_a_training_step_hands_the_projections_their_gradients_without_a_copy(monkeypatch):
    """In every attention layer of a step (self-attention's Q, K, V; cross-attention's K, V),
    Split's backward returns the array attention wrote its gradients into."""
    seen = []
    backward = indexing.Split.backward

    def recorded(self, *douts):
        da = backward(self, *douts)
        seen.append(all(np.shares_memory(da, d) for d in douts))
        return da
    monkeypatch.setattr(indexing.Split, "backward", recorded)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", 60))
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(4, 60, (3, 7)), rng.integers(4, 60, (3, 6))
    F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], label_smoothing=0.1,
                    ignore_index=0).backward()
    layers = model.config.n_layers
    assert seen == [True] * (3 * layers)  # encoder self, decoder self and cross


def test_a_split_whose_gradients_share_an_unusual_buffer_still_gets_the_concatenation():
    """Gradients side by side in an array that owns its memory with its axes out of order
    (a product with a transposed operand makes one): the joined view, not an error."""
    x = mt.tensor(np.random.default_rng(2).standard_normal((2, 3, 4)), requires_grad=True)
    w = np.random.default_rng(3).standard_normal((3, 2, 4)).transpose(1, 0, 2)
    (F.concat(F.split(x, 2, axis=2), axis=2) * mt.tensor(w)).sum().backward()
    assert_array_equal(x.grad, w)


def test_broadcast_parts_are_not_joined_and_a_joined_view_keeps_them_read_only():
    row = np.arange(4.0)
    repeated = np.broadcast_to(row[None, :], (3, 4))           # stride 0 along axis 0
    assert _packed.side_by_side((repeated[:1], repeated[1:]), 0) is None
    whole = np.arange(12.0).reshape(3, 4)
    whole.flags.writeable = False
    joined = _packed.side_by_side((whole[:, :2], whole[:, 2:]), 1)
    assert_array_equal(joined, whole) and not joined.flags.writeable


def test_a_broadcast_view_gets_an_array_of_its_own():
    """A zero stride makes a view look larger than the memory it covers: such views are
    never laid out in a shared buffer (a write there would land twice)."""
    base = np.zeros(4)
    a, b = np.broadcast_to(base[:1], (2,)), base[2:4]
    da, db = _packed.empty_like_views(np, [a, b])
    assert da.base is None and db.base is None
    da[...] = [1, 2]
    assert_array_equal(da, [1, 2])
