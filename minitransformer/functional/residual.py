"""The post-LN residual connection in one pass: LayerNorm(x + Dropout(h)) (§3.1, §5.4).

§3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))", and §5.4 drops the
sub-layer's output before the sum. With h = Sublayer(x), keep and s = 1 / (1 - p') the mask and
scale of ``dropout.py``, and μ, rstd, x̂ those of ``normalization.py``:

    r = x + h ∘ keep · s            dropout, then the residual sum
    y = gain ∘ x̂(r) + bias          layer norm of r

Backward, with dr the layer norm's backward of dout (normalization.py):

    dx = dr        (the sum passes its gradient to both terms)
    dh = dr ∘ keep · s
    dgain, dbias as the layer norm's

These are the Functions Dropout, Add and LayerNorm one after the other, the same numbers bit
for bit (tested). What fusing them saves on the CPU is memory traffic: one pass over blocks
of rows does all three while a block is in the cache, and writes the mask, r and y, where the
three Functions write the mask, the dropped h, r, x̂ and y and read the dropped h and r back.
Backward computes x̂ again from r, which is kept in its place. A training step of the `small`
model has fifteen of these; training only (evaluation has no dropout:
``Residual`` then calls the layer norm on x + h). With the compiled kernels (``_compiled.py``,
the `fast` extra) each row is one compiled loop instead: the same mask and formulas, its sums
in another order of rounding.

Dimensions: x, h, y (..., C) with C = d_model; gain, bias (C,).
"""

from __future__ import annotations

from .. import backend
from ..autograd.function import Function
from . import _compiled, _cuda
from ._blocks import for_blocks
from ._broadcast import require_float
from .dropout import Dropout, check_dropout_p, draw_levels, levels_kept
from .normalization import (
    LayerNorm,
    add_partial_sums,
    check_eps,
    check_gain_bias,
    gradient_rows,
    layer_norm,
    normalize_rows,
    x_hat_rows,
)


class DropoutAddLayerNorm(Function):
    def __init__(self, p: float, eps: float = 1e-6):
        self.p = check_dropout_p(p)
        check_eps("dropout_add_layer_norm", eps)
        self.eps = float(eps)

    def forward(self, x, h, gain, bias):
        require_float("dropout_add_layer_norm", x=x, h=h)
        check_shapes(x, h)
        check_gain_bias("dropout_add_layer_norm", x, gain, bias)
        xp = backend.get_array_module(x)
        if _cuda.is_cupy(xp):  # the GPU's own kernels, one after the other
            dropout, norm = Dropout(self.p), LayerNorm(self.eps)
            y = norm.forward(x + dropout.forward(h), gain, bias)
            self.saved = (dropout.saved, norm.saved)
            return y
        C = x.shape[-1]
        threshold, scale = levels_kept(self.p)                          # n, 1 / (1 - p')
        scale = x.dtype.type(scale)  # as NumPy applies a Python float to x's dtype
        u = draw_levels(backend.device_of(x), x.shape, xp).reshape(-1, C)  # (N, C) uint16
        x2, h2 = x.reshape(-1, C), h.reshape(-1, C)                     # (N, C) each
        keep = xp.empty(x2.shape, dtype=bool)                           # (N, C)
        r, y = xp.empty_like(x2), xp.empty_like(x2)                     # (N, C) each
        stats = [xp.empty((x2.shape[0], 1), dtype=x.dtype) for _ in range(3)]  # μ, shift, rstd

        def residual(rows):  # on a block of rows, on worker threads
            # 1. keep = [u >= n];  h ∘ keep · s (into y, free until step 3)
            k = xp.greater_equal(u[rows], threshold, out=keep[rows])
            dropped = xp.multiply(h2[rows], k, out=y[rows])
            dropped *= scale
            # 2. r = x + Dropout(h)
            r_rows = xp.add(x2[rows], dropped, out=r[rows])
            # 3. y = LayerNorm(r); x̂ only in a scratch block
            x_hat = xp.empty_like(r_rows)
            for stat, value in zip(stats, normalize_rows(r_rows, gain, bias, self.eps,
                                                         x_hat, y[rows]), strict=True):
                stat[rows] = value
        if _compiled.enabled(xp, x, h, gain, bias):  # the same steps, one compiled loop a row
            residual = _compiled_forward(x2, h2, u, threshold, scale, gain, bias, self.eps,
                                         keep, r, y, stats)
        for_blocks(residual, x2.shape[0], C * x.itemsize, xp)
        self.saved = (r, keep, *stats, gain, scale)
        return y.reshape(x.shape)                                       # (..., C)

    def backward(self, dout):
        xp = backend.get_array_module(dout)
        if _cuda.is_cupy(xp):
            dropout, norm = Dropout(self.p), LayerNorm(self.eps)
            dropout.saved, norm.saved = self.saved
            norm.needs_input_grad = (True, *self.needs_input_grad[2:])
            dr, dgain, dbias = norm.backward(dout)
            dh = dropout.backward(dr) if self.needs_input_grad[1] else None
            return dr, dh, dgain, dbias
        r, keep, mean, shift, rstd, gain, scale = self.saved
        C = r.shape[-1]
        d2 = dout.reshape(-1, C)                                        # (N, C)
        # dx and dh as arrays of their own of dout's shape, written through (N, C) views:
        # the engine may then add x's other gradient into dx in place (engine._sole_owner)
        dx = xp.empty(dout.shape, dtype=dout.dtype)                     # (..., C)
        dr = dx.reshape(-1, C)                                          # (N, C) = dx
        dh_out = xp.empty(dout.shape, dtype=dout.dtype) if self.needs_input_grad[1] else None
        dh = None if dh_out is None else dh_out.reshape(-1, C)          # (N, C)
        partial: dict[int, tuple] = {}                                  # block start -> sums

        def gradients(rows):  # on a block of rows, on worker threads
            # fwd 3: y = LayerNorm(r)  ->  dr, and these rows' shares of dgain and dbias
            x_hat = x_hat_rows(r[rows], mean[rows], shift[rows], rstd[rows],
                               xp.empty_like(r[rows]))
            partial[rows.start] = gradient_rows(d2[rows], x_hat, gain, rstd[rows], dr[rows])
            # fwd 2: r = x + dropped  ->  dx = dr, d(dropped) = dr
            # fwd 1: dropped = h ∘ keep · s  ->  dh = dr ∘ keep · s
            if dh is not None:
                dh_rows = xp.multiply(dr[rows], keep[rows], out=dh[rows])
                dh_rows *= scale
        if _compiled.enabled(xp, d2, r, gain):  # the same steps, one compiled loop a row
            gradients = _compiled_backward(d2, self.saved, dr, dh, partial)
        for_blocks(gradients, d2.shape[0], C * dout.itemsize, xp)
        dgain, dbias = add_partial_sums(partial)
        return (dx if self.needs_input_grad[0] else None, dh_out,
                dgain if self.needs_input_grad[2] else None,
                dbias if self.needs_input_grad[3] else None)


