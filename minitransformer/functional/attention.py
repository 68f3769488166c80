"""Scaled dot-product attention, the core of the Transformer (§3.2.1), with masks (§3.2.3).

§3.2.1: "We compute the dot products of the query with all keys, divide each by √d_k, and
apply a softmax function to obtain the weights on the values":

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

§3.2.3: in the decoder, "we need to prevent leftward information flow ... We implement this
inside of scaled dot-product attention by masking out (setting to −∞) all values in the input
of the softmax which correspond to illegal connections." Padding keys are masked the same way.

Forward, with mask m (True = this query may attend to this key):

    S = Q Kᵀ / √D,   S = -∞ where not m
    P = softmax_rows(S)      masked keys get exactly 0; a row with no key left gets all 0
    out = P V

Backward (dP is the gradient reaching the weights, dS the one reaching the scores):

    out = P V            ->  dV = Pᵀ dout,   dP = dout Vᵀ
    P = softmax(S)       ->  dS = P ∘ (dP - rowsum(dP ∘ P)),
                             where rowsum(dP ∘ P) = rowsum(dout ∘ out), a sum over Dv
                             (∂P_ij/∂S_ik = P_ij (δ_jk - P_ik); masked entries have P = 0,
                             so they get dS = 0, exactly as the -∞ fill's gradient would be)
    S = Q Kᵀ / √D        ->  dQ = dS K / √D,   dK = dSᵀ Q / √D

Dimensions: q (..., T, D), k (..., S, D), v (..., S, Dv), mask broadcastable to (..., T, S),
where ... are the leading axes (typically B, H), T queries, S keys, D = d_k the head size,
Dv = d_v; scores and weights (..., T, S); out (..., T, Dv).
"""

from __future__ import annotations

import math
import operator

from .. import backend
from ..autograd.function import Function
from ..autograd.tensor import Tensor
from . import _compiled, _cuda, _packed
from ._blocks import for_blocks
from ._broadcast import broadcast_shapes, require_float
from ._products import matmul
from ._reduce import sum_last
from .indexing import on_device_of


class ScaledDotProductAttention(Function):
    """Set ``keep_weights`` to find the attention weights P on ``self.weights`` after the call
    (for visualisation; they are not part of the graph)."""

    keep_weights = False
    weights = None

    def forward(self, q, k, v, mask=None):
        _check_shapes(q, k, v, mask)
        xp = backend.get_array_module(q)
        D = q.shape[-1]
        scale = 1.0 / math.sqrt(D)
        if _cuda.is_cupy(xp):  # steps 2-5 in two kernels
            P = matmul(q, xp.swapaxes(k, -1, -2))                       # (..., T, S)
            if P.shape[-1]:  # with no key (S = 0) there are no weights to normalize
                P = _cuda.masked_softmax_(P, mask, scale)
            out = matmul(P, v)                                          # (..., T, Dv)
        else:  # all steps on one block of the leading axis at a time, while it is in cache
            P = xp.empty(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)  # (..., T, S)
            out = _heads_last(xp, q.shape[:-1] + (v.shape[-1],), q.dtype)  # (..., T, Dv)
            softmax_ = _compiled_softmax_ if _compiled_path(xp, P, q) else _masked_softmax_

            def attend(rows):
                # 1. S = Q Kᵀ / √D, in place in P (steps 2-5 too)
                p = xp.matmul(q[rows], xp.swapaxes(k[rows], -1, -2), out=P[rows])
                softmax_(xp, p, _block_of(mask, rows, P.ndim), scale)
                # 6. out = P V
                xp.matmul(p, v[rows], out=out[rows])
            _for_leading_blocks(attend, P, xp)
        self.saved = (q, k, v, P, out)
        self.scale, self.has_mask = scale, mask is not None
        if self.keep_weights:
            self.weights = P
        return out

    def backward(self, dout):
        q, k, v, P, out = self.saved
        xp = backend.get_array_module(dout)
        want_dqk = self.needs_input_grad[0] or self.needs_input_grad[1]
        # dq, dk, dv laid out as q, k, v: where those are one projection split (self-
        # attention's Q, K, V; cross-attention's K, V), the gradients are that one array
        # (_packed.py), which the split's backward hands on without a copy
        wanted = [a for a, need in zip((q, k, v), self.needs_input_grad[:3], strict=True)
                  if need]
        grads = iter(_packed.empty_like_views(xp, wanted))
        dq, dk, dv = (next(grads) if need else None for need in self.needs_input_grad[:3])
        # on the GPU through cuBLAS directly (a CUDA graph can hold it); on a CPU worker's
        # block, one single-threaded BLAS call
        mm = matmul if _cuda.is_cupy(xp) else xp.matmul
        compiled = _compiled_path(xp, P, dout)

        def gradients(rows):  # a block of the leading axis (all of it on the GPU)
            p, g = P[rows], dout[rows]
            # fwd 6: out = P V  ->  dV = Pᵀ dout,  dP = dout Vᵀ
            if dv is not None:
                mm(xp.swapaxes(p, -1, -2), g, out=dv[rows])             # (..., S, Dv)
            if not want_dqk:
                return
            dS = mm(g, xp.swapaxes(v[rows], -1, -2))                    # (..., T, S) = dP
            # fwd 5-2: P = softmax(S) per row  ->  dS = P ∘ (dP - rowsum(dP ∘ P)).
            # The row sum is the shorter rowsum(dout ∘ out) over Dv instead of S:
            # Σ_j P_ij dP_ij = Σ_j P_ij (dout_i · v_j) = dout_i · Σ_j P_ij v_j = dout_i · out_i.
            # (masked entries and fully masked rows have P = 0, hence dS = 0)
            scaled = compiled  # dS / √D made at once (compiled), else dQ and dK scaled
            if compiled:  # the row's dot product and dS in one pass, times 1 / √D
                _compiled.kernels().softmax_gradient(dS, p, g, out[rows],
                                                     dS.dtype.type(self.scale))
            else:
                delta = sum_last(g * out[rows])[..., None]              # (..., T, 1)
                if _cuda.is_cupy(xp):
                    dS = _cuda.softmax_backward_(dS, p, delta)          # one kernel
                else:
                    dS -= delta                                         # (..., T, S)
                    dS *= p
            # fwd 1: S = Q Kᵀ / √D  ->  dQ = dS K / √D,  dK = dSᵀ Q / √D
            if dq is not None:
                mm(dS, k[rows], out=dq[rows])                           # (..., T, D)
                if not scaled:
                    dq[rows] *= self.scale
            if dk is not None:
                mm(xp.swapaxes(dS, -1, -2), q[rows], out=dk[rows])      # (..., S, D)
                if not scaled:
                    dk[rows] *= self.scale
        _for_leading_blocks(gradients, P, xp)
        return (dq, dk, dv, None) if self.has_mask else (dq, dk, dv)


