"""Reductions: sum, mean and max over axes.

A reduction's backward spreads ``dout`` back over the axes it removed:

    y = sum(a, axes)    da = broadcast(dout)                 every element counted once
    y = mean(a, axes)   da = broadcast(dout) / n             n elements per output
    y = max(a, axes)    da = broadcast(dout) * [a == argmax]  only the winner gets it; on a tie
                                                             the first maximum takes it all
"""

from __future__ import annotations

import operator
from typing import Any

from .. import backend
from ..autograd.function import Function


def _normalize_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    try:
        axes = (operator.index(axis),)  # one axis: an int or a NumPy integer
    except TypeError:
        try:
            axes = tuple(operator.index(ax) for ax in axis)
        except TypeError:
            raise TypeError(f"{op}: axis must be an integer or a tuple of integers, got "
                            f"{axis!r}.") from None
    for ax in axes:
        if not -ndim <= ax < (ndim or 1):
            raise ValueError(f"{op}: axis {ax} is out of range for a tensor with {ndim} "
                             f"dimensions.")
    normalized = tuple(sorted(ax % (ndim or 1) for ax in axes))
    if len(set(normalized)) < len(normalized):
        raise ValueError(f"{op}: axis {axis!r} names the same axis twice.")
    return normalized


def _expand(dout: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """Put the reduced axes back as size-1 axes so dout broadcasts against the input."""
    if keepdims or not axes:
        return dout
    shape = list(dout.shape)
    for ax in axes:  # axes are sorted, so each insert lands where the axis was
        shape.insert(ax, 1)
    return dout.reshape(shape)


class Sum(Function):
    def __init__(self, axis: Any = None, keepdims: bool = False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, a):
        self.axes = _normalize_axes(self.axis, a.ndim, "sum")
        self.a_shape = a.shape
        return a.sum(axis=self.axes, keepdims=self.keepdims)

    def backward(self, dout):
        xp = backend.get_array_module(dout)
        # fwd: y = sum(a, axes)  ->  da = dout broadcast back over the summed axes
        expanded = _expand(dout, self.axes, self.keepdims)
        return xp.broadcast_to(expanded, self.a_shape)  # a view: backward never writes to it


class Mean(Function):
    def __init__(self, axis: Any = None, keepdims: bool = False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, a):
        self.axes = _normalize_axes(self.axis, a.ndim, "mean")
        self.a_shape = a.shape
        self.count = 1
        for ax in self.axes:
            self.count *= a.shape[ax]
        return a.mean(axis=self.axes, keepdims=self.keepdims)

    def backward(self, dout):
        xp = backend.get_array_module(dout)
        # fwd: y = sum(a, axes) / n  ->  da = broadcast(dout) / n
        expanded = _expand(dout, self.axes, self.keepdims) / self.count
        return xp.broadcast_to(expanded, self.a_shape)


class Max(Function):
    def __init__(self, axis: Any = None, keepdims: bool = False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, a):
        xp = backend.get_array_module(a)
        self.axes = _normalize_axes(self.axis, a.ndim, "max")
        if a.size == 0:
            raise ValueError("max of an empty tensor is undefined.")
        y = a.max(axis=self.axes, keepdims=True)
        # 1. winners: the first position holding the maximum along the reduced axes.
        #    Flatten the reduced axes to one so argmax can find the first winner.
        kept = [ax for ax in range(a.ndim) if ax not in self.axes]
        moved = xp.transpose(a, kept + list(self.axes))
        flat = moved.reshape(moved.shape[:len(kept)] + (-1,))          # (..., n_reduced)
        first = flat.argmax(axis=-1)                                   # (...,)
        self.saved = first
        self.a_shape, self.kept = a.shape, kept
        return y if self.keepdims else y.reshape([a.shape[ax] for ax in kept])

    def backward(self, dout):
        xp = backend.get_array_module(dout)
        first = self.saved
        # fwd: y = a[argmax]  ->  da = dout routed to the argmax position, 0 elsewhere
        reduced_shape = [self.a_shape[ax] for ax in self.axes]
        n_reduced = 1
        for n in reduced_shape:
            n_reduced *= n
        winner = xp.arange(n_reduced) == first[..., None]               # (..., n_reduced)
        dflat = winner.astype(dout.dtype) * dout.reshape(first.shape + (1,))
        dmoved = dflat.reshape(first.shape + tuple(reduced_shape))
        inverse = [0] * len(self.a_shape)
        for position, ax in enumerate(self.kept + list(self.axes)):
            inverse[ax] = position
        return xp.transpose(dmoved, inverse)


def sum(a, axis=None, keepdims=False): return Sum(axis, keepdims)(a)  # noqa: A001
def mean(a, axis=None, keepdims=False): return Mean(axis, keepdims)(a)
def max(a, axis=None, keepdims=False): return Max(axis, keepdims)(a)  # noqa: A001
