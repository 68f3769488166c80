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

On the CPU these steps run on blocks of rows (the NumPy row kernels at the end of this file),
or, with the `fast` extra, as one compiled loop per row (``_compiled.py``).

Dimensions: x (..., C) with C = d_model; gain, bias (C,); mean, rstd (..., 1).
"""

from __future__ import annotations

import math
import numbers

from .. import backend
from ..autograd.function import Function
from . import _compiled, _cuda
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
        check_gain_bias("layer_norm", x, gain, bias)
        C = x.shape[-1]
        xp = backend.get_array_module(x)
        if _cuda.is_cupy(xp):  # steps 1-4 in one row kernel
            y, x_hat, rstd = _cuda.layer_norm_forward(x, gain, bias, self.eps)
            self.saved = (x_hat, rstd, gain)
            return y
        # Steps 1-4 on blocks of rows on worker threads, into two buffers: x̂ and y
        x2 = x.reshape(-1, C)                                           # (N, C)
        x_hat, y = xp.empty_like(x2), xp.empty_like(x2)                 # (N, C) each
        rstd = xp.empty((x2.shape[0], 1), dtype=x.dtype)                # (N, 1)

        def normalize(rows):
            rstd[rows] = normalize_rows(x2[rows], gain, bias, self.eps, x_hat[rows], y[rows])[2]
        if _compiled.enabled(xp, x, gain, bias):  # the same steps, one compiled loop a row
            normalize = _compiled_rows(_compiled.kernels().layer_norm_forward, x2, gain, bias,
                                       self.eps, x_hat, y, rstd[:, 0])
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
            dx_rows = dx[rows] if dx is not None else None
            partial[rows.start] = gradient_rows(d2[rows], x_hat2[rows], gain, rstd2[rows], dx_rows)
        if _compiled.enabled(xp, d2, x_hat2, gain):  # the same, one compiled loop a row
            gradients = _compiled_gradients(d2, x_hat2, gain, rstd2[:, 0], dx, partial)
        for_blocks(gradients, d2.shape[0], C * dout.itemsize, xp)
        dgain, dbias = add_partial_sums(partial)
        dx = dx.reshape(dout.shape) if dx is not None else None
        return (dx, dgain if self.needs_input_grad[1] else None,
                dbias if self.needs_input_grad[2] else None)


# The row kernels, on one block of rows (shared with functional/residual.py).

def normalize_rows(x, gain, bias, eps: float, x_hat, y) -> tuple:
    """Steps 1-4 on rows x (n, C), written into x_hat and y (n, C) (y holds (x - μ)² until
    step 4). Returns (μ, shift, rstd), each (n, 1): ``x_hat_rows`` makes x̂ from them again,
    the same numbers bit for bit."""
    xp = backend.get_array_module(x)
    C = x.shape[-1]
    # 1. μ = mean(x) over the features
    mean = sum_last(x)[:, None] / C                                     # (n, 1)
    centred = xp.subtract(x, mean, out=x_hat)                           # (n, C) = x - μ
    # μ is off by the rounding of its sum: x - μ then has a mean of up to an ulp of |x| (1e-4
    # for x near 1000 in float32), which a row of variance far below eps would blow up to
    # x̂ ~ 0.5 where it should be 0. Take that mean out as well: a constant row then gives
    # exactly x̂ = 0 (as PyTorch's), the others lose nothing
    shift = sum_last(centred)[:, None] / C                              # (n, 1)
    centred -= shift
    # 2. σ² = mean((x - μ)²), rstd = 1 / √(σ² + eps)
    squares = xp.multiply(centred, centred, out=y)                      # (n, C) = (x - μ)²
    rstd = 1.0 / xp.sqrt(sum_last(squares)[:, None] / C + eps)          # (n, 1)
    # 3. x̂ = (x - μ) · rstd
    centred *= rstd                                                     # (n, C)
    # 4. y = gain ∘ x̂ + bias
    xp.multiply(centred, gain, out=squares)
    squares += bias
    return mean, shift, rstd


def x_hat_rows(x, mean, shift, rstd, out):
    """x̂ of rows x (n, C) again, into ``out``, from what ``normalize_rows`` returned."""
    centred = backend.get_array_module(x).subtract(x, mean, out=out)
    centred -= shift
    centred *= rstd
    return centred


def gradient_rows(d, x_hat, gain, rstd, dx) -> tuple:
    """Backward on rows: dout d and x̂ (n, C), rstd (n, 1). Writes dx (n, C) unless it is
    None; returns these rows' shares of dgain and dbias, (C,) each."""
    xp = backend.get_array_module(d)
    C = d.shape[-1]
    # fwd 4: y = gain ∘ x̂ + bias  ->  dgain = Σ_rows dout ∘ x̂, dbias = Σ_rows dout
    d_xh = d * x_hat                                                    # (n, C)
    sums = (sum_rows(d_xh), sum_rows(d))
    if dx is None:
        return sums
    #                               dx̂ = g = dout ∘ gain
    # fwd 3-1: x̂ = (x - μ) · rstd  ->  dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂))
    # Both means are matrix-vector products with gain, without forming g ∘ x̂:
    # mean(g) = (dout · gain) / C,  mean(g ∘ x̂) = ((dout ∘ x̂) · gain) / C
    mean_g = (d @ gain)[:, None] / C                                    # (n, 1)
    mean_gx = (d_xh @ gain)[:, None] / C                                # (n, 1)
    g = xp.multiply(d, gain, out=dx)                                    # (n, C) = g
    g -= mean_g
    g -= xp.multiply(x_hat, mean_gx, out=d_xh)                          # buffer reused
    g *= rstd
    return sums