def dropout_add_layer_norm(x, h, gain, bias, p, eps=1e-6, training=True):
    """LayerNorm(x + Dropout(h)) over the last axis: x, h (..., C); gain, bias (C,). In
    evaluation, or with p = 0, the layer norm of x + h."""
    p = check_dropout_p(p)
    if not training or p == 0:
        check_shapes(x, h)
        return layer_norm(x + h, gain, bias, eps)
    return DropoutAddLayerNorm(p, eps)(x, h, gain, bias)


def check_shapes(x, h) -> None:
    """x and h are summed as they are, never broadcast."""
    if tuple(x.shape) != tuple(h.shape):
        raise ValueError(f"dropout_add_layer_norm: the residual x {tuple(x.shape)} and the "
                         f"sub-layer's output h {tuple(h.shape)} must have one shape "
                         f"(..., d_model).")


def _compiled_forward(x2, h2, u, threshold, scale, gain, bias, eps, keep, r, y, stats):
    """forward's row kernel, compiled (``_compiled.py``): μ, shift and rstd from float64
    sums, saved as NumPy's are (backward's x̂ = ((r - μ) - shift) · rstd either way)."""
    kernel = _compiled.kernels().residual_forward
    mean, shift, rstd = stats

    def residual(rows):
        kernel(x2[rows], h2[rows], u[rows], threshold, scale, gain, bias, eps, keep[rows],
               r[rows], y[rows], mean[rows, 0], shift[rows, 0], rstd[rows, 0])
    return residual


def _compiled_backward(d2, saved, dr, dh, partial):
    """backward's row kernel, compiled; each block's dgain and dbias into ``partial``."""
    kernel = _compiled.kernels().residual_backward
    r, keep, mean, shift, rstd, gain, scale = saved
    xp, C = backend.get_array_module(d2), d2.shape[1]
    no_dh = xp.empty((0, C), dtype=d2.dtype)                            # dh not wanted

    def gradients(rows):
        sums = xp.zeros((2, C), dtype=d2.dtype)                         # dgain, dbias
        kernel(d2[rows], r[rows], keep[rows], mean[rows, 0], shift[rows, 0], rstd[rows, 0],
               gain, scale, dr[rows], no_dh if dh is None else dh[rows],
               xp.empty(C, d2.dtype), sums[0], sums[1])
        partial[rows.start] = (sums[0], sums[1])
    return gradients
