"""Invariants of the fused Functions: what must hold whatever the numbers (hypothesis)."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitransformer as mt
from minitransformer import functional as F
from minitransformer import nn
from minitransformer.functional import _blocks
from minitransformer.functional.dropout import Dropout

# The device fixture only switches the current device, so reusing it across examples is safe.
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
FINITE = st.floats(-20, 20, allow_nan=False, width=64)
RNG = np.random.default_rng(0)


def on(device, array, grad=False):
    return mt.tensor(np.asarray(array), device=device, requires_grad=grad)


def host(x):
    return mt.to_numpy(x.data if isinstance(x, mt.Tensor) else x)


def matrices(min_side=1, max_side=6):
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=min_side,
                                                   max_side=max_side), elements=FINITE)


def qkv(B=2, T=4, S=5, D=3):
    return (RNG.standard_normal((B, T, D)), RNG.standard_normal((B, S, D)),
            RNG.standard_normal((B, S, D)))


# ----------------------------------------------------------------------------- softmax

@SETTINGS
@given(x=matrices(), shift=FINITE)
def test_softmax_rows_sum_to_one_and_ignore_a_constant_shift(device, x, shift):
    y = host(F.softmax(on(device, x)))
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(host(F.softmax(on(device, x + shift))), y, atol=1e-12)


@SETTINGS
@given(x=matrices())
def test_log_softmax_is_the_log_of_softmax(device, x):
    np.testing.assert_allclose(host(F.log_softmax(on(device, x))),
                               np.log(host(F.softmax(on(device, x)))), atol=1e-10)


def test_softmax_and_log_softmax_are_stable_for_huge_logits(device):
    x = np.array([[1000.0, 1000.0, 990.0], [-1000.0, 0.0, 1000.0]], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = host(F.softmax(on(device, x)))
        logy = host(F.log_softmax(on(device, x)))
    assert np.isfinite(logy).all() and np.isfinite(y).all()
    np.testing.assert_allclose(logy[0], [-np.log(2), -np.log(2), -10 - np.log(2)], rtol=1e-4)
    np.testing.assert_allclose(logy[1, 2], 0.0, atol=1e-6)


# ----------------------------------------------------------------------------- attention

@SETTINGS
@given(mask=hnp.arrays(np.bool_, (2, 4, 5)))
def test_masked_keys_get_exactly_zero_weight_and_nothing_is_nan(device, mask):
    q, k, v = (on(device, a, grad=True) for a in qkv())
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out, weights = F.scaled_dot_product_attention(q, k, v, on(device, mask),
                                                      return_weights=True)
        out.backward(on(device, RNG.standard_normal(out.shape)))
    weights = host(weights)
    assert (weights[~mask] == 0.0).all()
    empty = ~mask.any(axis=-1)                                     # (B, T) fully masked rows
    np.testing.assert_allclose(weights.sum(axis=-1)[~empty], 1.0, rtol=1e-12)
    assert (weights[empty] == 0.0).all() and (host(out)[empty] == 0.0).all()
    for t in (q, k, v):
        assert np.isfinite(host(t.grad)).all()
    assert (host(q.grad)[empty] == 0.0).all()  # a query that sees nothing learns nothing


def test_a_fully_masked_row_in_float32_gives_zeros_without_nan(device):
    q, k, v = (on(device, a.astype(np.float32), grad=True) for a in qkv(B=1, T=2, S=3))
    mask = np.array([[True, False, True], [False, False, False]])
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out = F.scaled_dot_product_attention(q, k, v, mask)
        out.backward(on(device, np.ones(out.shape, dtype=np.float32)))
    assert (host(out)[0, 1] == 0.0).all() and np.isfinite(host(out)).all()
    assert all(np.isfinite(host(t.grad)).all() for t in (q, k, v))


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_over_no_keys_gives_zeros_and_zero_gradients(device, with_mask):
    """S = 0: every query sees nothing, like a fully masked row."""
    q = on(device, RNG.standard_normal((2, 3, 4)), grad=True)
    k = on(device, np.zeros((2, 0, 4)), grad=True)
    v = on(device, np.zeros((2, 0, 5)), grad=True)
    mask = np.ones((3, 0), dtype=bool) if with_mask else None
    out = F.scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 3, 5) and not host(out).any()
    out.backward(on(device, RNG.standard_normal(out.shape)))
    assert host(q.grad).shape == (2, 3, 4) and not host(q.grad).any()
    assert host(k.grad).shape == (2, 0, 4) and host(v.grad).shape == (2, 0, 5)


def test_an_all_true_mask_is_the_same_as_no_mask(device):
    q, k, v = (on(device, a) for a in qkv())
    full = F.scaled_dot_product_attention(q, k, v, np.ones((4, 5), dtype=bool))
    np.testing.assert_array_equal(host(full), host(F.scaled_dot_product_attention(q, k, v)))


@SETTINGS
@given(i=st.integers(0, 4), seed=st.integers(0, 2**16))
def test_causal_attention_at_i_ignores_keys_and_values_after_i(device, i, seed):
    q, k, v = qkv(T=5, S=5)
    mask = F.causal_mask(5)
    before = host(F.scaled_dot_product_attention(on(device, q), on(device, k), on(device, v),
                                                 mask))
    k2, v2 = k.copy(), v.copy()
    noise = np.random.default_rng(seed).standard_normal((2, 5 - i - 1, 3))
    k2[:, i + 1:] += noise
    v2[:, i + 1:] -= noise
    after = host(F.scaled_dot_product_attention(on(device, q), on(device, k2), on(device, v2),
                                                mask))
    np.testing.assert_array_equal(after[:, :i + 1], before[:, :i + 1])


# ----------------------------------------------------------------------------- layer norm

@SETTINGS
@given(x=matrices(min_side=2))
def test_layer_norm_rows_have_zero_mean_and_unit_variance(device, x):
    assume((x.var(axis=-1) > 1e-3).all())  # a constant row has variance 0, not 1
    C = x.shape[-1]
    y = host(F.layer_norm(on(device, x), on(device, np.ones(C)), on(device, np.zeros(C)),
                          eps=1e-12))
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-8)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("value", [0.1, 3.3, 1000.1])
def test_layer_norm_sends_a_constant_float32_row_to_the_bias(device, value):
    """A row with no variance has x̂ = 0, whatever the rounding of its float32 mean."""
    C = 512
    x = on(device, np.full((3, C), value, dtype=np.float32))
    bias = RNG.standard_normal(C).astype(np.float32)
    y = host(F.layer_norm(x, on(device, np.ones(C, dtype=np.float32)), on(device, bias),
                          eps=1e-6))
    np.testing.assert_allclose(y, np.broadcast_to(bias, y.shape), atol=1e-6)


# ----------------------------------------------------------------------------- dropout

def test_dropout_in_evaluation_or_with_p_0_is_the_identity(device):
    x = on(device, RNG.standard_normal((3, 4)), grad=True)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x


def kept_scale(device, p):
    """1 / (1 - p'), p' the probability the device really drops with: on the CPU p rounded
    to a multiple of 1/65536 (its uniform draws are 16-bit integers), on CuPy p itself."""
    if device == "cuda":
        return 1 / (1 - p)
    levels = Dropout.LEVELS
    return levels / (levels - min(round(p * levels), levels - 1))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_zeroes_about_p_and_scales_the_rest(device, p):
    x = on(device, RNG.uniform(1, 2, size=(200, 100)))
    y = host(F.dropout(x, p))
    dropped = y == 0
    assert abs(dropped.mean() - p) < 0.02
    np.testing.assert_allclose(y[~dropped], host(x)[~dropped] * kept_scale(device, p),
                               rtol=1e-12)
    assert abs(kept_scale(device, p) * (1 - p) - 1) < 1e-4


@pytest.mark.parametrize("p", [0.999, 0.99999])
def test_dropout_keeps_the_expected_value_even_for_p_near_1(device, p):
    """E[y] = x: the kept share times the scale is 1, however coarse the CPU's draws are
    near p = 1 (the scale is that of the probability really used, not of p)."""
    mt.manual_seed(0)
    n = 2_000_000
    y = host(F.dropout(on(device, np.ones(n)), p))
    kept = np.count_nonzero(y)
    assert kept > 0
    np.testing.assert_allclose(np.unique(y[y != 0]), [kept_scale(device, p)])
    expected_kept = n / kept_scale(device, p)
    assert abs(kept - expected_kept) < 5 * np.sqrt(expected_kept)  # five binomial sigmas


def test_dropout_keeps_a_nan_visible_even_where_it_drops_it(device):
    """y = x · keep / (1 - p): a dropped NaN is NaN · 0 = NaN on every device, so a NaN
    check on the loss sees a broken forward whatever the mask."""
    y = host(F.dropout(on(device, np.full((20, 30), np.nan)), 0.5))
    assert np.isnan(y).all()


def test_dropout_same_seed_same_mask_and_backward_uses_it(device):
    data = RNG.uniform(1, 2, size=(8, 16))
    mt.manual_seed(3)
    first = host(F.dropout(on(device, data), 0.3))
    mt.manual_seed(3)
    x = on(device, data, grad=True)
    y = F.dropout(x, 0.3)
    np.testing.assert_array_equal(host(y), first)
    y.backward(on(device, np.ones(y.shape)))
    keep = first != 0
    np.testing.assert_array_equal(host(x.grad), keep * kept_scale(device, 0.3))
    assert (host(F.dropout(on(device, data), 0.3)) != first).any()  # the stream moved on


def test_dropout_masks_neighbours_independently(device):
    """The CPU reads four 16-bit draws from each 64-bit word of the generator: every one of
    the four places in a word drops with probability p, and neighbours (in one word or not)
    are dropped together with probability p², as independent draws would be."""
    mt.manual_seed(1)
    n, p = 400_000, 0.5
    dropped = host(F.dropout(on(device, np.ones(n)), p)) == 0
    sigma = np.sqrt(p * (1 - p) / (n // 4))
    for place in range(4):
        assert abs(dropped[place::4].mean() - p) < 5 * sigma
    for gap in (1, 2, 3, 4):
        both = (dropped[:-gap] & dropped[gap:]).mean()
        assert abs(both - p * p) < 5 * np.sqrt(p * p * (1 - p * p) / (n - gap))


# ----------------------------------------------------------------------------- the residual

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dropout_add_layer_norm_is_the_three_functions_bit_for_bit(device, dtype,
                                                                    monkeypatch):
    """LayerNorm(x + Dropout(h)) fused gives the numbers of dropout, add and layer norm one
    after the other, forward and every gradient, over many blocks of rows."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)   # 21 rows a block: 100 blocks
    shape, C = (3, 700, 48), 48
    x, h, dout = (RNG.standard_normal(shape).astype(dtype) for _ in range(3))
    gain, bias = (RNG.standard_normal(C).astype(dtype) for _ in range(2))
    results = []
    for fused in (True, False):
        inputs = [on(device, a, grad=True) for a in (x, h, gain, bias)]
        mt.manual_seed(4)
        if fused:
            y = F.dropout_add_layer_norm(*inputs, p=0.2)
        else:
            y = F.layer_norm(inputs[0] + F.dropout(inputs[1], 0.2), inputs[2], inputs[3])
        y.backward(on(device, dout))
        results.append([host(y)] + [host(t.grad) for t in inputs])
    for fused, unfused in zip(*results, strict=True):
        np.testing.assert_array_equal(fused, unfused)


def test_dropout_add_layer_norm_in_evaluation_is_the_layer_norm_of_the_sum(device):
    x, h = (on(device, RNG.standard_normal((2, 3, 4))) for _ in range(2))
    gain, bias = on(device, np.ones(4)), on(device, np.zeros(4))
    expected = host(F.layer_norm(x + h, gain, bias))
    for y in (F.dropout_add_layer_norm(x, h, gain, bias, 0.5, training=False),
              F.dropout_add_layer_norm(x, h, gain, bias, 0.0)):
        np.testing.assert_array_equal(host(y), expected)


def test_dropout_add_layer_norm_names_mismatched_shapes():
    x, gain, bias = mt.tensor(np.ones((2, 4))), mt.tensor(np.ones(4)), mt.tensor(np.zeros(4))
    with pytest.raises(ValueError, match=r"the residual x \(2, 4\) and the sub-layer's output "
                                         r"h \(2, 3\) must have one shape"):
        F.dropout_add_layer_norm(x, mt.tensor(np.ones((2, 3))), gain, bias, 0.1)
    with pytest.raises(ValueError, match=r"gain of shape \(3,\) does not fit"):
        F.dropout_add_layer_norm(x, x, mt.tensor(np.ones(3)), bias, 0.1)


def test_residual_in_training_runs_one_function_and_in_evaluation_three():
    """Post-LN Residual: the fused Function in training; in evaluation (no dropout) the
    layer norm of the sum, whose graph still shows its parts."""
    residual = nn.Residual(4, p_dropout=0.1)
    x = mt.tensor(RNG.standard_normal((2, 3, 4)).astype("float32"), requires_grad=True)
    y = residual(x, lambda t: t * 2.0)
    assert y.creator.name == "DropoutAddLayerNorm"
    residual.eval()
    assert residual(x, lambda t: t * 2.0).creator.name == "LayerNorm"


# ----------------------------------------------------------------------------- embedding

def test_embedding_backward_accumulates_repeats_and_skips_the_padding_row(device):
    W = on(device, RNG.standard_normal((5, 3)), grad=True)
    ids = np.array([[2, 0, 2, 4], [2, 1, 0, 0]])
    y = F.embedding(ids, W, padding_idx=0)
    dout = RNG.standard_normal(y.shape)
    y.backward(on(device, dout))
    grad = host(W.grad)
    np.testing.assert_allclose(grad[2], dout[0, 0] + dout[0, 2] + dout[1, 0], rtol=1e-12)
    np.testing.assert_allclose(grad[1], dout[1, 1], rtol=1e-12)
    assert (grad[0] == 0).all() and (grad[3] == 0).all()
    np.testing.assert_array_equal(host(y)[0, 1], 0.0)  # padding embeds to zero, row unread
    np.testing.assert_array_equal(host(y)[1, 1], host(W)[1])


# ----------------------------------------------------------------------------- cross-entropy

@SETTINGS
@given(data=st.data())
def test_cross_entropy_without_smoothing_is_the_nll_of_log_softmax(device, data):
    N, V = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 7))
    logits = data.draw(hnp.arrays(np.float64, (N, V), elements=FINITE))
    targets = np.array(data.draw(st.lists(st.integers(0, V - 1), min_size=N, max_size=N)))
    loss = F.cross_entropy(on(device, logits), targets).item()
    logp = host(F.log_softmax(on(device, logits)))
    np.testing.assert_allclose(loss, -logp[np.arange(N), targets].mean(), rtol=1e-10)


