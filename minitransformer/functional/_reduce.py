"""Sums along one axis, computed as products with a vector of ones.

    sum_last(x) = x @ 1        (..., C) -> (...)      the sum of every row
    sum_rows(x) = 1ᵀ @ x       (N, C)   -> (C,)       the sum of every column

They give what ``x.sum(axis=-1)`` and ``x.sum(axis=0)`` give (up to the order of rounding), but
through BLAS: on the (N, d_model) and (N, V) arrays of a training step NumPy's own reduction
is 2-6 times slower than the matrix-vector product. The layers use these for their row sums
and means (layer norm, softmax denominators, cross-entropy) and for bias gradients.
"""

from __future__ import annotations

from .. import backend


def sum_last(x):
    """Σ over the last axis: x (..., C) -> (...)."""
    xp = backend.get_array_module(x)
    return xp.matmul(x, xp.ones(x.shape[-1], dtype=x.dtype))


def sum_rows(x):
    """Σ over the first axis of a matrix: x (N, C) -> (C,)."""
    xp = backend.get_array_module(x)
    return xp.matmul(xp.ones(x.shape[0], dtype=x.dtype), x)
