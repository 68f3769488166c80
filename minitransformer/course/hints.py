"""Hints for the exercises on one layer: recognise a mistake from the gradient it produced.

The grader calls an exercise's hint with a ``Clue``: one wrong gradient of one case, the
right one, the case's inputs and upstream gradient. A hint recomputes, in NumPy, what a
plausible mistake would have given (the diagonal of softmax's Jacobian alone, a row sum over
the wrong axis, a missing path of the layer norm ...) and, when the learner's gradient is
that, names the mistake in one sentence; otherwise it returns None and the grader falls back
on what it can say of any gradient (zeros, a transpose, a constant factor).

tests/course/exercise_mistakes.py holds the wrong backwards these hints are tested with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..functional.activation import Softmax
from ..functional.loss import CrossEntropy


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


def close(a: Any, b: Any) -> bool:
    """a equals b up to rounding; b may broadcast to a's shape (a row's constant, say)."""
    try:
        b = np.broadcast_to(b, np.shape(a))
    except ValueError:
        return False
    return bool(np.allclose(a, b, rtol=1e-6, atol=1e-9 * max(np.abs(b).max(initial=0), 1e-300)))


def is_factor(clue: Clue, value: float) -> bool:
    return clue.factor is not None and abs(clue.factor - value) < 1e-6 * abs(value)


# ----------------------------------------------------------------------------- softmax

def masked_softmax(scores: Any, mask: Any) -> Any:
    """softmax over the last axis with -∞ where not ``mask``; a fully masked row gives 0."""
    scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(row_max == -np.inf, 0.0, row_max))
    denom = e.sum(axis=-1, keepdims=True)
    return e / np.where(denom == 0, 1.0, denom)


# The softmax backward dS = P ∘ (dP - rowsum(dP ∘ P)) as the mistakes write it, with the hint
# each one gets, for the exercises that contain a softmax of scores.
SOFTMAX_MISTAKES = {
    "row sum dropped": (
        lambda P, dP: P * dP,
        "the softmax's row-sum term is missing: dS = P ∘ dP is the diagonal of its Jacobian "
        "alone, but every weight of a row depends on every score of that row (through the "
        "sum that normalises it)."),
    "row sum over the wrong axis": (
        lambda P, dP: P * (dP - (dP * P).sum(axis=-2, keepdims=True)),
        "the softmax's row sum runs over the wrong axis: each query's weights are normalised "
        "over the keys, the last axis, so the sum is over axis=-1 (keepdims=True)."),
}


def _softmax_hint(clue: Clue) -> str | None:
    y = Softmax().forward(clue.inputs["x"])
    if close(clue.got, y * clue.dout) or close(clue.got, clue.dout * y * (1 - y)):
        return ("that is the diagonal of the Jacobian alone: every y_i also depends on every "
                "other x_j of its row, through the sum in the denominator.")
    for axis in range(y.ndim - 1):
        if close(clue.got, y * (clue.dout - (clue.dout * y).sum(axis=axis, keepdims=True))):
            return (f"the sum Σ dout ∘ y runs over axis {axis}, not over the row: softmax "
                    "normalises the last axis, so sum with axis=-1 (keepdims=True).")
    return None


def _attention_hint(clue: Clue) -> str | None:
    q, k, v, mask = (clue.inputs[n] for n in ("q", "k", "v", "mask"))
    root = float(np.sqrt(q.shape[-1]))
    if clue.factor is not None and clue.grad in ("dq", "dk"):
        for value, text in ((root, "√D"), (1 / root, "1/√D"), (root * root, "D")):
            if is_factor(clue, value):
                return (f"off by a factor {text} = {value:.3f}: the scores were divided by √D in "
                        "forward, so dq and dk carry that 1/√D once.")
    if clue.grad not in ("dq", "dk"):
        return None
    P = masked_softmax(q @ np.swapaxes(k, -1, -2) / root, mask)
    dP = clue.dout @ np.swapaxes(v, -1, -2)
    for backward, text in SOFTMAX_MISTAKES.values():
        dS = backward(P, dP)
        wrong = dS @ k / root if clue.grad == "dq" else np.swapaxes(dS, -1, -2) @ q / root
        if close(clue.got, wrong):
            return text
    return None


# ----------------------------------------------------------------------------- the others

def _linear_hint(clue: Clue) -> str | None:
    x, weight = clue.inputs["x"], clue.inputs["weight"]
    C_out, C_in = weight.shape
    if clue.grad == "dx" and C_out == C_in and close(clue.got, clue.dout @ weight.T):
        return ("that is dout Wᵀ: forward multiplied by Wᵀ, so the gradient goes back through "
                "W (the shapes agree only because this W is square).")
    if clue.grad == "db" and is_factor(clue, C_in / x.size):
        return ("that is the mean of dout over the rows: b is added to every row, and every "
                "row's gradient counts in full, so db is their sum.")
    return None


def _layer_norm_hint(clue: Clue) -> str | None:
    x, gain = clue.inputs["x"], clue.inputs["gain"]
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + clue.args[0])
    x_hat, g = xc * rstd, clue.dout * gain
    err = clue.got - clue.expected
    if clue.grad == "dgain" and close(clue.got, (clue.dout * x).reshape(-1, x.shape[-1]).sum(0)):
        return "you used x where x̂ belongs: y = gain ∘ x̂ + bias."
    if clue.grad != "dx":
        return None
    if close(clue.got, rstd * g):
        return "μ and σ² were treated as constants: both depend on x, follow those two paths too."
    if close(err, rstd * g.mean(-1, keepdims=True)):
        return ("the error is the same along each row: the path through the mean μ "
                "(∂μ/∂x_j = 1/C) is missing or wrong.")
    if close(err, rstd * x_hat * (g * x_hat).mean(-1, keepdims=True)):
        return ("the error is proportional to x̂ in each row: the path through the variance σ² "
                "(inside rstd) is missing or wrong.")
    d = clue.dout  # the gradient with g = dout, as if gain were all ones
    if close(clue.got, rstd * (d - d.mean(-1, keepdims=True)
                               - x_hat * (d * x_hat).mean(-1, keepdims=True))):
        return "the gain is missing: the gradient reaching x̂ is dout ∘ gain."
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
    if eps and close(clue.got, plain.backward(clue.dout)[0]):
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
            if is_factor(clue, value):
                return f"off by a constant factor {clue.factor:.3f}: {text}."
    return None


LAYER_HINTS = {
    "linear": _linear_hint,
    "softmax": _softmax_hint,
    "layer_norm": _layer_norm_hint,
    "attention": _attention_hint,
    "embedding": _embedding_hint,
    "cross_entropy": _cross_entropy_hint,
}
