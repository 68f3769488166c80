"""The GPU's products go to cuBLAS directly (functional/_cublas.py): the arguments of each call
are found from shapes and strides alone, so they are checked here without a GPU. ``emulate``
reads the operands' memory as cuBLAS would (column-major, with those leading dimensions,
operations and batch strides) and must give ``numpy.matmul``'s result for every layout: rows
or columns contiguous, views with gaps, broadcast batch axes, vectors, axes of one element.
tests/test_cuda.py runs the real call against ``cupy.matmul`` where there is a GPU."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer.functional import _cublas


def run_emulated(gemm, a, b, c):
    c[...] = _cublas.emulate(gemm, a, b, np).reshape(c.shape)


def product(a, b, out=None):
    return _cublas.product(a, b, out, np, run_emulated)


def layout(x, how):
    """x with the same values, laid out as ``how`` says."""
    if how == "contiguous":
        return x
    if how == "transposed":  # columns contiguous: a transposed copy, transposed back
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)
    if how == "gaps":        # rows contiguous with a gap after each (a slice of a wider array)
        wide = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), dtype=x.dtype)
        wide[..., :x.shape[-1]] = x
        return wide[..., :x.shape[-1]]
    if how == "strided":     # every other element: no contiguous axis at all
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    if how == "reversed":    # negative strides: a reversed copy, read backwards
        return np.ascontiguousarray(x[..., ::-1, ::-1])[..., ::-1, ::-1]
    if how == "batch-permuted":  # batch axes swapped in memory: no single batch stride
        if x.ndim < 4:
            return x
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 0, 1)), 0, 1)
    raise AssertionError(how)


LAYOUTS = ["contiguous", "transposed", "gaps", "strided", "reversed", "batch-permuted"]


@settings(max_examples=300, deadline=None)
@given(M=st.integers(1, 5), K=st.integers(1, 5), N=st.integers(1, 5),
       batch_a=st.lists(st.integers(1, 3), max_size=2),
       batch_b=st.lists(st.integers(1, 3), max_size=2),
       how_a=st.sampled_from(LAYOUTS), how_b=st.sampled_from(LAYOUTS),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
def test_the_call_computes_numpys_product_for_every_layout(M, K, N, batch_a, batch_b, how_a,
                                                           how_b, dtype, seed):
    # batch axes that broadcast: where both have an axis, one of them may be 1
    n = min(len(batch_a), len(batch_b))
    for i in range(1, n + 1):
        if batch_a[-i] != batch_b[-i] and 1 not in (batch_a[-i], batch_b[-i]):
            batch_b[-i] = batch_a[-i]
    rng = np.random.default_rng(seed)
    a = layout(rng.standard_normal((*batch_a, M, K)).astype(dtype), how_a)
    b = layout(rng.standard_normal((*batch_b, K, N)).astype(dtype), how_b)
    expected = np.matmul(a, b)
    got = product(a, b)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-5 if dtype == "float32" else 1e-12)


def test_repeated_rows_and_overlapping_windows():
    """A row stride of 0 (a broadcast row) and rows that overlap (a sliding window): layouts
    cuBLAS cannot read as they are, copied first."""
    rng = np.random.default_rng(2)
    row = rng.standard_normal((1, 5))
    repeated = np.broadcast_to(row, (4, 5))                            # strides (0, 8)
    flat = rng.standard_normal(12)
    windows = np.lib.stride_tricks.as_strided(flat, shape=(5, 4), strides=(8, 8))  # overlap
    b = rng.standard_normal((5, 3))
    for a in (repeated, windows, windows.T):                            # (4, 5), (5, 4), (4, 5)
        K = a.shape[-1]
        np.testing.assert_allclose(product(a, b[:K]), a @ b[:K], rtol=1e-12, atol=1e-12)
    column_windows = np.lib.stride_tricks.as_strided(flat, shape=(5, 3), strides=(8, 8))
    a = rng.standard_normal((2, 5))
    np.testing.assert_allclose(product(a, column_windows), a @ column_windows, rtol=1e-12,
                               atol=1e-12)


def test_a_wrong_out_shape_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError, match=r"out has shape \(2, 4\), the product \(2, 5\)"):
        product(np.ones((2, 3)), np.ones((3, 5)), out=np.empty((2, 4)))


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((5, 2, 4), (4,)), ((4,), (5, 4, 3)),
    ((2, 0), (0, 3)), ((0, 4), (4, 3)), ((2, 4), (4, 0)), ((0, 2, 4), (4, 3)),
])
def test_vectors_and_empty_sizes(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    expected = np.matmul(a, b)
    got = product(a, b)
    assert np.shape(got) == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_a_broadcast_operand_is_read_with_batch_stride_zero_not_copied():
    a = np.ones((6, 3, 4))
    w = np.ones((4, 5))
    gemm, a2, w2 = _cublas.plan(a, w, np)
    assert (gemm.batch, gemm.stride_1, gemm.stride_2) == (6, 0, 12)
    assert a2 is a and w2 is w
    # attention's Kᵀ: a transposed view of the keys is read transposed (op T), not copied
    k = np.ones((2, 4, 7, 8))
    gemm, _, kt = _cublas.plan(np.ones((2, 4, 5, 8)), np.swapaxes(k, -1, -2), np)
    assert gemm.trans_1 == _cublas.OP_T and kt.base is k


def test_out_is_written_whatever_its_layout():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 4, 5))
    contiguous = np.empty((3, 2, 5))
    assert product(a, b, out=contiguous) is contiguous
    np.testing.assert_allclose(contiguous, a @ b, rtol=1e-12)
    transposed = np.empty((3, 5, 2)).swapaxes(-1, -2)
    assert product(a, b, out=transposed) is transposed
    np.testing.assert_allclose(transposed, a @ b, rtol=1e-12)


def test_mismatched_inner_sizes_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) do not fit"):
        product(np.ones((2, 3)), np.ones((4, 5)))
