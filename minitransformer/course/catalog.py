"""The backward exercises: their input cases, the library Function each is graded against,
and the hints that recognise common mistakes in a backward.

Six are one layer each (linear, softmax, layer norm, attention, embedding, cross-entropy),
graded against the library's Function of that name; four are blocks of the model
(multi-head attention, dropout, the residual sub-layer, the feed-forward network), graded
against the library's Modules through ``references.py``. Their hints are in ``hints.py`` and
``block_hints.py``. Used by ``minitransformer.course.grading``, which does the grading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autograd.function import Function
from ..functional.activation import Softmax
from ..functional.attention import ScaledDotProductAttention
from ..functional.embedding import Embedding
from ..functional.linalg import Linear
from ..functional.loss import CrossEntropy
from ..functional.normalization import LayerNorm
from . import references
from .block_hints import BLOCK_HINTS
from .hints import LAYER_HINTS, Clue

__all__ = ["EXERCISES", "Case", "Clue", "Exercise"]


@dataclass(frozen=True)
class Case:
    note: str                                   # what the case exercises
    make_inputs: Callable[[Any], tuple]         # NumPy generator -> the forward's inputs
    args: tuple = ()                            # constructor arguments (eps, padding_idx ...)


@dataclass(frozen=True)
class Exercise:
    name: str
    class_name: str                             # the Function the learner's file defines
    reference: type[Function]                   # the library's, with the same signature
    inputs: tuple[str, ...]                     # forward's arguments, in order
    grads: tuple[str | None, ...]               # their gradients' names; None: not differentiable
    cases: tuple[Case, ...]
    summary: str
    hint: Callable[[Clue], str | None] = lambda clue: None  # a mistake's name, or None
    rtol: float = 1e-6


# ----------------------------------------------------------------------------- the exercises

def _normal(*shape: int, loc: float = 0.0, scale: float = 1.0) -> Callable[[Any], Any]:
    return lambda g: loc + scale * g.standard_normal(shape, dtype="float64")


def _fixed(values: Any, dtype: Any = None) -> Callable[[Any], Any]:
    return lambda g: np.array(values, dtype=dtype)


def _inputs(*makers: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    return lambda g: tuple(make(g) for make in makers)


def _targets(V: int, *shape: int, ignored: tuple = (), ignore: int = -100):
    """Class ids in [0, V), with the flat positions ``ignored`` set to ``ignore``."""
    def make(g):
        t = g.integers(0, V, size=shape)
        t.reshape(-1)[list(ignored)] = ignore
        return t
    return make


_IDS = [[1, 0, 3, 1, 3], [4, 4, 0, 2, 1]]
_NO_ROW = [[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 0, 1, 1]]

_HINTS = {**LAYER_HINTS, **BLOCK_HINTS}


def _exercise(name: str, *fields: Any) -> Exercise:
    return Exercise(name, *fields, hint=_HINTS[name])


def _padding(*lengths: int, S: int) -> Callable[[Any], Any]:
    """A padding mask (B, 1, 1, S): row b may attend to its first lengths[b] keys."""
    return _fixed([[[[j < n for j in range(S)]]] for n in lengths])


def _self_attention(B: int, T: int, C: int) -> Callable[[Any], tuple]:
    """One input for the queries, keys and values (copied: two arrays), four weights and a
    causal mask (T, T)."""
    def make(g):
        x = g.standard_normal((B, T, C))
        weights = [0.5 * g.standard_normal((C, C)) for _ in range(4)]
        return (x, x.copy(), *weights, np.tril(np.ones((T, T), bool)))
    return make


_W = 0.5  # the scale of attention's weights: scores of order 1, a softmax far from one-hot

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    _exercise("linear", "Linear", Linear, ("x", "weight", "bias"), ("dx", "dW", "db"), (
        Case("a square weight, like W^Q", _inputs(_normal(3, 4), _normal(4, 4), _normal(4))),
        Case("leading axes (B, T)", _inputs(_normal(2, 3, 4), _normal(5, 4), _normal(5))),
        Case("four axes, C_out = 1", _inputs(_normal(2, 1, 3, 2), _normal(1, 2), _normal(1))),
    ), "y = x Wᵀ + b (§3.2.2, §3.3)"),
    _exercise("softmax", "Softmax", Softmax, ("x",), ("dx",), (
        Case("rows of scores", _inputs(_normal(3, 5))),
        Case("leading axes (B, H, T)", _inputs(_normal(2, 2, 3, 4))),
        Case("large logits", _inputs(_normal(2, 6, loc=100.0, scale=5.0))),
    ), "y = exp(x) / Σ exp(x) over the last axis (§3.2.1)"),
    _exercise("layer_norm", "LayerNorm", LayerNorm, ("x", "gain", "bias"),
              ("dx", "dgain", "dbias"), (
        Case("rows of d_model", _inputs(_normal(4, 6), _normal(6, loc=1.0, scale=0.5),
                                        _normal(6)), (1e-6,)),
        Case("leading axes (B, T), eps=1e-5",
             _inputs(_normal(2, 3, 5), _normal(5, loc=1.0, scale=0.5), _normal(5)), (1e-5,)),
        Case("shifted, scaled input", _inputs(_normal(3, 4, loc=3.0, scale=4.0),
                                              _normal(4, loc=1.0, scale=0.5), _normal(4)),
             (1e-6,)),
    ), "y = gain ∘ (x - μ) / √(σ² + eps) + bias (§3.1)"),
    _exercise("attention", "ScaledDotProductAttention", ScaledDotProductAttention,
              ("q", "k", "v", "mask"), ("dq", "dk", "dv", None), (
        Case("an all-True mask", _inputs(_normal(3, 4), _normal(5, 4), _normal(5, 2),
                                         _fixed(np.ones((3, 5), bool)))),
        Case("heads, padding mask (B, 1, 1, S)", _inputs(
            _normal(2, 2, 3, 4), _normal(2, 2, 5, 4), _normal(2, 2, 5, 3), _padding(5, 2, S=5))),
        Case("causal mask (T, T)", _inputs(_normal(2, 4, 4), _normal(2, 4, 4), _normal(2, 4, 3),
                                           _fixed(np.tril(np.ones((4, 4), bool))))),
        Case("a query with every key masked", _inputs(_normal(3, 4), _normal(5, 4),
                                                      _normal(5, 3), _fixed(_NO_ROW, bool))),
    ), "softmax(q kᵀ / √D, masked) v (§3.2.1, §3.2.3)"),
    _exercise("embedding", "Embedding", Embedding, ("ids", "weight"), (None, "dW"), (
        Case("repeated ids, an unused row", _inputs(_fixed(_IDS), _normal(6, 3)), (None,)),
        Case("padding_idx=0", _inputs(_fixed(_IDS), _normal(5, 3)), (0,)),
        Case("1-D ids, padding_idx=2", _inputs(_fixed([2, 3, 3, 2, 0, 3]), _normal(4, 2)), (2,)),
    ), "y[n] = W[ids[n]] (§3.4)"),
    _exercise("cross_entropy", "CrossEntropy", CrossEntropy, ("logits", "targets"),
              ("dlogits", None), (
        Case("ε=0", _inputs(_normal(4, 6), _targets(6, 4)), (0.0, None)),
        Case("ε=0.1, leading axes (B, T)", _inputs(_normal(2, 3, 6), _targets(6, 2, 3)),
             (0.1, None)),
        Case("ε=0.1, ignore_index=-100", _inputs(_normal(3, 4, 6), _targets(
            6, 3, 4, ignored=(1, 7, 8, 10))), (0.1, -100)),
        Case("ε=0.2, padding id 0 ignored", _inputs(_normal(2, 5, 7), _targets(
            7, 2, 5, ignored=(3, 4, 9), ignore=0)), (0.2, 0)),
    ), "mean of -Σ q log softmax(z), q smoothed (§5.4)"),
    _exercise("multi_head_attention", "MultiHeadAttention", references.MultiHeadAttention,
              ("x_q", "x_kv", "w_q", "w_k", "w_v", "w_o", "mask"),
              ("dx_q", "dx_kv", "dw_q", "dw_k", "dw_v", "dw_o", None), (
        Case("cross-attention, H = 2, an all-True mask", _inputs(
            _normal(2, 3, 4), _normal(2, 5, 4), *[_normal(4, 4, scale=_W)] * 4,
            _fixed(np.ones((3, 5), bool))), (2,)),
        Case("H = 3, padding mask (B, 1, 1, S)", _inputs(
            _normal(2, 3, 6), _normal(2, 4, 6), *[_normal(6, 6, scale=_W)] * 4,
            _padding(4, 2, S=4)), (3,)),
        Case("self-attention, H = 2, causal mask (T, T)", _self_attention(1, 4, 4), (2,)),
        Case("H = 1, a query with every key masked", _inputs(
            _normal(1, 3, 4), _normal(1, 5, 4), *[_normal(4, 4, scale=_W)] * 4,
            _fixed(_NO_ROW, bool)), (1,)),
    ), "Concat(head_1..head_H) W_oᵀ, heads of projected x_q, x_kv (§3.2.2)"),
    _exercise("dropout", "Dropout", references.Dropout, ("x",), ("dx",), (
        Case("training, p = 0.1, (B, T, C)", _inputs(_normal(2, 3, 4)), (0.1, True, 0)),
        Case("training, p = 0.5, leading axes (B, H, T, S)", _inputs(_normal(2, 2, 3, 3)),
             (0.5, True, 1)),
        Case("evaluation (training=False): the identity", _inputs(_normal(2, 3, 4)),
             (0.1, False, 0)),
        Case("training, p = 0.3, a vector", _inputs(_normal(7)), (0.3, True, 2)),
    ), "x ∘ keep / (1 - p) in training, x in evaluation (§5.4)"),
    _exercise("residual_layer_norm", "ResidualLayerNorm", references.ResidualLayerNorm,
              ("x", "w", "b", "gain", "bias"), ("dx", "dw", "db", "dgain", "dbias"), (
        Case("rows of d_model", _inputs(_normal(4, 5), _normal(5, 5, scale=0.5), _normal(5),
                                        _normal(5, loc=1.0, scale=0.5), _normal(5)), (1e-6,)),
        Case("leading axes (B, T), eps=1e-5", _inputs(
            _normal(2, 3, 4), _normal(4, 4, scale=0.5), _normal(4),
            _normal(4, loc=1.0, scale=0.5), _normal(4)), (1e-5,)),
        Case("a sub-layer near 0: the residual carries x", _inputs(
            _normal(3, 4), _normal(4, 4, scale=0.01), _normal(4, scale=0.01),
            _normal(4, loc=1.0, scale=0.5), _normal(4)), (1e-6,)),
        Case("a sub-layer much larger than x", _inputs(
            _normal(3, 4), _normal(4, 4, scale=3.0), _normal(4),
            _normal(4, loc=1.0, scale=0.5), _normal(4)), (1e-6,)),
    ), "LayerNorm(x + x wᵀ + b), post-LN (§3.1)"),
    _exercise("feed_forward", "FeedForward", references.FeedForward,
              ("x", "w1", "b1", "w2", "b2"), ("dx", "dw1", "db1", "dw2", "db2"), (
        Case("rows of d_model", _inputs(_normal(4, 3), _normal(5, 3), _normal(5), _normal(3, 5),
                                        _normal(3))),
        Case("leading axes (B, T)", _inputs(_normal(2, 3, 4), _normal(6, 4), _normal(6),
                                            _normal(4, 6), _normal(4))),
        Case("d_ff = 4 d_model, as in the paper", _inputs(
            _normal(2, 2, 2), _normal(8, 2), _normal(8), _normal(2, 8), _normal(2))),
        Case("most units off (b₁ < 0)", _inputs(
            _normal(3, 4), _normal(5, 4, scale=0.5), _normal(5, loc=-1.0, scale=0.5),
            _normal(4, 5), _normal(4))),
    ), "max(0, x W₁ᵀ + b₁) W₂ᵀ + b₂ (§3.3)"),
)}
