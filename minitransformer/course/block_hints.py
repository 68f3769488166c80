"""Hints for the exercises on blocks: multi-head attention, dropout, the residual sub-layer and
the feed-forward network.

A block's backward chains several steps, and one wrong step makes several gradients wrong.
So each block has its backward written here in NumPy with a switch for each plausible
mistake; a hint computes what the learner's gradient would be under each mistake in turn
and names the first that matches. Dropout, one step, is recognised from the gradient itself.

tests/course/exercise_mistakes.py holds the wrong backwards these hints are tested with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .hints import SOFTMAX_MISTAKES, Clue, close, is_factor, masked_softmax
from .references import dropout_mask


def _swap(a: Any) -> Any:
    return np.swapaxes(a, -1, -2)


def _rows(a: Any) -> Any:
    return a.reshape(-1, a.shape[-1])


def _first_match(clue: Clue, grads: Callable[[str], dict[str, Any]],
                 mistakes: dict[str, str]) -> str | None:
    """The hint of the first mistake whose gradient named ``clue.grad`` is the learner's."""
    for mistake, text in mistakes.items():
        if close(clue.got, grads(mistake)[clue.grad]):
            return text
    return None


# ----------------------------------------------------------------------------- attention

_REORDER = ("the {what} was undone with a reshape alone: forward {forward}; undo those moves "
            "in reverse order ({backward}). A reshape straight back has the right shape, but "
            "mixes positions with heads.")

MULTI_HEAD_MISTAKES = {
    **{name: text for name, (_, text) in SOFTMAX_MISTAKES.items()},
    "no 1/√D": ("the 1/√D is missing from dq and dk: forward divided the scores by √D, so the "
                "gradients reaching q and k (and everything computed from them) carry it once."),
    "merge by reshape": _REORDER.format(
        what="merge of the heads", forward="transposed A (B, H, T, D) to (B, T, H, D), then "
        "reshaped it to (B, T, C)", backward="reshape dconcat to (B, T, H, D), then transpose"),
    "split by reshape": _REORDER.format(
        what="split into heads", forward="reshaped Q (B, T, C) to (B, T, H, D), then "
        "transposed it to (B, H, T, D), and so for K and V", backward="transpose dq to "
        "(B, T, H, D), then reshape to (B, T, C)"),
    "keys only": ("dx_kv has only the path through the keys: x_kv is projected to the values "
                  "too, V = x_kv W_vᵀ, and the gradients of the two paths add."),
    "values only": ("dx_kv has only the path through the values: x_kv is projected to the keys "
                    "too, K = x_kv W_kᵀ, and the gradients of the two paths add."),
}


