"""Elementwise arithmetic: + - * / neg pow exp log sqrt, and dtype casts.

Binary ops broadcast their inputs like NumPy; backward undoes it with ``sum_to``. For an output
y and upstream gradient dout = dL/dy, each backward returns dL/dinput:

    y = a + b      da = dout            db = dout
    y = a - b      da = dout            db = -dout
    y = a * b      da = dout * b        db = dout * a
    y = a / b      da = dout / b        db = -dout * a / b²
    y = a ** p     da = dout * p a^(p-1)   dp = dout * y * log(a)
    y = exp(a)     da = dout * y
    y = log(a)     da = dout / a
    y = sqrt(a)    da = dout / (2 y)
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..autograd.function import Function
from ._broadcast import broadcast_shapes, match_float_dtypes, sum_to


class _Binary(Function):
    """Shared by the broadcasting binary ops: check shapes and dtypes, remember the shapes."""

    op = "?"

    def _prepare(self, a: Any, b: Any) -> tuple[Any, Any]:
        if a.shape != b.shape:
            broadcast_shapes(self.op, a.shape, b.shape)  # raises a clear error if impossible
        self.a_shape, self.b_shape = a.shape, b.shape
        return match_float_dtypes(self.op, a, b)


class Add(_Binary):
    op = "add"

    def forward(self, a, b):
        a, b = self._prepare(a, b)
        return a + b

    def backward(self, dout):
        # fwd: y = a + b  ->  da = dout, db = dout (summed over broadcast axes)
        return sum_to(dout, self.a_shape), sum_to(dout, self.b_shape)


class Sub(_Binary):
    op = "sub"

    def forward(self, a, b):
        a, b = self._prepare(a, b)
        return a - b

    def backward(self, dout):
        # fwd: y = a - b  ->  da = dout, db = -dout
        return sum_to(dout, self.a_shape), sum_to(-dout, self.b_shape)


class Mul(_Binary):
    op = "mul"

    def forward(self, a, b):
        a, b = self._prepare(a, b)
        self.saved = (a, b)
        return a * b

    def backward(self, dout):
        a, b = self.saved
        # fwd: y = a * b  ->  da = dout * b, db = dout * a
        da = sum_to(dout * b, self.a_shape) if self.needs_input_grad[0] else None
        db = sum_to(dout * a, self.b_shape) if self.needs_input_grad[1] else None
        return da, db


class Div(_Binary):
    op = "div"

    def forward(self, a, b):
        a, b = self._prepare(a, b)
        y = a / b
        self.saved = (b, y)
        return y

    def backward(self, dout):
        b, y = self.saved
        # fwd: y = a / b  ->  da = dout / b, db = -dout * a / b² = -(dout / b) * y
        da_full = dout / b
        da = sum_to(da_full, self.a_shape) if self.needs_input_grad[0] else None
        db = sum_to(-da_full * y, self.b_shape) if self.needs_input_grad[1] else None
        return da, db


class Neg(Function):
    def forward(self, a):
        return -a

    def backward(self, dout):
        # fwd: y = -a  ->  da = -dout
        return -dout


class Pow(_Binary):
    """y = a ** p, p a number or a tensor (dp needs a ≥ 0: log(a) is nan below 0)."""

    op = "pow"

    def forward(self, a, p):
        a, p = self._prepare(a, p)
        y = a ** p
        self.saved = (a, p, y)
        return y

    def backward(self, dout):
        a, p, y = self.saved
        xp = backend.get_array_module(a)
        da = dp = None
        if self.needs_input_grad[0]:
            # fwd: y = a^p  ->  da = dout * p * a^(p-1); where p = 0, y = 1 is constant and
            # da = 0, also at a = 0, where 0 * 0^(-1) would be 0 * inf = nan (as PyTorch)
            constant = p == 0
            power = a ** xp.where(constant, 1, p - 1)                   # no 0^(-1) computed
            da = sum_to(xp.where(constant, 0, dout * p * power), self.a_shape)
        if self.needs_input_grad[1]:
            # fwd: y = exp(p log a)  ->  dp = dout * y * log(a). At a = 0 that is 0 * -inf for
            # p > 0, whose limit from a > 0 is 0 (a^p log a -> 0); at p = 0 it is 1 * -inf,
            # and 0 there is a convention. Both give dp = 0, as PyTorch
            zero_base = (a == 0) & (p >= 0)
            log_a = xp.log(xp.where(zero_base, 1, a))                   # no log(0) computed
            dp = sum_to(xp.where(zero_base, 0, dout * y * log_a), self.b_shape)
        return da, dp


class Exp(Function):
    def forward(self, a):
        y = backend.get_array_module(a).exp(a)
        self.saved = y  # the derivative of exp is exp itself: keep the output
        return y

    def backward(self, dout):
        # fwd: y = exp(a)  ->  da = dout * y
        return dout * self.saved


class Log(Function):
    def forward(self, a):
        self.saved = a
        return backend.get_array_module(a).log(a)

    def backward(self, dout):
        # fwd: y = log(a)  ->  da = dout / a
        return dout / self.saved


class Sqrt(Function):
    def forward(self, a):
        y = backend.get_array_module(a).sqrt(a)
        self.saved = y
        return y

    def backward(self, dout):
        # fwd: y = a^(1/2)  ->  da = dout / (2 y)
        return dout / (2 * self.saved)


class AsType(Function):
    """Cast to another float dtype; the gradient is cast back."""

    def __init__(self, dtype: Any):
        self.dtype = dtype

    def forward(self, a):
        self.a_dtype = a.dtype
        y = a.astype(self.dtype, copy=False)
        self.returns_views = y.dtype == a.dtype   # the same dtype: the input, not a copy
        return y

    def backward(self, dout):
        # fwd: y = cast(a)  ->  da = cast_back(dout)
        return dout.astype(self.a_dtype, copy=False)


def add(a, b): return Add()(a, b)
def sub(a, b): return Sub()(a, b)
def mul(a, b): return Mul()(a, b)
def div(a, b): return Div()(a, b)
def neg(a): return Neg()(a)
def pow(a, p): return Pow()(a, p)  # noqa: A001 - mirrors the operator it implements
def exp(a): return Exp()(a)
def log(a): return Log()(a)
def sqrt(a): return Sqrt()(a)


def astype(a, dtype):
    """``a`` as ``dtype``; differentiable between float dtypes (float32 <-> float64)."""
    resolved = backend.as_dtype(dtype)
    if not backend.is_floating(resolved):
        raise TypeError(f"astype({resolved}): only float dtypes keep a gradient; for integer "
                        "data, cast the array with .numpy().astype(...) instead.")
    return AsType(resolved)(a)
