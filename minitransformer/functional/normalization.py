"""Layer normalization over the last axis (Ba, Kiros & Hinton, 2016), around every sub-layer.

§3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))". Each row (one token's
d_model features) is centred and scaled to unit variance, then given a learned gain and bias:

    μ = mean(x),  σ² = mean((x - μ)²),  rstd = 1 / √(σ² + eps)
    x̂ = (x - μ) · rstd
    y = gain ∘ x̂ + bias

Backward, per row, with g = dout ∘ gain (the gradient reaching x̂):

    dgain = Σ_rows dout ∘ x̂          dbias = Σ_rows dout          (over all leading axes)
    dx = rstd · (g - mean(g) - x̂ ∘ mean(g ∘ x̂))

Derivation: x̂_i = (x_i - μ) rstd with ∂μ/∂x_j = 1/C and ∂rstd/∂x_j = -rstd³ (x_j - μ)/C
= -rstd² x̂_j / C, so ∂x̂_i/∂x_j = rstd (δ_ij - 1/C - x̂_i x̂_j / C), and
dx_j = Σ_i g_i ∂x̂_i/∂x_j = rstd (g_j - mean(g) - x̂_j mean(g ∘ x̂)).

Dimensions: x (..., C) with C = d_model; gain, bias (C,); mean, rstd (..., 1).
"""

from __future__ import annotations

import math
import numbers

from .. import backend
from ..autograd.function import Function
from . import _cuda
from ._blocks import for_blocks
from ._broadcast import require_float
from ._reduce import sum_last, sum_rows


