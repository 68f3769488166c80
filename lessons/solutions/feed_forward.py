"""Solution: the backward of the position-wise feed-forward network.

§3.3: "each of the layers in our encoder and decoder contains a fully connected feed-forward
network, which is applied to each position separately and identically. This consists of two
linear transformations with a ReLU activation in between":

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂

with d_model = 512 and d_ff = 2048 in the paper. As in the library, a weight is stored
(C_out, C_in) and applied as x Wᵀ:

    x (..., C),  w1 (F, C),  b1 (F,),  w2 (C, F),  b2 (C,)  ->  y (..., C)

    C d_model   F d_ff   N the number of positions (all the leading axes, flattened)

Derivation, walking the forward in reverse:

    4. y = a W₂ᵀ + b₂   ->  db₂ = Σ_rows dout,  dW₂ = doutᵀ a,  da = dout W₂
    3. a = max(0, h)    ->  dh = da ∘ [h > 0]                     (ReLU's derivative: a gate)
    2. h = x W₁ᵀ + b₁   ->  db₁ = Σ_rows dh,    dW₁ = dhᵀ x,    dx = dh W₁
    1. flatten          ->  dx back to the shape of x

Each layer is the linear exercise again; between them, the ReLU lets the gradient through
where the unit was on (h > 0) and stops it where it was off. The second layer read a, the
ReLU's output, not h: dW₂ is built from a.

Check it:  minitransformer check-exercise feed_forward lessons/solutions/feed_forward.py
"""

import numpy as np

from minitransformer import Function


class FeedForward(Function):
    def forward(self, x, w1, b1, w2, b2):
        F, C = w1.shape
        self.x_shape = x.shape
        # 1. flatten the leading axes (B, T, ...) into N positions
        x2 = x.reshape(-1, C)                                           # (N, C)
        # 2. h = x W₁ᵀ + b₁, the first layer: d_model -> d_ff
        h = x2 @ w1.T + b1                                              # (N, F)
        # 3. a = max(0, h)
        a = np.maximum(h, 0.0)                                          # (N, F)
        # 4. y = a W₂ᵀ + b₂, the second layer: d_ff -> d_model
        y = a @ w2.T + b2                                               # (N, C)
        self.saved = (x2, h, a, w1, w2)
        return y.reshape(self.x_shape)                                  # (..., C)

    def backward(self, dout):
        x2, h, a, w1, w2 = self.saved
        C = x2.shape[1]
        dout2 = dout.reshape(-1, C)                                     # (N, C)
        # fwd 4: y = a W₂ᵀ + b₂  ->  db₂ = Σ_rows dout,  dW₂ = doutᵀ a,  da = dout W₂
        db2 = dout2.sum(axis=0)                                         # (C,)
        dw2 = dout2.T @ a                                               # (C, F)
        da = dout2 @ w2                                                 # (N, F)
        # fwd 3: a = max(0, h)  ->  dh = da ∘ [h > 0]
        dh = da * (h > 0)                                               # (N, F)
        # fwd 2: h = x W₁ᵀ + b₁  ->  db₁ = Σ_rows dh,  dW₁ = dhᵀ x,  dx = dh W₁
        db1 = dh.sum(axis=0)                                            # (F,)
        dw1 = dh.T @ x2                                                 # (F, C)
        dx = dh @ w1                                                    # (N, C)
        # fwd 1: flatten  ->  dx back to the shape of x
        return dx.reshape(self.x_shape), dw1, db1, dw2, db2
