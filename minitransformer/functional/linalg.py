"""Matrix products: batched matmul with broadcasting, and the fused linear layer.

    y = a @ b,   a: (..., n, k),  b: (..., k, m),  y: (..., n, m)
    da = dout @ bᵀ   summed over the batch axes that a was broadcast along
    db = aᵀ @ dout   summed over the batch axes that b was broadcast along

1-D operands follow NumPy: a vector a (k,) is treated as (1, k), b (k,) as (k, 1), and the
added axis is removed from the result (and from the gradient).

    y = linear(x, W, b) = x Wᵀ + b      dx = dout W,  dW = doutᵀ x,  db = Σ_rows dout
    y = linear_relu(x, W, b) = max(0, x Wᵀ + b)      the same with dout ∘ [y > 0] for dout

Dimensions: C_in, C_out the features in and out of a linear layer; N the number of rows once
the leading axes (B, T, ...) of its input are flattened into one.
"""

from __future__ import annotations

from .. import backend
from ..autograd.function import Function
from . import _compiled, _layout, _products, _workspace
from ._blocks import for_blocks
from ._broadcast import broadcast_shapes, match_float_dtypes, sum_to
from ._reduce import sum_rows


class MatMul(Function):
    def forward(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"matmul: both operands need at least one dimension, got shapes "
                             f"{tuple(a.shape)} and {tuple(b.shape)}; use * for scalars.")
        k_a = a.shape[-1]
        k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
        if k_a != k_b:
            raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not "
                             f"aligned: the last axis of the first ({k_a}) must equal the "
                             f"{'second-to-last' if b.ndim > 1 else 'only'} axis of the second "
                             f"({k_b}).")
        if a.ndim > 2 and b.ndim > 2:
            broadcast_shapes("matmul (batch axes)", a.shape[:-2], b.shape[:-2])
        a, b = match_float_dtypes("matmul", a, b)  # x32 @ int64 stays float32, not float64
        self.saved = (a, b)
        return _products.matmul(a, b)

    def backward(self, dout):
        a, b = self.saved
        xp = backend.get_array_module(dout)
        # Work with matrices: lift 1-D operands to (1, k) and (k, 1) as forward did, and
        # put the axes that forward removed back into dout.
        a2 = a[None, :] if a.ndim == 1 else a                       # (..., n, k)
        b2 = b[:, None] if b.ndim == 1 else b                       # (..., k, m)
        n_batch = dout.ndim - (a.ndim > 1) - (b.ndim > 1)
        d2 = dout.reshape(dout.shape[:n_batch] + (a2.shape[-2], b2.shape[-1]))  # (..., n, m)
        da = db = None
        if self.needs_input_grad[0]:
            # fwd: y = a @ b  ->  da = dout @ bᵀ
            da = _products.matmul(d2, xp.swapaxes(b2, -1, -2))        # (..., n, k)
            da = sum_to(da, a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            # fwd: y = a @ b  ->  db = aᵀ @ dout
            db = _products.matmul(xp.swapaxes(a2, -1, -2), d2)        # (..., k, m)
            db = sum_to(db, b2.shape).reshape(b.shape)
        return da, db


def matmul(a, b): return MatMul()(a, b)


class Linear(Function):
    """y = x Wᵀ + b, the affine map of every projection in the model (§3.2.2 W^Q, W^K, W^V,
    W^O; §3.3 the two layers of the feed-forward network; §3.4 the pre-softmax projection).

    x: (..., C_in), weight W: (C_out, C_in) (PyTorch's layout, so an embedding matrix (V, C)
    can be reused as the output projection), bias b: (C_out,) or absent -> y: (..., C_out).
    With the leading axes flattened to N = prod(...) rows, y = x W^T + b is one matrix product:

        dx = dout W          (N, C_out) @ (C_out, C_in)
        dW = doutᵀ x         (C_out, N) @ (N, C_in)    every row adds its outer product
        db = Σ_rows dout     the bias was broadcast over the N rows
    """

    relu = False  # LinearReLU: y = max(0, x Wᵀ + b)

    def forward(self, x, weight, bias=None):
        if x.dtype.kind != "f" or weight.dtype.kind != "f":
            raise TypeError(f"linear: the input and the weight must be floating point, got "
                            f"dtypes {x.dtype} and {weight.dtype}; convert the input with "
                            ".astype(weight.dtype) (token ids go through an embedding first).")
        if weight.ndim != 2:
            raise ValueError(f"linear: weight must be 2-D (C_out, C_in), got shape "
                             f"{tuple(weight.shape)}.")
        C_out, C_in = weight.shape
        if x.ndim == 0 or x.shape[-1] != C_in:
            raise ValueError(f"linear: input of shape {tuple(x.shape)} does not fit weight of "
                             f"shape {tuple(weight.shape)}: the input's last axis must be "
                             f"C_in = {C_in} (weight is (C_out, C_in)).")
        if bias is not None and tuple(bias.shape) != (C_out,):
            raise ValueError(f"linear: bias of shape {tuple(bias.shape)} does not fit weight "
                             f"of shape {tuple(weight.shape)}: it must be (C_out,) = ({C_out},).")
        xp = backend.get_array_module(x)
        self.x_shape, self.has_bias = x.shape, bias is not None
        # 1. flatten the leading axes: one (N, C_in) @ (C_in, C_out) product
        x2 = x.reshape(-1, C_in)                                        # (N, C_in)
        # 2. y = x Wᵀ (while decoding, Wᵀ may be a kept contiguous copy: _layout.py)
        y2 = _workspace.empty((x2.shape[0], C_out), x.dtype, xp)        # (N, C_out)
        # 3. y = y + b (and 4. y = max(0, y) in LinearReLU), in place on each block of rows
        # of the product as soon as it is written (_products: on the thread that wrote it)
        bias_relu = None
        if bias is not None or self.relu:
            compiled = bias is not None and _compiled.enabled(xp, y2, bias)  # one pass a block
            kernels = _compiled.kernels() if compiled else None
            kernel = None if kernels is None else \
                kernels.bias_relu if self.relu else kernels.bias_add

            def bias_relu(rows):
                if compiled:
                    kernel(y2[rows], bias)
                else:
                    _bias_relu_(y2[rows], bias, self.relu, xp)
        _products.matmul(x2, _layout.transposed(weight, x2.shape[0]), out=y2, after=bias_relu)
        self.saved = (x2, weight, y2 if self.relu else None)
        return y2.reshape(x.shape[:-1] + (C_out,))                      # (..., C_out)

    def backward(self, dout):
        x2, weight, y2 = self.saved
        xp = backend.get_array_module(dout)
        C_out, C_in = weight.shape
        # fwd 1 (undone last): dout gets the same flat view of the leading axes
        dout2 = dout.reshape(-1, C_out)                                 # (N, C_out)
        want_db = self.has_bias and self.needs_input_grad[2]
        dx = dW = db = None
        if self.relu:  # fwd 4: y = max(0, z)  ->  dz = dout where y > 0, else 0 (as relu)
            # with fwd 3's db = Σ_rows dz on the same blocks of rows (for_blocks' own):
            # each block adds its rows' share to a partial sum, added up in block order. Each
            # block of dx's product is masked just before it is multiplied (_products).
            masked = xp.empty_like(dout2)                               # (N, C_out) = dz
            partial: dict[int, object] = {}

            def mask(rows):
                dz = xp.multiply(dout2[rows], y2[rows] > 0, out=masked[rows])
                if want_db:
                    partial[rows.start] = sum_rows(dz)
            if _compiled.enabled(xp, dout2, y2):  # the same, and db, in one compiled pass
                kernel = _compiled.kernels().relu_gradient

                def mask(rows):
                    sums = xp.zeros(C_out, dtype=dout2.dtype)
                    kernel(dout2[rows], y2[rows], masked[rows], sums)
                    partial[rows.start] = sums
            if self.needs_input_grad[0]:
                # fwd 2: y = x Wᵀ  ->  dx = dz W, each block of dz's rows masked first
                dx = _products.matmul(masked, weight, before=mask).reshape(self.x_shape)
            else:
                for_blocks(mask, dout2.shape[0], C_out * dout2.itemsize, xp)
            dout2 = masked
            if want_db:
                db = sum(partial[start] for start in sorted(partial))   # (C_out,)
        # fwd 3: y = y + b  ->  db = Σ_rows dout (b was broadcast over the N rows)
        elif want_db:
            db = sum_rows(dout2)                                        # (C_out,)
        # fwd 2: y = x Wᵀ  ->  dx = dout W,  dW = doutᵀ x
        if self.needs_input_grad[1]:
            dW = _products.matmul(dout2.T, x2)                          # (C_out, C_in)
        if self.needs_input_grad[0] and dx is None:
            dx = _products.matmul(dout2, weight).reshape(self.x_shape)  # (..., C_in)
        return (dx, dW, db) if self.has_bias else (dx, dW)


class LinearReLU(Linear):
    """y = max(0, x Wᵀ + b): the first layer of the feed-forward network (§3.3) and its ReLU
    as one Function. The bias and the ReLU are one pass over the product's output, in place,
    where linear then relu would write a second (N, d_ff) array; backward turns dout into
    dz = dout ∘ [y > 0] (the subgradient 0 at 0, as relu) and goes on as Linear's."""

    relu = True


def _bias_relu_(y, bias, relu, xp):
    """y += bias (when given), then y = max(0, y) when ``relu``: in place on a block of rows."""
    if bias is not None:
        y += bias
    if relu:
        xp.maximum(y, 0, out=y)


def linear(x, weight, bias=None):
    """x Wᵀ + b: x (..., C_in), weight (C_out, C_in), bias (C_out,) or None -> (..., C_out)."""
    return Linear()(x, weight) if bias is None else Linear()(x, weight, bias)


def linear_relu(x, weight, bias=None):
    """max(0, x Wᵀ + b), the same shapes as ``linear``, fused."""
    return LinearReLU()(x, weight) if bias is None else LinearReLU()(x, weight, bias)
