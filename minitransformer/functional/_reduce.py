"""Sums along one axis, computed as products with a vector of ones.

    sum_last(x) = x @ 1        (..., C) -> (...)      the sum of every row
    sum_rows(x) = 1ᵀ @ x       (N, C)   -> (C,)       the sum of every column

They give what ``x.sum(axis=-1)`` and ``x.sum(axis=0)`` give (up to the order of rounding), but
through BLAS: on the (N, d_model) and (N, V) arrays of a training step NumPy's own reduction
loop is slower than BLAS's matrix-vector product (single-threaded, see ``_products``). The
layers use these for their row sums and means (layer norm, softmax denominators,
cross-entropy) and for bias gradients.
"""

from __future__ import annotations

from .. import backend
from . import _products


def sum_last(x):
    """Σ over the last axis: x (..., C) -> (...)."""
    xp = backend.get_array_module(x)
    ones = xp.ones(x.shape[-1], dtype=x.dtype)
    if x.ndim > 2 and x.flags.c_contiguous:
        # One product over all rows: matmul on (..., T, C) would make one per (T, C) matrix,
        # which for attention's (B, H, T, S) scores is thousands of tiny calls.
        return _products.matmul(x.reshape(-1, x.shape[-1]), ones).reshape(x.shape[:-1])
    return _products.matmul(x, ones)


def sum_rows(x):
    """Σ over the first axis of a matrix: x (N, C) -> (C,)."""
    xp = backend.get_array_module(x)
    return _products.matmul(xp.ones(x.shape[0], dtype=x.dtype), x)
