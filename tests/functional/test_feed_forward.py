"""feed_forward, the feed-forward network as one Function: linear_relu then linear's numbers,
db₁ the same bits whatever the workers, the gradients it is asked for, clear errors."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.functional import _blocks, _compiled, _products
from minitransformer.functional.feed_forward import GROUP_ROWS, FeedForward, _mask_and_sum

RNG = np.random.default_rng(0)
KERNELS = ["numpy", pytest.param("compiled", marks=pytest.mark.skipif(
    not _compiled.available(), reason="needs Numba"))]


def weights(C, F_, C_out, dtype):
    return [(RNG.standard_normal(shape) * 0.3).astype(dtype)
            for shape in ((F_, C), (F_,), (C_out, F_), (C_out,))]


def run(function, x, params, dout, wanted=(True,) * 5):
    """function's output and the gradients of (x, W₁, b₁, W₂, b₂), None where not wanted."""
    tensors = [mt.tensor(a, requires_grad=w) for a, w in zip([x, *params], wanted, strict=True)]
    y = function(*tensors)
    y.backward(mt.tensor(dout))
    return [y.numpy()] + [t.grad for t in tensors]


def separate(x, w1, b1, w2, b2):
    return F.linear(F.linear_relu(x, w1, b1), w2, b2)


@pytest.fixture
def kernels(request, monkeypatch):
    mt.set_compiled_kernels(request.param == "compiled")
    yield request.param
    mt.set_compiled_kernels(False)


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_feed_forward_gives_linear_relu_then_linears_numbers(kernels, monkeypatch, dtype):
    """On one worker (one product each, the same calls): the output and dx, dW₁, dW₂, db₂ the
    same bits as the two Functions; db₁, whose rows are added in groups, equal to rounding."""
    monkeypatch.setattr(_blocks, "WORKERS", 1)
    x = RNG.standard_normal((3, 70, 12)).astype(dtype)
    params = weights(12, 40, 12, dtype)
    dout = RNG.standard_normal((3, 70, 12)).astype(dtype)
    fused, apart = run(F.feed_forward, x, params, dout), run(separate, x, params, dout)
    z = x @ params[0].T + params[1]
    assert (z > 0).any() and (z <= 0).any()                # the ReLU masks some, not all
    for name, i in (("y", 0), ("dx", 1), ("dW1", 2), ("dW2", 4), ("db2", 5)):
        np.testing.assert_array_equal(fused[i], apart[i], err_msg=name)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12)
    np.testing.assert_allclose(fused[3], apart[3], **tolerance)


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
def test_db1_is_the_same_bits_on_one_two_or_three_workers(kernels, monkeypatch):
    """dh's product cut into blocks of rows on the pool (each beginning at a multiple of
    GROUP_ROWS) or into for_blocks' blocks: the pass after it adds the same groups of rows in
    the same order, so db₁ does not depend on the thread count. (dh here is I @ dh₀, exact
    whatever the blocks, so that only the pass's sums could differ; 301 rows leave a short
    last group.)"""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 40 * 4 * 7)            # blocks of 7+ rows
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    dh0 = RNG.standard_normal((301, 40)).astype(np.float32)
    h = np.maximum(RNG.standard_normal((301, 40)), 0).astype(np.float32)
    identity = np.eye(301, dtype=np.float32)
    results = []
    for workers in (1, 2, 3):
        monkeypatch.setattr(_blocks, "WORKERS", workers)
        dz = np.empty_like(dh0)
        sums = np.empty((-(-301 // GROUP_ROWS), 40), dtype=np.float32)
        _products.matmul(identity, dh0, out=dz, align=GROUP_ROWS,
                         after=_mask_and_sum(dz, h, sums, np))
        np.testing.assert_array_equal(dz, dh0 * (h > 0))
        results.append(sums.sum(axis=0))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])                # db₁
    np.testing.assert_allclose(results[0], (dh0 * (h > 0)).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert 301 % GROUP_ROWS


def test_the_product_blocks_of_dh_begin_at_multiples_of_the_group(monkeypatch):
    """``after``'s slices begin at multiples of ``align`` on the pool's blocks of rows and on
    for_blocks' blocks alike, and cover every row once."""
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 40 * 4 * 7)
    a, b = RNG.standard_normal((301, 8)), RNG.standard_normal((8, 40))
    for workers in (1, 2, 3):
        monkeypatch.setattr(_blocks, "WORKERS", workers)
        seen = []
        out = _products.matmul(a, b, np.empty((301, 40)), after=seen.append, align=16)
        np.testing.assert_allclose(out, a @ b, rtol=1e-12)
        assert all(rows.start % 16 == 0 for rows in seen), (workers, seen)
        covered = sorted(i for rows in seen for i in range(rows.start, rows.stop))
        assert covered == list(range(301))


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
def test_feed_forward_db1_is_the_same_bits_whatever_the_workers(kernels, monkeypatch):
    """Through the Function, dh's product cut over 1, 2 or 3 workers (N ≥ F, every product
    split): db₁ the same bits. dout has one column and W₂ entries ±1 and ±0.5, so dh = dout W₂
    is exact however BLAS blocks it and only db₁'s order of adding could differ."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 40 * 4 * 7)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    x = RNG.standard_normal((301, 24)).astype(np.float32)
    w1, b1, _, _ = weights(24, 40, 1, np.float32)
    w2 = RNG.choice([-1.0, -0.5, 0.5, 1.0], size=(1, 40)).astype(np.float32)
    b2 = np.zeros(1, np.float32)
    dout = (RNG.standard_normal((301, 1)) * 2.0 ** RNG.integers(-8, 8, (301, 1))
            ).astype(np.float32)
    results = []
    for workers in (1, 2, 3):
        monkeypatch.setattr(_blocks, "WORKERS", workers)
        results.append(run(F.feed_forward, x, [w1, b1, w2, b2], dout))
    for other in results[1:]:
        np.testing.assert_array_equal(other[3], results[0][3])          # db₁
    expected = run(separate, x, [w1, b1, w2, b2], dout)           # sums of terms up to 2⁸
    np.testing.assert_allclose(results[0][3], expected[3], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
@pytest.mark.parametrize("wanted", [(False, True, True, True, True),
                                    (True, True, False, True, True),
                                    (False, False, False, True, True),
                                    (True, False, False, False, False)])
def test_feed_forward_computes_the_gradients_asked_for_and_no_others(kernels, monkeypatch,
                                                                     wanted):
    """backward returns the gradients needs_input_grad asks for (the two Functions' numbers)
    and None for the others, and makes only the products they need: dW₂ = doutᵀh, dh = dout
    W₂ when anything below it is wanted, dx = dz W₁ and dW₁ = dzᵀx."""
    x = RNG.standard_normal((50, 6)).astype(np.float32)
    params = weights(6, 10, 6, np.float32)
    dout = RNG.standard_normal((50, 6)).astype(np.float32)
    apart = run(separate, x, params, dout)
    function = FeedForward()
    function.needs_input_grad = wanted
    function.forward(x, *params)
    products, depth = [], []
    matmul = _products.matmul

    def counted(a, b, *args, **kwargs):  # the backward's own matrix products, not sums
        if not depth and a.ndim == 2:
            products.append((a.shape, b.shape))
        depth.append(1)
        try:
            return matmul(a, b, *args, **kwargs)
        finally:
            depth.pop()
    monkeypatch.setattr(_products, "matmul", counted)
    got = function.backward(dout)
    for want, gradient, expected in zip(wanted, got, apart[1:], strict=True):
        if want:
            np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-5)
        else:
            assert gradient is None
    below = wanted[0] or wanted[1] or wanted[2]
    assert len(products) == wanted[3] + below + wanted[0] + wanted[1], products


def test_the_feed_forward_module_is_one_function():
    from minitransformer.nn.feed_forward import PositionwiseFeedForward
    layer = PositionwiseFeedForward(8, 16)
    y = layer(mt.tensor(RNG.standard_normal((2, 3, 8)).astype(np.float32), requires_grad=True))
    assert y.creator.name == "FeedForward" and y.shape == (2, 3, 8)


@pytest.mark.parametrize("shapes, message", [
    (((2, 4), (5, 4), (5,), (4, 6), (4,)), r"W₁ \(5, 4\) and W₂ \(4, 6\) must be matrices"),
    (((2, 4), (5, 4), (4,), (4, 5), (4,)), r"biases \(4,\) and \(4,\) do not fit"),
    (((2, 3), (5, 4), (5,), (4, 5), (4,)), r"input of shape \(2, 3\) does not fit W₁"),
])
def test_feed_forward_refuses_shapes_that_do_not_chain(shapes, message):
    arrays = [mt.tensor(np.zeros(shape)) for shape in shapes]
    with pytest.raises(ValueError, match=message):
        F.feed_forward(*arrays)