class LayerNorm(Function):
    def __init__(self, eps: float = 1e-6):
        if type(eps) is not float or not 0 < eps < math.inf:  # the usual float: one test
            check_eps("layer_norm", eps)
        self.eps = float(eps)

    def forward(self, x, gain, bias):
        require_float("layer_norm", x=x)
        if x.ndim == 0:
            raise ValueError("layer_norm: the input needs at least one axis (the features).")
        C = x.shape[-1]
        for name, param in (("gain", gain), ("bias", bias)):
            if tuple(param.shape) != (C,):
                raise ValueError(f"layer_norm: {name} of shape {tuple(param.shape)} does not fit "
                                 f"the input of shape {tuple(x.shape)}: it must be (C,) = ({C},).")
        xp = backend.get_array_module(x)
        if _cuda.is_cupy(xp):  # steps 1-4 in one row kernel
            y, x_hat, rstd = _cuda.layer_norm_forward(x, gain, bias, self.eps)
            self.saved = (x_hat, rstd, gain)
            return y
        # Steps 1-4 on blocks of rows on worker threads, into two buffers: x̂ and y (which
        # holds (x - μ)² until step 4).
        x2 = x.reshape(-1, C)                                           # (N, C)
        x_hat, y = xp.empty_like(x2), xp.empty_like(x2)                 # (N, C) each
        rstd = xp.empty((x2.shape[0], 1), dtype=x.dtype)                # (N, 1)

        def normalize(rows):
            # 1. μ = mean(x) over the features
            mean = sum_last(x2[rows])[:, None] / C                      # (n, 1)
            centred = xp.subtract(x2[rows], mean, out=x_hat[rows])      # (n, C) = x - μ
            # μ is off by the rounding of its sum: x - μ then has a mean of up to an ulp of
            # |x| (1e-4 for x near 1000 in float32), which a row of variance far below eps
            # would blow up to x̂ ~ 0.5 where it should be 0. Take that mean out as well: a
            # constant row then gives exactly x̂ = 0 (as PyTorch's), the others lose nothing
            centred -= sum_last(centred)[:, None] / C                   # (n, C)
            # 2. σ² = mean((x - μ)²), rstd = 1 / √(σ² + eps)
            squares = xp.multiply(centred, centred, out=y[rows])        # (n, C) = (x - μ)²
            rstd[rows] = 1.0 / xp.sqrt(sum_last(squares)[:, None] / C + self.eps)
            # 3. x̂ = (x - μ) · rstd
            centred *= rstd[rows]                                       # (n, C)
            # 4. y = gain ∘ x̂ + bias
            xp.multiply(centred, gain, out=squares)
            squares += bias
        for_blocks(normalize, x2.shape[0], C * x.itemsize, xp)
        shape = x.shape[:-1] + (1,)
        self.saved = (x_hat.reshape(x.shape), rstd.reshape(shape), gain)
        return y.reshape(x.shape)                                       # (..., C)

    def backward(self, dout):
        x_hat, rstd, gain = self.saved
        xp = backend.get_array_module(dout)
        C = x_hat.shape[-1]
        if _cuda.is_cupy(xp):  # dx in one kernel; dgain, dbias as below on all rows at once
            dx = (_cuda.layer_norm_backward(dout, gain, x_hat, rstd)
                  if self.needs_input_grad[0] else None)
            dgain = sum_rows((dout * x_hat).reshape(-1, C)) if self.needs_input_grad[1] else None
            dbias = sum_rows(dout.reshape(-1, C)) if self.needs_input_grad[2] else None
            return dx, dgain, dbias
        # Everything on blocks of rows on worker threads, in one pass: each block adds its
        # rows' share of dgain and dbias to partial sums, added up in block order at the end.
        d2, x_hat2, rstd2 = dout.reshape(-1, C), x_hat.reshape(-1, C), rstd.reshape(-1, 1)
        dx = xp.empty_like(d2) if self.needs_input_grad[0] else None   # (N, C)
        partial: dict[int, tuple] = {}                                  # block start -> sums

        def gradients(rows):
            d, xh = d2[rows], x_hat2[rows]                              # (n, C) each
            # fwd 4: y = gain ∘ x̂ + bias  ->  dgain = Σ_rows dout ∘ x̂, dbias = Σ_rows dout
            d_xh = d * xh                                               # (n, C)
            partial[rows.start] = (sum_rows(d_xh), sum_rows(d))
            if dx is None:
                return
            #                               dx̂ = g = dout ∘ gain
            # fwd 3-1: x̂ = (x - μ) · rstd  ->  dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂))
            # Both means are matrix-vector products with gain, without forming g ∘ x̂:
            # mean(g) = (dout · gain) / C,  mean(g ∘ x̂) = ((dout ∘ x̂) · gain) / C
            mean_g = (d @ gain)[:, None] / C                            # (n, 1)
            mean_gx = (d_xh @ gain)[:, None] / C                        # (n, 1)
            g = xp.multiply(d, gain, out=dx[rows])                      # (n, C) = g
            g -= mean_g
            g -= xp.multiply(xh, mean_gx, out=d_xh)                     # buffer reused
            g *= rstd2[rows]
        for_blocks(gradients, d2.shape[0], C * dout.itemsize, xp)
        dgain, dbias = partial.pop(0)
        for start in sorted(partial):
            dgain, dbias = dgain + partial[start][0], dbias + partial[start][1]
        dx = dx.reshape(dout.shape) if dx is not None else None
        return (dx, dgain if self.needs_input_grad[1] else None,
                dbias if self.needs_input_grad[2] else None)


def layer_norm(x, gain, bias, eps=1e-6):
    """gain ∘ (x - mean) / √(var + eps) + bias over the last axis: x (..., C), gain and bias
    (C,) -> (..., C)."""
    return LayerNorm(eps)(x, gain, bias)


def check_eps(owner: str, eps: float) -> None:
    """Refuse an eps that is not a number > 0: with eps <= 0 or nan a constant row gives nan."""
    if isinstance(eps, bool) or not (isinstance(eps, numbers.Real) and 0 < eps < math.inf):
        raise ValueError(f"{owner}: eps must be a number > 0 (it keeps 1/√(σ² + eps) finite "
                         f"for a constant row), got {eps!r}.")
