"""Solution: the backward of the post-LN sub-layer, LayerNorm(x + Sublayer(x)).

§3.1: "We employ a residual connection around each of the two sub-layers, followed by layer
normalization. That is, the output of each sub-layer is LayerNorm(x + Sublayer(x)), where
Sublayer(x) is the function implemented by the sub-layer itself."

In the model the sub-layer is attention or the feed-forward network; here it is a Linear,
Sublayer(x) = x wᵀ + b, so that the exercise is about the residual and the norm:

    s = x wᵀ + b                  the sub-layer
    r = x + s                     the residual connection
    y = gain ∘ (r - μ) / √(σ² + eps) + bias,   μ and σ² the mean and variance of r's row

    x, y (..., C);  w (C, C);  b, gain, bias (C,)          C d_model

Derivation, walking the forward in reverse:

    5. y = gain ∘ r̂ + bias  ->  dgain = Σ_rows dout ∘ r̂,  dbias = Σ_rows dout,  g = dout ∘ gain
    4-3. r̂ = (r - μ) rstd   ->  dr = rstd (g - mean(g) - r̂ mean(g ∘ r̂))   (the layer norm
                                 exercise: three paths, direct, through μ, through σ²)
    2. r = x + s            ->  ds = dr, and dr reaches x directly
    1. s = x wᵀ + b          ->  dw = Σ_rows dsᵀ x,  db = Σ_rows ds,  and ds w reaches x

x reaches r twice, directly and through the sub-layer, so its gradient is the sum of the two:

    dx = dr + dr w

The first term is the residual path: whatever the sub-layer does, the gradient reaches x
through it unchanged (up to the norm). That is why deep stacks of residual blocks still train.

Check it:  minitransformer check-exercise residual_layer_norm \\
               lessons/solutions/residual_layer_norm.py
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
        x, w, r_hat, rstd, gain = self.saved
        C = x.shape[-1]
        # fwd 5: y = gain ∘ r̂ + bias  ->  dgain = Σ_rows dout ∘ r̂,  dbias = Σ_rows dout
        dgain = (dout * r_hat).reshape(-1, C).sum(axis=0)              # (C,)
        dbias = dout.reshape(-1, C).sum(axis=0)                        # (C,)
        #                                  and the gradient reaching r̂: g = dout ∘ gain
        g = dout * gain                                                 # (..., C)
        # fwd 4-3: r̂ = (r - μ) · rstd  ->  dr = rstd (g - mean(g) - r̂ mean(g ∘ r̂))
        mean_g = g.mean(axis=-1, keepdims=True)                         # (..., 1) through μ
        mean_gr = (g * r_hat).mean(axis=-1, keepdims=True)              # (..., 1) through σ²
        dr = rstd * (g - mean_g - r_hat * mean_gr)                      # (..., C)
        # fwd 2: r = x + s  ->  ds = dr, and dr reaches x directly (the residual path)
        ds = dr                                                         # (..., C)
        # fwd 1: s = x wᵀ + b  ->  dw = Σ_rows dsᵀ x,  db = Σ_rows ds
        ds2 = ds.reshape(-1, C)                                         # (N, C)
        dw = ds2.T @ x.reshape(-1, C)                                   # (C, C)
        db = ds2.sum(axis=0)                                            # (C,)
        # x reaches r twice: directly and through the sub-layer  ->  the two paths add
        dx = dr + ds @ w                                                # (..., C)
        return dx, dw, db, dgain, dbias