def _for_leading_blocks(kernel, P, xp):
    """kernel(rows) over blocks of P's first axis (P (..., T, S) with 3 or more axes), or
    once with ``...`` for a single (T, S) matrix."""
    if P.ndim < 3:
        kernel(Ellipsis)
    else:
        # blocks on the worker threads, each block's matmuls on one BLAS thread
        for_blocks(kernel, P.shape[0], P[0].nbytes if len(P) else 0, xp)  # an empty batch too


def _heads_last(xp, shape, dtype):
    """An empty (B, H, T, Dv) array laid out as (B, T, H, Dv) in memory: multi-head attention
    merges the heads next, out.transpose(0, 2, 1, 3).reshape(B, T, H·Dv), which is then a
    view instead of a copy. Other ranks: C order."""
    if len(shape) != 4:
        return xp.empty(shape, dtype=dtype)
    B, H, T, Dv = shape
    return xp.empty((B, T, H, Dv), dtype=dtype).transpose(0, 2, 1, 3)


def _block_of(mask, rows, ndim):
    """The rows of ``mask`` (broadcastable to the scores, ndim axes) for a block ``rows`` of
    the scores' first axis: all of it where the mask has no such axis or broadcasts it."""
    if mask is None or rows is Ellipsis or mask.ndim < ndim or mask.shape[0] == 1:
        return mask
    return mask[rows]


def _masked_softmax_(xp, P, mask, scale):
    """Steps 1-5 of forward on the raw products P = Q Kᵀ (..., T, S), in place."""
    if P.shape[-1] == 0:  # no key at all (S = 0): no weights, and the output is 0
        return P
    # 1. S = Q Kᵀ / √D
    P *= scale
    # 2. S = -∞ where the mask forbids the connection
    if mask is not None:
        xp.copyto(P, xp.asarray(-math.inf, dtype=P.dtype), where=~mask)
    # 3. row maximum, 0 for a fully masked row (so exp sees -∞ - 0, never -∞ - (-∞))
    row_max = P.max(axis=-1, keepdims=True)                             # (..., T, 1)
    xp.copyto(row_max, 0, where=row_max == -math.inf)  # no y[mask] =: a GPU counts the mask
    # 4. e = exp(S - max): masked entries are exp(-∞) = 0 exactly
    P -= row_max
    xp.exp(P, out=P)
    # 5. P = e / Σ e, with the sum of a fully masked row replaced by 1 (0 / 1 = 0)
    denom = sum_last(P)[..., None]                                      # (..., T, 1)
    xp.copyto(denom, 1, where=denom == 0)
    P /= denom
    return P