@SETTINGS
@given(eps=st.floats(0.01, 0.9), seed=st.integers(0, 2**16))
def test_smoothed_cross_entropy_is_the_explicit_sum_over_q(device, eps, seed):
    rng = np.random.default_rng(seed)
    logits, targets = rng.standard_normal((2, 3, 6)), rng.integers(0, 6, size=(2, 3))
    q = (1 - eps) * np.eye(6)[targets] + eps / 6                   # (2, 3, 6)
    logp = host(F.log_softmax(on(device, logits)))
    loss = F.cross_entropy(on(device, logits), targets, label_smoothing=eps).item()
    np.testing.assert_allclose(loss, -(q * logp).sum(axis=-1).mean(), rtol=1e-10)


def test_ignored_targets_contribute_nothing(device):
    logits, targets = RNG.standard_normal((4, 5)), np.array([1, 0, 3, 0])
    z = on(device, logits, grad=True)
    loss = F.cross_entropy(z, targets, label_smoothing=0.1, ignore_index=0)
    loss.backward()
    changed = logits.copy()
    changed[[1, 3]] = RNG.standard_normal((2, 5)) * 10
    real_only = F.cross_entropy(on(device, logits[[0, 2]]), targets[[0, 2]], label_smoothing=0.1)
    again = F.cross_entropy(on(device, changed), targets, label_smoothing=0.1, ignore_index=0)
    np.testing.assert_allclose(loss.item(), real_only.item(), rtol=1e-12)
    np.testing.assert_allclose(again.item(), loss.item(), rtol=1e-12)
    assert (host(z.grad)[[1, 3]] == 0).all() and (host(z.grad)[[0, 2]] != 0).any()


def test_all_targets_ignored_gives_zero_loss_and_zero_gradient(device):
    z = on(device, RNG.standard_normal((2, 3, 5)).astype(np.float32), grad=True)
    with np.errstate(invalid="raise", divide="raise"):
        loss = F.cross_entropy(z, np.full((2, 3), -100), 0.1, ignore_index=-100)
        loss.backward()
    assert loss.item() == 0.0 and loss.dtype == np.float32
    assert (host(z.grad) == 0).all()