def _multi_head_grads(inputs: dict[str, Any], n_heads: int, dout: Any,
                      mistake: str) -> dict[str, Any]:
    x_q, x_kv, w_q, w_k, w_v, w_o, mask = inputs.values()
    B, T, C = x_q.shape
    S, H = x_kv.shape[1], n_heads
    D = C // H
    scale = 1 / np.sqrt(D)

    def split(X, L):                                                   # (B, L, C) -> heads
        return X.reshape(B, L, H, D).transpose(0, 2, 1, 3)

    def merge(a, L):                                                   # heads -> (B, L, C)
        if mistake == "split by reshape":
            return a.reshape(B, L, C)
        return a.transpose(0, 2, 1, 3).reshape(B, L, C)

    q, k, v = split(x_q @ w_q.T, T), split(x_kv @ w_k.T, S), split(x_kv @ w_v.T, S)
    P = masked_softmax(q @ _swap(k) * scale, mask)                     # (B, H, T, S)
    concat = (P @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    dconcat = dout @ w_o
    dA = (dconcat.reshape(B, H, T, D) if mistake == "merge by reshape"
          else dconcat.reshape(B, T, H, D).transpose(0, 2, 1, 3))
    dv, dP = _swap(P) @ dA, dA @ _swap(v)
    softmax_backward = SOFTMAX_MISTAKES.get(mistake, (
        lambda P, dP: P * (dP - (dP * P).sum(axis=-1, keepdims=True)), ""))[0]
    dS = softmax_backward(P, dP)
    if mistake == "no 1/√D":
        scale = 1.0
    dQ, dK, dV = merge(dS @ k * scale, T), merge(_swap(dS) @ q * scale, S), merge(dv, S)
    through_k, through_v = dK @ w_k, dV @ w_v
    dx_kv = {"keys only": through_k, "values only": through_v}.get(mistake, through_k + through_v)
    return {"dx_q": dQ @ w_q, "dx_kv": dx_kv, "dw_q": _rows(dQ).T @ _rows(x_q),
            "dw_k": _rows(dK).T @ _rows(x_kv), "dw_v": _rows(dV).T @ _rows(x_kv),
            "dw_o": _rows(dout).T @ _rows(concat)}


def _multi_head_hint(clue: Clue) -> str | None:
    return _first_match(clue, lambda m: _multi_head_grads(clue.inputs, clue.args[0], clue.dout,
                                                          m), MULTI_HEAD_MISTAKES)


# ----------------------------------------------------------------------------- dropout

def _dropout_hint(clue: Clue) -> str | None:
    p, training, seed = clue.args
    dout, got = clue.dout, clue.got
    if not training:
        if is_factor(clue, 1 / (1 - p)) or is_factor(clue, 1 - p):
            return ("in evaluation dropout is the identity, y = x, so dx = dout: nothing is "
                    "dropped or scaled (inverted dropout does its scaling in training).")
        return None
    keep, scale = dropout_mask(dout.shape, p, seed), 1 / (1 - p)
    if close(got, dout * keep):
        return (f"the scale is missing: forward multiplied the kept entries by 1 / (1 - p) = "
                f"{scale:.4g}, so their gradient carries it too.")
    if close(got, dout * keep * (1 - p)):
        return "you multiplied by 1 - p where forward divided by it: the scale is 1 / (1 - p)."
    if close(got, dout * scale) or close(got, dout):
        return ("the mask is missing: the entries that forward dropped did not reach the "
                "output, so their gradient is 0.")
    zero, passed = np.isclose(got, 0, atol=1e-12), np.isclose(got, dout * scale, rtol=1e-9)
    if (zero | passed).all() and (zero != ~keep).any():
        return ("the zeros are in the wrong places: a mask drawn again in backward is not the "
                "one forward used; take that one from self.saved.")
    return None


# ----------------------------------------------------------------------------- the sub-layer

RESIDUAL_MISTAKES = {
    "no residual path": ("the residual path is missing: x reaches r = x + Sublayer(x) twice, "
                         "through the sub-layer and directly, and the gradient of the direct "
                         "path, dr, adds to dx."),
    "no sub-layer path": ("dx has only the residual path: x also goes through the sub-layer "
                          "s = x wᵀ + b, and that path's gradient adds to dx."),
    "dout into the sub-layer": ("the sub-layer got dout as its upstream gradient: the layer "
                                "norm stands between s and the output, so the gradient "
                                "reaching s is dr, the norm's backward of dout."),
    "no mean path": ("the gradient reaching r misses the path through the mean μ "
                     "(∂μ/∂r_j = 1/C), the term of the layer norm that is the same along each "
                     "row; every gradient below the norm inherits the error."),
    "no variance path": ("the gradient reaching r misses the path through the variance σ² "
                         "(inside rstd), the term of the layer norm proportional to r̂; every "
                         "gradient below the norm inherits the error."),
}


def _residual_grads(inputs: dict[str, Any], eps: float, dout: Any,
                    mistake: str) -> dict[str, Any]:
    x, w, b, gain, _ = inputs.values()
    r = x + x @ w.T + b
    rc = r - r.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((rc * rc).mean(-1, keepdims=True) + eps)
    r_hat, g = rc * rstd, dout * gain
    mean_g = 0 if mistake == "no mean path" else g.mean(-1, keepdims=True)
    mean_gr = 0 if mistake == "no variance path" else (g * r_hat).mean(-1, keepdims=True)
    dr = rstd * (g - mean_g - r_hat * mean_gr)
    ds = dout if mistake == "dout into the sub-layer" else dr
    dx = {"no residual path": ds @ w, "no sub-layer path": dr}.get(mistake, dr + ds @ w)
    return {"dx": dx, "dw": _rows(ds).T @ _rows(x), "db": _rows(ds).sum(0)}


def _residual_hint(clue: Clue) -> str | None:
    if clue.grad not in ("dx", "dw", "db"):
        return None
    return _first_match(clue, lambda m: _residual_grads(clue.inputs, clue.args[0], clue.dout,
                                                        m), RESIDUAL_MISTAKES)


# ----------------------------------------------------------------------------- feed-forward

_GATE_BY_VALUE = ("the ReLU's derivative is a gate, 1 where h > 0 and 0 elsewhere: the "
                  "gradient was multiplied by the activation instead of by its derivative.")

FEED_FORWARD_MISTAKES = {
    "no gate": ("the ReLU's gate is missing: where h = x W₁ᵀ + b₁ < 0 the unit was off, the "
                "output did not depend on h, and dh is 0 there."),
    "times a": _GATE_BY_VALUE,
    "times h": _GATE_BY_VALUE,
    "h for a": ("dw2 was built from the pre-activation h: the second layer multiplied "
                "a = max(0, h), the ReLU's output, by W₂ᵀ, so its weight gradient uses a."),
}


def _feed_forward_grads(inputs: dict[str, Any], dout: Any, mistake: str) -> dict[str, Any]:
    x, w1, b1, w2, _ = inputs.values()
    x2, dout2 = _rows(x), _rows(dout)
    h = x2 @ w1.T + b1
    a = np.maximum(h, 0.0)
    da = dout2 @ w2
    dh = {"no gate": da, "times a": da * a, "times h": da * h}.get(mistake, da * (h > 0))
    return {"dx": (dh @ w1).reshape(x.shape), "dw1": dh.T @ x2, "db1": dh.sum(0),
            "dw2": dout2.T @ (h if mistake == "h for a" else a)}


def _feed_forward_hint(clue: Clue) -> str | None:
    if clue.grad == "db2":
        return None
    return _first_match(clue, lambda m: _feed_forward_grads(clue.inputs, clue.dout, m),
                        FEED_FORWARD_MISTAKES)


BLOCK_HINTS = {
    "multi_head_attention": _multi_head_hint,
    "dropout": _dropout_hint,
    "residual_layer_norm": _residual_hint,
    "feed_forward": _feed_forward_hint,
}