def _compiled_path(xp, P, *arrays) -> bool:
    """Whether the softmax and its backward take the compiled kernels (``_compiled.py``):
    on NumPy with Numba, float32 or float64, for scores (B, H, T, S), multi-head attention's."""
    return P.ndim == 4 and _compiled.enabled(xp, P, *arrays)


def _compiled_softmax_(xp, P, mask, scale):
    """Steps 1-5 of forward in compiled passes on scores P (b, H, T, S), in place: the
    scale, the mask, the row max and the shift in one, the exp (compiled ``exp32`` in float32,
    NumPy's in float64), the row sum and the division in one. The same numbers as
    ``_masked_softmax_`` but for the rounding of the exp (within 1.01 ulp, NumPy's 2.4), of the
    row's sum (another order, in float64) and of the division (a product with the sum's
    reciprocal)."""
    if P.shape[-1] == 0:
        return P
    kernels = _compiled.kernels()
    use_mask = mask is not None
    mask = xp.broadcast_to(mask if use_mask else xp.ones((), dtype=bool), P.shape)
    kernels.softmax_shift(P, mask, use_mask, P.dtype.type(scale))
    if P.dtype == xp.float32:
        kernels.exp_scores(P)                                           # e = exp(S - max)
    else:
        xp.exp(P, out=P)
    kernels.softmax_normalize(P)
    return P


def _check_shapes(q, k, v, mask) -> None:
    require_float("scaled_dot_product_attention", q=q, k=k, v=v)
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(f"scaled_dot_product_attention: q, k and v need at least 2 axes "
                         f"(..., length, features), got {shapes}.")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"scaled_dot_product_attention: q and k must have the same head size "
                         f"D (last axis) to be compared, got {shapes}.")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: k and v must have the same number of "
                         f"keys S (second-to-last axis), got {shapes}.")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"scaled_dot_product_attention: q, k and v must have the same leading "
                         f"axes (e.g. (B, H)), got {shapes}.")
    if mask is None:
        return
    if mask.dtype.kind != "b":
        raise TypeError(f"scaled_dot_product_attention: the mask must be boolean (True = may "
                        f"attend), got dtype {mask.dtype}.")
    scores_shape = tuple(q.shape[:-1]) + (k.shape[-2],)
    try:
        fits = broadcast_shapes("mask", mask.shape, scores_shape) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"scaled_dot_product_attention: the mask of shape {tuple(mask.shape)} "
                         f"does not broadcast to the scores' shape {scores_shape} (..., T, S).")


def scaled_dot_product_attention(q, k, v, mask=None, return_weights=False):
    """softmax(q kᵀ / √D) v with ``mask`` (True = may attend) broadcast over the scores.

    q (..., T, D), k (..., S, D), v (..., S, Dv), mask broadcastable to (..., T, S) or None
    -> out (..., T, Dv); with ``return_weights``, (out, weights) where weights (..., T, S) is a
    Tensor of the attention weights without gradient. A query whose keys are all masked gets
    zero weights and a zero output.
    """
    fn = ScaledDotProductAttention()
    fn.keep_weights = return_weights
    if mask is None:
        out = fn(q, k, v)
    else:
        mask = on_device_of(q, mask)
        if mask.dtype.kind != "b":
            raise TypeError(f"scaled_dot_product_attention: the mask must be boolean (True = "
                            f"may attend), got dtype {mask.dtype}; build it with a comparison "
                            "such as (ids != pad_id).")
        out = fn(q, k, v, Tensor(mask))  # a Tensor: kept boolean, never cast to float
    if not return_weights:
        return out
    weights, fn.weights = Tensor(fn.weights), None
    return out, weights


def causal_mask(T, device=None):
    """A (T, T) boolean Tensor, True on and below the diagonal: query i may see keys j <= i
    (§3.2.3, "preventing positions from attending to subsequent positions")."""
    try:
        length = operator.index(T)
    except TypeError:
        length = -1
    if length < 0:  # arange(2.5) would give a (3, 3) mask, arange(-1) an empty one
        raise ValueError(f"causal_mask: T must be a non-negative integer (the sequence "
                         f"length), got {T!r}.")
    xp = backend.get_backend(device).xp
    position = xp.arange(length)                                        # (T,)
    return Tensor(position[None, :] <= position[:, None])               # (T, T): j <= i
