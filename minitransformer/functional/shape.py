"""Shape ops: reshape, transpose/permute, swapaxes, broadcast_to, sum_to.

None of them does arithmetic; each backward puts the gradient back into the input's layout:

    y = reshape(a, s)        da = reshape(dout, a.shape)
    y = transpose(a, p)      da = transpose(dout, inverse(p))
    y = swapaxes(a, i, j)    da = swapaxes(dout, i, j)
    y = broadcast_to(a, s)   da = sum_to(dout, a.shape)
    y = sum_to(a, s)         da = broadcast_to(dout, a.shape)
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..autograd.function import Function
from ._broadcast import broadcast_shapes
from ._broadcast import sum_to as sum_to_array


class Reshape(Function):
    returns_views = True

    def __init__(self, shape: int | tuple[int, ...]):
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)

    def forward(self, a):
        self.a_shape = a.shape
        try:
            return a.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {tuple(a.shape)} "
                             f"({a.size} elements) into shape {self.shape}.") from None

    def backward(self, dout):
        # fwd: y = reshape(a, s)  ->  da = reshape(dout, a.shape)
        return dout.reshape(self.a_shape)


class Transpose(Function):
    returns_views = True

    def __init__(self, axes: tuple[int, ...] | None = None):
        self.axes = axes

    def forward(self, a):
        axes = tuple(range(a.ndim))[::-1] if self.axes is None else tuple(self.axes)
        in_range = all(-a.ndim <= ax < a.ndim for ax in axes)
        if not in_range or sorted(ax % a.ndim for ax in axes) != list(range(a.ndim)):
            raise ValueError(f"transpose: axes {axes} are not a permutation of the "
                             f"{a.ndim} axes of a tensor of shape {tuple(a.shape)}.")
        self.perm = tuple(ax % a.ndim for ax in axes)
        return backend.get_array_module(a).transpose(a, self.perm)

    def backward(self, dout):
        # fwd: y = transpose(a, perm)  ->  da = transpose(dout, argsort(perm))
        inverse = [0] * len(self.perm)
        for position, ax in enumerate(self.perm):
            inverse[ax] = position
        return backend.get_array_module(dout).transpose(dout, inverse)


class SwapAxes(Function):
    returns_views = True

    def __init__(self, axis1: int, axis2: int):
        self.axis1, self.axis2 = axis1, axis2

    def forward(self, a):
        for ax in (self.axis1, self.axis2):
            if not -a.ndim <= ax < a.ndim:
                raise ValueError(f"swapaxes: axis {ax} is out of range for shape "
                                 f"{tuple(a.shape)}.")
        return a.swapaxes(self.axis1, self.axis2)

    def backward(self, dout):
        # fwd: y = swapaxes(a, i, j)  ->  da = swapaxes(dout, i, j) (its own inverse)
        return dout.swapaxes(self.axis1, self.axis2)


class BroadcastTo(Function):
    returns_views = True

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(int(n) for n in shape)

    def forward(self, a):
        target = broadcast_shapes("broadcast_to", a.shape, self.shape)
        if target != self.shape:
            raise ValueError(f"broadcast_to: cannot broadcast shape {tuple(a.shape)} to "
                             f"{self.shape}.")
        self.a_shape = a.shape
        return backend.get_array_module(a).broadcast_to(a, self.shape)

    def backward(self, dout):
        # fwd: y = broadcast_to(a, s)  ->  da = sum of dout over the copies
        return sum_to_array(dout, self.a_shape)


class SumTo(Function):
    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(int(n) for n in shape)

    def forward(self, a):
        if broadcast_shapes("sum_to", a.shape, self.shape) != tuple(a.shape):
            raise ValueError(f"sum_to: shape {self.shape} does not broadcast to "
                             f"{tuple(a.shape)}, so {tuple(a.shape)} cannot be summed to it.")
        self.a_shape = a.shape
        self.returns_views = tuple(a.shape) == self.shape      # nothing to sum: a itself
        return sum_to_array(a, self.shape)

    def backward(self, dout):
        # fwd: y = sum_to(a, s)  ->  da = broadcast_to(dout, a.shape)
        return backend.get_array_module(dout).broadcast_to(dout, self.a_shape)


def reshape(a, shape: Any): return Reshape(shape)(a)
def transpose(a, axes=None): return Transpose(axes)(a)
def permute(a, axes): return Transpose(axes)(a)
def swapaxes(a, axis1, axis2): return SwapAxes(axis1, axis2)(a)
def broadcast_to(a, shape): return BroadcastTo(shape)(a)
def sum_to(a, shape): return SumTo(shape)(a)
