"""Nonlinearities: tanh and ReLU (the FFN of §3.3 uses ReLU), softmax and log-softmax
(attention weights, §3.2.1; the output distribution over the vocabulary, §3.4).

    y = tanh(a)      da = dout * (1 - y²)
    y = max(0, a)    da = dout * [a > 0]     (the subgradient 0 is taken at a = 0)

Along one axis (the vocabulary V, or the keys S of attention), with Σ over that axis:

    y = softmax(x),      y_i = exp(x_i - m) / Σ_j exp(x_j - m),   m = max_j x_j
    y = log_softmax(x),  y_i = x_i - m - log Σ_j exp(x_j - m)

Subtracting the maximum m changes nothing mathematically (softmax is invariant to adding a
constant) but keeps every exp in (0, 1]: no overflow for logits like 1000.

    softmax:      ∂y_i/∂x_j = y_i (δ_ij - y_j)
                  dx = y ∘ (dout - Σ dout ∘ y)
    log_softmax:  ∂y_i/∂x_j = δ_ij - softmax(x)_j
                  dx = dout - softmax(x) Σ dout,   softmax(x) = exp(y)
"""

from __future__ import annotations

from .. import backend
from ..autograd.function import Function
from ._blocks import for_element_blocks
from ._broadcast import require_float


class Tanh(Function):
    def forward(self, a):
        y = backend.get_array_module(a).tanh(a)
        self.saved = y  # the derivative is written in the output
        return y

    def backward(self, dout):
        y = self.saved
        # fwd: y = tanh(a)  ->  da = dout * (1 - y²)
        return dout * (1 - y * y)


class ReLU(Function):
    """On blocks of elements on worker threads (the (B, T, d_ff) hidden layer of every FFN)."""

    def forward(self, a):
        xp = backend.get_array_module(a)
        y = xp.empty_like(a)
        for_element_blocks(lambda a, y: xp.maximum(a, 0, out=y), (a, y), xp)
        self.saved = y
        return y

    def backward(self, dout):
        y = self.saved
        xp = backend.get_array_module(dout)
        da = xp.empty_like(dout)
        # fwd: y = max(0, a)  ->  da = dout where a > 0 (equivalently y > 0), else 0
        for_element_blocks(lambda dout, y, da: xp.multiply(dout, y > 0, out=da),
                           (dout, y, da), xp)
        return da


class Softmax(Function):
    def __init__(self, axis: int = -1):
        self.axis = axis

    def forward(self, x):
        _check_axis("softmax", x, self.axis)
        require_float("softmax", x=x)
        xp = backend.get_array_module(x)
        # 1. shift by the maximum: exp never overflows, the result is unchanged
        shifted = x - x.max(axis=self.axis, keepdims=True)
        # 2. e = exp(x - m)
        e = xp.exp(shifted)
        # 3. y = e / Σ e
        y = e / e.sum(axis=self.axis, keepdims=True)
        self.saved = y  # the derivative is written in the output
        return y

    def backward(self, dout):
        y = self.saved
        # fwd 3-1: y = softmax(x)  ->  dx_j = Σ_i dout_i y_i (δ_ij - y_j)
        #                              = y_j (dout_j - Σ_i dout_i y_i)
        return y * (dout - (dout * y).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    def __init__(self, axis: int = -1):
        self.axis = axis

    def forward(self, x):
        _check_axis("log_softmax", x, self.axis)
        require_float("log_softmax", x=x)
        xp = backend.get_array_module(x)
        # 1. shift by the maximum
        shifted = x - x.max(axis=self.axis, keepdims=True)
        # 2. y = (x - m) - log Σ exp(x - m)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))
        self.saved = y  # softmax(x) = exp(y) is recomputed in backward: cheap, saves memory
        return y

    def backward(self, dout):
        y = self.saved
        xp = backend.get_array_module(dout)
        # fwd 2-1: y_i = x_i - logsumexp(x)  ->  dx_j = dout_j - softmax(x)_j Σ_i dout_i
        return dout - xp.exp(y) * dout.sum(axis=self.axis, keepdims=True)


def _check_axis(op: str, x, axis: int) -> None:
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of shape "
                         f"{tuple(x.shape)}.")


def tanh(a): return Tanh()(a)
def relu(a): return ReLU()(a)
def softmax(x, axis=-1): return Softmax(axis)(x)
def log_softmax(x, axis=-1): return LogSoftmax(axis)(x)
