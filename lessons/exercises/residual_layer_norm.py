"""Exercise: write the backward of the post-LN sub-layer, LayerNorm(x + Sublayer(x)).

§3.1: "We employ a residual connection around each of the two sub-layers, followed by layer
normalization. That is, the output of each sub-layer is LayerNorm(x + Sublayer(x)), where
Sublayer(x) is the function implemented by the sub-layer itself."

In the model the sub-layer is attention or the feed-forward network; here it is a Linear,
Sublayer(x) = x wᵀ + b, so that the exercise is about the residual and the norm:

    s = x wᵀ + b                  the sub-layer
    r = x + s                     the residual connection
    y = gain ∘ (r - μ) / √(σ² + eps) + bias,   μ and σ² the mean and variance of r's row

    x, y (..., C);  w (C, C);  b, gain, bias (C,)          C d_model

The forward below is complete. Write `backward`: given dout (..., C), return
(dx, dw, db, dgain, dbias), each with the shape of its input.

Hints (derive, don't guess):

* Steps 3-5 are the layer norm exercise, applied to r instead of x: its answer is the
  gradient dr reaching r.
* Step 1 is the linear exercise; its upstream gradient is the one reaching s. What is it?
  (Not dout: the norm stands between s and the output.)
* x is used twice: inside the sub-layer and, through the residual connection, directly in
  r = x + s. What happens to the gradients of an input used twice?
* w, b, gain and bias are shared by every row: their gradients sum over the leading axes.

Check your answer:
    minitransformer check-exercise residual_layer_norm lessons/exercises/residual_layer_norm.py
"""

import numpy as np

from minitransformer import Function


class ResidualLayerNorm(Function):
    def __init__(self, eps=1e-6):
        self.eps = eps

    def forward(self, x, w, b, gain, bias):
        # 1. s = Sublayer(x) = x wᵀ + b
        s = x @ w.T + b                                                 # (..., C)
        # 2. r = x + s, the residual connection
        r = x + s                                                       # (..., C)
        # 3. μ = mean(r),  σ² = mean((r - μ)²),  rstd = 1 / √(σ² + eps), over the features
        mean = r.mean(axis=-1, keepdims=True)                           # (..., 1)
        rc = r - mean                                                   # (..., C)
        rstd = 1.0 / np.sqrt((rc * rc).mean(axis=-1, keepdims=True) + self.eps)  # (..., 1)
        # 4. r̂ = (r - μ) · rstd
        r_hat = rc * rstd                                               # (..., C)
        # 5. y = gain ∘ r̂ + bias
        y = r_hat * gain + bias                                         # (..., C)
        self.saved = (x, w, r_hat, rstd, gain)
        return y

    def backward(self, dout):
        # x, w, r_hat, rstd, gain = self.saved
        #     the input x (..., C), the sub-layer's weight w (C, C), r̂ (..., C),
        #     rstd (..., 1) and gain (C,)
        # fwd 5: y = gain ∘ r̂ + bias   ->  dgain = ?,  dbias = ?,  and g = ? reaches r̂
        # fwd 4-3: r̂ = (r - μ) · rstd   ->  dr = ?
        # fwd 2: r = x + s             ->  ds = ?
        # fwd 1: s = x wᵀ + b           ->  dw = ?,  db = ?
        # and dx = ?   (x reaches r by two paths)
        raise NotImplementedError("write the backward: return dx, dw, db, dgain, dbias, each "
                                  "with the shape of its input")
