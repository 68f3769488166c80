"""The library's answers to the exercises on blocks: Functions built on the library's layers.

The exercises on a layer (linear, softmax, attention ...) are graded against the library's
Function of the same name. A block of the model (multi-head attention, the feed-forward
network, the residual sub-layer, dropout with a given mask) is no single Function in the
library: there it is a Module made of several. Each class below wraps one as a Function with
the exercise's signature: ``forward`` loads the input arrays into the library's Module (or
its functional ops) and runs it; ``backward`` builds the same graph with the inputs as
leaves and lets the library's autograd engine walk it. The library computes the truth, with
the backwards of its own Functions, each proved by finite differences; the learner writes
the same gradient by hand, in one Function.

Exercise Functions run on NumPy arrays, on the host; so do these.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import backend
from .. import functional as F
from ..autograd.function import Function
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..nn.attention import MultiHeadAttention as LibraryMultiHeadAttention
from ..nn.feed_forward import PositionwiseFeedForward
from ..nn.module import Parameter
from ..nn.residual import Residual


class _ByAutograd(Function):
    """A Function whose backward is the library's autograd over ``graph``.

    ``graph(*arrays)`` returns the output Tensor and, for each input, the Tensor whose
    gradient is that input's (a leaf or a Parameter), or None for a mask. ``library_name``
    names what the grader's message calls the library's answer.
    """

    library_name = ""

    def graph(self, *arrays: Any) -> tuple[Tensor, list[Tensor | None]]:
        raise NotImplementedError

    def forward(self, *arrays):
        self.saved = arrays
        with no_grad(), _host_rng_kept():
            out, _ = self.graph(*arrays)
        return out.data.copy()

    def backward(self, dout):
        with _host_rng_kept():
            out, sources = self.graph(*self.saved)
        out.backward(dout)
        return tuple(None if s is None else s.grad if s.grad is not None else np.zeros_like(a)
                     for s, a in zip(sources, self.saved, strict=True))


@contextmanager
def _host_rng_kept() -> Iterator[None]:
    """Building a Module draws its initial weights from the host generator; the reference
    replaces them at once, and leaves the generator where it was."""
    generator = backend.host_rng()
    state = generator.bit_generator.state
    try:
        yield
    finally:
        generator.bit_generator.state = state


def _leaf(a: Any) -> Tensor:
    return Tensor(a, requires_grad=True)


class MultiHeadAttention(_ByAutograd):
    """The library's ``nn.MultiHeadAttention`` with the given projection weights, biases at 0:
    inputs (x_q, x_kv, w_q, w_k, w_v, w_o, mask) as in lessons/exercises/multi_head_attention.py."""

    library_name = "MultiHeadAttention (biases 0)"

    def __init__(self, n_heads: int):
        self.n_heads = n_heads

    def graph(self, x_q, x_kv, w_q, w_k, w_v, w_o, mask):
        C = x_q.shape[-1]
        layer = LibraryMultiHeadAttention(C, self.n_heads)
        weights = [Parameter(w) for w in (w_q, w_k, w_v, w_o)]
        for linear, weight in zip((layer.w_q, layer.w_k, layer.w_v, layer.w_o), weights,
                                  strict=True):
            linear.weight, linear.bias = weight, Parameter(np.zeros(C, dtype=weight.dtype))
        queries, keys = _leaf(x_q), _leaf(x_kv)
        out = layer(queries, keys, keys, mask)      # one x_kv for the keys and the values
        return out, [queries, keys, *weights, None]


class FeedForward(_ByAutograd):
    """The library's ``nn.PositionwiseFeedForward`` with the given weights and biases:
    inputs (x, w1, b1, w2, b2) as in lessons/exercises/feed_forward.py."""

    library_name = "PositionwiseFeedForward"

    def graph(self, x, w1, b1, w2, b2):
        d_ff, C = w1.shape
        block = PositionwiseFeedForward(C, d_ff)
        params = [Parameter(a) for a in (w1, b1, w2, b2)]
        block.w_1.weight, block.w_1.bias, block.w_2.weight, block.w_2.bias = params
        leaf = _leaf(x)
        return block(leaf), [leaf, *params]


class ResidualLayerNorm(_ByAutograd):
    """The library's post-LN ``nn.Residual`` (dropout 0) around a Linear sublayer:
    LayerNorm(x + x wᵀ + b), inputs (x, w, b, gain, bias) as in
    lessons/exercises/residual_layer_norm.py."""

    library_name = "Residual (post-LN) around a Linear"

    def __init__(self, eps: float = 1e-6):
        self.eps = eps

    def graph(self, x, w, b, gain, bias):
        residual = Residual(x.shape[-1], p_dropout=0.0)
        residual.norm.eps = self.eps
        params = [Parameter(a) for a in (w, b, gain, bias)]
        residual.norm.gain, residual.norm.bias = params[2:]
        leaf = _leaf(x)
        out = residual(leaf, lambda h: F.linear(h, params[0], params[1]))
        return out, [leaf, *params]


def dropout_mask(shape: tuple[int, ...], p: float, seed: int) -> Any:
    """keep = [u >= p], u ~ U[0, 1) from NumPy's generator seeded with ``seed``: the mask
    that lessons/exercises/dropout.py draws, the same at every call for the same seed."""
    return np.random.default_rng(seed).random(shape) >= p


class Dropout(_ByAutograd):
    """Inverted dropout with the exercise's mask: in training x ∘ keep / (1 - p), a product
    by a constant, in evaluation ``functional.dropout(x, p, training=False)``, the identity.
    (The library's Dropout draws its mask from the backend's generator, so the grader cannot
    give the learner the same one; the mask comes from ``dropout_mask`` instead.)"""

    library_name = "dropout with this mask"

    def __init__(self, p: float, training: bool = True, seed: int = 0):
        self.p, self.training, self.seed = p, training, seed

    def graph(self, x):
        leaf = _leaf(x)
        if not self.training:
            return F.dropout(leaf, self.p, training=False), [leaf]
        keep = dropout_mask(x.shape, self.p, self.seed)
        return leaf * Tensor(keep * (1.0 / (1.0 - self.p))), [leaf]
