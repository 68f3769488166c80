"""The position-wise feed-forward network as one Function (§3.3).

§3.3: "FFN(x) = max(0, xW₁ + b₁)W₂ + b₂". With the weights in PyTorch's (C_out, C_in) layout,
forward is ``linalg.py``'s two linear layers, the first with its ReLU:

    z = x W₁ᵀ + b₁          h = max(0, z)          y = h W₂ᵀ + b₂

Backward, with [h > 0] the ReLU's derivative (0 at 0, as ``relu``):

    db₂ = Σ_rows dout       dW₂ = doutᵀ h
    dh  = dout W₂           dz  = dh ∘ [h > 0]      db₁ = Σ_rows dz
    dW₁ = dzᵀ x             dx  = dz W₁

These are linear_relu then linear, the same numbers but for the order db₁'s rows are added in
(tested). What one Function saves is memory traffic in backward: dh is masked in place, each
block of rows of its product right after that block is written (``_products.matmul``'s
``after``, on the thread that wrote it), where linear's backward wrote dh (N, F) out and
linear_relu's read it back beside h to write dz, a third (N, F) array: 16 MB of each for the
`small` model's 4,000 tokens, six times a step. db₁ is summed in the same pass, in groups of
GROUP_ROWS rows (each group's sum alone, then the groups in order), so that it comes out the
same bits whichever worker takes which rows.

Dimensions: x (..., C) with C = d_model; W₁ (F, C), b₁ (F,) with F = d_ff; W₂ (C_out, F),
b₂ (C_out,); N the rows once x's leading axes are flattened.
"""

from __future__ import annotations

from .. import backend
from ..autograd.function import Function
from . import _compiled, _cuda, _products
from ._reduce import sum_rows
from .linalg import Linear, LinearReLU

GROUP_ROWS = 16  # db₁ sums this many rows at a time, then the groups' sums in order


class FeedForward(Function):
    def forward(self, x, w1, b1, w2, b2):
        check_shapes(x, w1, b1, w2, b2)
        first, second = LinearReLU(), Linear()   # their forward passes, bias and ReLU fused
        h = first.forward(x, w1, b1)                                    # (..., F)
        y = second.forward(h, w2, b2)                                   # (..., C_out)
        x2, _, h2 = first.saved                                         # (N, C), (N, F)
        self.saved = (x2, w1, h2, w2)
        self.x_shape = x.shape
        return y

    def backward(self, dout):
        x2, w1, h2, w2 = self.saved
        xp = backend.get_array_module(dout)
        C_out, F = w2.shape
        want_dx, want_dw1, want_db1, want_dw2, want_db2 = self.needs_input_grad
        d2 = dout.reshape(-1, C_out)                                    # (N, C_out)
        # fwd 3: y = h W₂ᵀ + b₂  ->  db₂ = Σ_rows dout,  dW₂ = doutᵀ h
        db2 = sum_rows(d2) if want_db2 else None                        # (C_out,)
        dW2 = _products.matmul(d2.T, h2) if want_dw2 else None          # (C_out, F)
        if not (want_dx or want_dw1 or want_db1):
            return None, None, None, dW2, db2
        # fwd 3: dh = dout W₂; fwd 2: h = max(0, z)  ->  dz = dh ∘ [h > 0], in place on each
        # block of dh's rows as soon as it is written, with db₁'s sums of its groups of rows
        dz = xp.empty_like(h2)                                          # (N, F): dh, then dz
        if _cuda.is_cupy(xp):  # the GPU: whole-array kernels, no threads to keep in order
            _products.matmul(d2, w2, out=dz)
            xp.multiply(dz, h2 > 0, out=dz)
            db1 = sum_rows(dz) if want_db1 else None                    # (F,)
        else:
            group_sums = xp.empty((-(-dz.shape[0] // GROUP_ROWS), F), dtype=dz.dtype) \
                if want_db1 else None                                   # (G, F)
            mask = _mask_and_sum(dz, h2, group_sums, xp)
            _products.matmul(d2, w2, out=dz, after=mask, align=GROUP_ROWS)
            db1 = group_sums.sum(axis=0) if want_db1 else None          # (F,)
        # fwd 1: z = x W₁ᵀ + b₁  ->  dW₁ = dzᵀ x,  dx = dz W₁
        dx = _products.matmul(dz, w1).reshape(self.x_shape) if want_dx else None  # (..., C)
        dW1 = _products.matmul(dz.T, x2) if want_dw1 else None          # (F, C)
        return dx, dW1, db1, dW2, db2


def _mask_and_sum(dz, h2, group_sums, xp):
    """The pass after dh's product, on rows beginning at a multiple of GROUP_ROWS: dz = dh ∘
    [h > 0] in place, and each group's row sum into group_sums (compiled: one loop), unless
    group_sums is None (db₁ not wanted)."""
    G = GROUP_ROWS
    if group_sums is None:
        def mask(rows):
            xp.multiply(dz[rows], h2[rows] > 0, out=dz[rows])
        return mask
    if _compiled.enabled(xp, dz, h2):
        kernel = _compiled.kernels().relu_gradient_groups

        def mask(rows):
            kernel(dz[rows], h2[rows], G, group_sums[rows.start // G:-(-rows.stop // G)])
        return mask

    def mask(rows):
        block = xp.multiply(dz[rows], h2[rows] > 0, out=dz[rows])       # (n, F), a product:
        whole = block.shape[0] // G * G                                 # 0 · NaN stays NaN
        first = rows.start // G
        group_sums[first:first + whole // G] = block[:whole].reshape(-1, G, block.shape[1]
                                                                     ).sum(axis=1)
        if whole < block.shape[0]:  # the short last group (rows.stop is N)
            group_sums[first + whole // G] = block[whole:].sum(axis=0)
    return mask


def check_shapes(x, w1, b1, w2, b2) -> None:
    """Floating point; W₁ (F, C) and W₂ (C_out, F) chain, the biases fit them, x ends in C."""
    if x.dtype.kind != "f" or w1.dtype.kind != "f":
        raise TypeError(f"feed_forward: the input and the weights must be floating point, got "
                        f"dtypes {x.dtype} and {w1.dtype}; convert the input with "
                        ".astype(w1.dtype) (token ids go through an embedding first).")
    if w1.ndim != 2 or w2.ndim != 2 or w2.shape[1] != w1.shape[0]:
        raise ValueError(f"feed_forward: W₁ {tuple(w1.shape)} and W₂ {tuple(w2.shape)} must be "
                         "matrices (F, C) and (C_out, F), the second taking the first's F "
                         "outputs.")
    if tuple(b1.shape) != (w1.shape[0],) or tuple(b2.shape) != (w2.shape[0],):
        raise ValueError(f"feed_forward: biases {tuple(b1.shape)} and {tuple(b2.shape)} do not "
                         f"fit W₁ {tuple(w1.shape)} and W₂ {tuple(w2.shape)}: they must be "
                         f"({w1.shape[0]},) and ({w2.shape[0]},).")
    if x.ndim == 0 or x.shape[-1] != w1.shape[1]:
        raise ValueError(f"feed_forward: input of shape {tuple(x.shape)} does not fit W₁ of "
                         f"shape {tuple(w1.shape)}: its last axis must be C = {w1.shape[1]}.")


def feed_forward(x, w1, b1, w2, b2):
    """max(0, x W₁ᵀ + b₁) W₂ᵀ + b₂ as one Function: x (..., C), W₁ (F, C), b₁ (F,), W₂ (C_out, F),
    b₂ (C_out,) -> (..., C_out)."""
    return FeedForward()(x, w1, b1, w2, b2)
