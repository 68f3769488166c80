"""The six exercises: their input cases, the library Functions they are graded against, and
the hints that recognise common mistakes in a backward.

Used by ``minitransformer.course.grading``, which does the grading.
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


@dataclass(frozen=True)
class Case:
    note: str                                   # what the case exercises
    make_inputs: Callable[[Any], tuple]         # NumPy generator -> the forward's inputs
    args: tuple = ()                            # constructor arguments (eps, padding_idx ...)


@dataclass
class Clue:
    """What a hint looks at: one wrong gradient of one case."""

    grad: str                   # its name, "dW"
    got: Any
    expected: Any
    bad: Any                    # True where the error is beyond tolerance
    inputs: dict[str, Any]      # the case's inputs by name
    args: tuple
    dout: Any
    factor: float | None        # got = factor · expected, when that holds


@dataclass(frozen=True)
class Exercise:
    name: str
    class_name: str                             # the Function the learner's file defines
    reference: type[Function]                   # the library's, with the same signature
    inputs: tuple[str, ...]                     # forward's arguments, in order
    grads: tuple[str | None, ...]               # their gradients' names; None: not differentiable
    cases: tuple[Case, ...]
    summary: str
    hint: Callable[[Clue], str | None] = lambda clue: None
    rtol: float = 1e-6


# ----------------------------------------------------------------------------- hints

def _close(a: Any, b: Any) -> bool:
    return bool(np.allclose(a, b, rtol=1e-6, atol=1e-9 * max(np.abs(b).max(initial=0), 1e-300)))


def _softmax_hint(clue: Clue) -> str | None:
    y = Softmax().forward(clue.inputs["x"])
    if _close(clue.got, y * clue.dout) or _close(clue.got, clue.dout * y * (1 - y)):
        return ("that is the diagonal of the Jacobian alone: every y_i also depends on every "
                "other x_j of its row, through the sum in the denominator.")
    return None


def _layer_norm_hint(clue: Clue) -> str | None:
    x, gain = clue.inputs["x"], clue.inputs["gain"]
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + clue.args[0])
    x_hat, g = xc * rstd, clue.dout * gain
    err = clue.got - clue.expected
    if clue.grad == "dgain" and _close(clue.got, (clue.dout * x).reshape(-1, x.shape[-1]).sum(0)):
        return "you used x where x̂ belongs: y = gain ∘ x̂ + bias."
    if clue.grad != "dx":
        return None
    if _close(clue.got, rstd * g):
        return "μ and σ² were treated as constants: both depend on x, follow those two paths too."
    if _close(err, rstd * g.mean(-1, keepdims=True)):
        return ("the error is the same along each row: the path through the mean μ "
                "(∂μ/∂x_j = 1/C) is missing or wrong.")
    if _close(err, rstd * x_hat * (g * x_hat).mean(-1, keepdims=True)):
        return ("the error is proportional to x̂ in each row: the path through the variance σ² "
                "(inside rstd) is missing or wrong.")
    d = clue.dout  # the gradient with g = dout, as if gain were all ones
    if _close(clue.got, rstd * (d - d.mean(-1, keepdims=True)
                                - x_hat * (d * x_hat).mean(-1, keepdims=True))):
        return "the gain is missing: the gradient reaching x̂ is dout ∘ gain."
    return None


def _attention_hint(clue: Clue) -> str | None:
    root = float(np.sqrt(clue.inputs["q"].shape[-1]))
    if clue.factor is not None and clue.grad in ("dq", "dk"):
        for value, text in ((root, "√D"), (1 / root, "1/√D"), (root * root, "D")):
            if abs(clue.factor - value) < 1e-6 * value:
                return (f"off by a factor {text} = {value:.3f}: the scores were divided by √D in "
                        "forward, so dq and dk carry that 1/√D once.")
    return None


def _embedding_hint(clue: Clue) -> str | None:
    ids, padding = clue.inputs["ids"], clue.args[0]
    bad_rows = set(np.nonzero(clue.bad.any(axis=-1))[0].tolist())
    values, counts = np.unique(ids, return_counts=True)
    repeated = set(values[counts > 1].tolist()) - {padding}
    if bad_rows == {padding}:
        return (f"correct except the padding row {padding}: padding positions are set to 0 in "
                "forward whatever the table holds, so they never read that row: no gradient.")
    if bad_rows and bad_rows <= repeated:
        return (f"wrong only in rows of ids that appear more than once ({sorted(bad_rows)}): a "
                "repeated id must add up all its gradients; dW[ids] = dout keeps only one "
                "(look up np.add.at).")
    return None


def _cross_entropy_hint(clue: Clue) -> str | None:
    logits, targets = clue.inputs["logits"], clue.inputs["targets"]
    eps, ignore = clue.args
    real = np.ones(targets.shape, bool) if ignore is None else targets != ignore
    n_real, n_rows = max(int(real.sum()), 1), targets.size
    plain = CrossEntropy(0.0, ignore)
    plain.needs_input_grad = (True, False)
    plain.forward(logits, targets)
    if eps and _close(clue.got, plain.backward(clue.dout)[0]):
        return (f"this is the gradient without label smoothing: with ε = {eps} the target is "
                "q = (1 - ε) onehot(y) + ε / V, not onehot(y).")
    bad_rows = clue.bad.any(axis=-1)
    if bad_rows.any() and not (bad_rows & real).any():
        return ("wrong only on rows whose target is ignore_index: those tokens do not count, so "
                "their gradient is exactly 0.")
    if clue.factor is not None:
        for value, text in ((n_real / n_rows, "you divided by all the rows, not by the N real "
                             "targets"), (n_real, "the 1/N of the mean is missing"),
                            (1 / (float(clue.dout) or 1.0), "the upstream dout is missing")):
            if abs(clue.factor - value) < 1e-6 * abs(value):
                return f"off by a constant factor {clue.factor:.3f}: {text}."
    return None


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

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    Exercise("linear", "Linear", Linear, ("x", "weight", "bias"), ("dx", "dW", "db"), (
        Case("a square weight, like W^Q", _inputs(_normal(3, 4), _normal(4, 4), _normal(4))),
        Case("leading axes (B, T)", _inputs(_normal(2, 3, 4), _normal(5, 4), _normal(5))),
        Case("four axes, C_out = 1", _inputs(_normal(2, 1, 3, 2), _normal(1, 2), _normal(1))),
    ), "y = x Wᵀ + b (§3.2.2, §3.3)"),
    Exercise("softmax", "Softmax", Softmax, ("x",), ("dx",), (
        Case("rows of scores", _inputs(_normal(3, 5))),
        Case("leading axes (B, H, T)", _inputs(_normal(2, 2, 3, 4))),
        Case("large logits", _inputs(_normal(2, 6, loc=100.0, scale=5.0))),
    ), "y = exp(x) / Σ exp(x) over the last axis (§3.2.1)", _softmax_hint),
    Exercise("layer_norm", "LayerNorm", LayerNorm, ("x", "gain", "bias"),
             ("dx", "dgain", "dbias"), (
        Case("rows of d_model", _inputs(_normal(4, 6), _normal(6, loc=1.0, scale=0.5),
                                        _normal(6)), (1e-6,)),
        Case("leading axes (B, T), eps=1e-5",
             _inputs(_normal(2, 3, 5), _normal(5, loc=1.0, scale=0.5), _normal(5)), (1e-5,)),
        Case("shifted, scaled input", _inputs(_normal(3, 4, loc=3.0, scale=4.0),
                                              _normal(4, loc=1.0, scale=0.5), _normal(4)),
             (1e-6,)),
    ), "y = gain ∘ (x - μ) / √(σ² + eps) + bias (§3.1)", _layer_norm_hint),
    Exercise("attention", "ScaledDotProductAttention", ScaledDotProductAttention,
             ("q", "k", "v", "mask"), ("dq", "dk", "dv", None), (
        Case("an all-True mask", _inputs(_normal(3, 4), _normal(5, 4), _normal(5, 2),
                                         _fixed(np.ones((3, 5), bool)))),
        Case("heads, padding mask (B, 1, 1, S)", _inputs(
            _normal(2, 2, 3, 4), _normal(2, 2, 5, 4), _normal(2, 2, 5, 3),
            _fixed([[[[j < n for j in range(5)]]] for n in (5, 2)]))),
        Case("causal mask (T, T)", _inputs(_normal(2, 4, 4), _normal(2, 4, 4), _normal(2, 4, 3),
                                           _fixed(np.tril(np.ones((4, 4), bool))))),
        Case("a query with every key masked", _inputs(_normal(3, 4), _normal(5, 4),
                                                      _normal(5, 3), _fixed(_NO_ROW, bool))),
    ), "softmax(q kᵀ / √D, masked) v (§3.2.1, §3.2.3)", _attention_hint),
    Exercise("embedding", "Embedding", Embedding, ("ids", "weight"), (None, "dW"), (
        Case("repeated ids, an unused row", _inputs(_fixed(_IDS), _normal(6, 3)), (None,)),
        Case("padding_idx=0", _inputs(_fixed(_IDS), _normal(5, 3)), (0,)),
        Case("1-D ids, padding_idx=2", _inputs(_fixed([2, 3, 3, 2, 0, 3]), _normal(4, 2)), (2,)),
    ), "y[n] = W[ids[n]] (§3.4)", _embedding_hint),
    Exercise("cross_entropy", "CrossEntropy", CrossEntropy, ("logits", "targets"),
             ("dlogits", None), (
        Case("ε=0", _inputs(_normal(4, 6), _targets(6, 4)), (0.0, None)),
        Case("ε=0.1, leading axes (B, T)", _inputs(_normal(2, 3, 6), _targets(6, 2, 3)),
             (0.1, None)),
        Case("ε=0.1, ignore_index=-100", _inputs(_normal(3, 4, 6), _targets(
            6, 3, 4, ignored=(1, 7, 8, 10))), (0.1, -100)),
        Case("ε=0.2, padding id 0 ignored", _inputs(_normal(2, 5, 7), _targets(
            7, 2, 5, ignored=(3, 4, 9), ignore=0)), (0.2, 0)),
    ), "mean of -Σ q log softmax(z), q smoothed (§5.4)", _cross_entropy_hint),
)}
