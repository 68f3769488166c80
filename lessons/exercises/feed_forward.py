"""Exercise: write the backward of the position-wise feed-forward network.

§3.3: "each of the layers in our encoder and decoder contains a fully connected feed-forward
network, which is applied to each position separately and identically. This consists of two
linear transformations with a ReLU activation in between":

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂

with d_model = 512 and d_ff = 2048 in the paper. As in the library, a weight is stored
(C_out, C_in) and applied as x Wᵀ:

    x (..., C),  w1 (F, C),  b1 (F,),  w2 (C, F),  b2 (C,)  ->  y (..., C)

    C d_model   F d_ff   N the number of positions (all the leading axes, flattened)

The forward below is complete. Write `backward`: given dout (..., C), return
(dx, dw1, db1, dw2, db2), each with the shape of its input.

Hints (derive, don't guess):

* Steps 2 and 4 are the linear exercise twice. Work from the output back: the second layer
  first, and the gradient it sends down becomes the upstream gradient of the ReLU.
* ReLU: what is d max(0, h)/dh where h > 0, and where h < 0? forward saved h.
* Which array did the second layer multiply by W₂ᵀ, h or max(0, h)? Its weight gradient is
  built from that one.
* b₁ and b₂ are added to every one of the N positions: their gradients sum over them.

Check your answer:  minitransformer check-exercise feed_forward lessons/exercises/feed_forward.py
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
        # x2, h, a, w1, w2 = self.saved
        #     the flat input x (N, C), the pre-activation h and a = max(0, h) (N, F), W₁, W₂
        # fwd 4: y = a W₂ᵀ + b₂  ->  db2 = ?,  dw2 = ?,  and da = ? reaches a
        # fwd 3: a = max(0, h)   ->  dh = ?
        # fwd 2: h = x W₁ᵀ + b₁  ->  db1 = ?,  dw1 = ?,  dx = ?
        # fwd 1: flatten         ->  dx back to self.x_shape
        raise NotImplementedError("write the backward: return dx, dw1, db1, dw2, db2, each "
                                  "with the shape of its input")