def add_partial_sums(partial: dict) -> tuple:
    """dgain, dbias from each block's shares, added in block order (the same numbers however
    the blocks were spread over threads)."""
    dgain, dbias = partial.pop(0)
    for start in sorted(partial):
        dgain, dbias = dgain + partial[start][0], dbias + partial[start][1]
    return dgain, dbias


def _compiled_rows(kernel, x2, gain, bias, eps, x_hat, y, rstd):
    """forward's row kernel, compiled (``_compiled.py``): x̂, y and rstd (N,) of a block."""
    def normalize(rows):
        kernel(x2[rows], gain, bias, eps, x_hat[rows], y[rows], rstd[rows])
    return normalize


def _compiled_gradients(d2, x_hat2, gain, rstd, dx, partial):
    """backward's row kernel, compiled: dx (unless None) and each block's dgain, dbias."""
    kernel = _compiled.kernels().layer_norm_backward
    xp, C = backend.get_array_module(d2), d2.shape[1]
    no_dx = xp.empty((0, C), dtype=d2.dtype)                            # dx not wanted

    def gradients(rows):
        sums = xp.zeros((2, C), dtype=d2.dtype)                         # dgain, dbias
        kernel(d2[rows], x_hat2[rows], gain, rstd[rows], no_dx if dx is None else dx[rows],
               xp.empty(C, d2.dtype), sums[0], sums[1])
        partial[rows.start] = (sums[0], sums[1])
    return gradients


def layer_norm(x, gain, bias, eps=1e-6):
    """gain ∘ (x - mean) / √(var + eps) + bias over the last axis: x (..., C), gain and bias
    (C,) -> (..., C)."""
    return LayerNorm(eps)(x, gain, bias)


def check_gain_bias(owner: str, x, gain, bias) -> None:
    """x needs a feature axis, and gain and bias one entry per feature."""
    if x.ndim == 0:
        raise ValueError(f"{owner}: the input needs at least one axis (the features).")
    C = x.shape[-1]
    for name, param in (("gain", gain), ("bias", bias)):
        if tuple(param.shape) != (C,):
            raise ValueError(f"{owner}: {name} of shape {tuple(param.shape)} does not fit "
                             f"the input of shape {tuple(x.shape)}: it must be (C,) = ({C},).")


def check_eps(owner: str, eps: float) -> None:
    """Refuse an eps that is not a number > 0: with eps <= 0 or nan a constant row gives nan."""
    if isinstance(eps, bool) or not (isinstance(eps, numbers.Real) and 0 < eps < math.inf):
        raise ValueError(f"{owner}: eps must be a number > 0 (it keeps 1/√(σ² + eps) finite "
                         f"for a constant row), got {eps!r}.")
