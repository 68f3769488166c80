"""Solution: the backward of inverted dropout, in training and in evaluation.

§5.4: "We apply dropout to the output of each sub-layer, before it is added to the sub-layer
input and normalized. In addition, we apply dropout to the sums of the embeddings and the
positional encodings", with P_drop = 0.1 (Srivastava et al., 2014).

In training each entry is kept with probability 1 - p, and the kept ones are scaled by
1 / (1 - p) ("inverted" dropout), so that every entry keeps its expected value and evaluation
needs no rescaling. In evaluation dropout is the identity:

    training:    keep = [u >= p],  u ~ U[0, 1)        y = x ∘ keep / (1 - p)
    evaluation:  y = x

    x, y, keep: any shape, the same one (typically (B, T, C))

The mask comes from a generator seeded with `seed`, so that every call draws the same one: the
checker calls the Function many times to take its finite differences, and a new mask each time
would be a new function each time. (The library's Dropout draws from the backend's generator.)

Derivation, one entry at a time (y_i depends on x_i alone):

    training:    ∂y_i/∂x_i = keep_i / (1 - p)   ->  dx = dout ∘ keep / (1 - p)
    evaluation:  ∂y_i/∂x_i = 1                  ->  dx = dout

The backward uses the mask that forward drew: an entry that was dropped did not reach the
output, so it gets no gradient; one that was kept gets dout, with the same scale as forward.

Check it:  minitransformer check-exercise dropout lessons/solutions/dropout.py
"""

import numpy as np

from minitransformer import Function


class Dropout(Function):
    def __init__(self, p, training=True, seed=0):
        self.p, self.training, self.seed = p, training, seed

    def forward(self, x):
        if not self.training:
            # evaluation: the identity (a new array, as every Function returns)
            self.saved = None
            return x.copy()
        # 1. keep = [u >= p]: each entry kept with probability 1 - p, the same mask every call
        u = np.random.default_rng(self.seed).random(x.shape)           # (...)
        keep = u >= self.p                                              # (...) bool
        # 2. y = x ∘ keep / (1 - p): the kept entries scaled up, the dropped ones 0
        self.scale = 1.0 / (1.0 - self.p)
        y = x * keep * self.scale                                       # (...)
        self.saved = keep
        return y

    def backward(self, dout):
        if not self.training:
            # evaluation: y = x  ->  dx = dout (the identity passes the gradient through)
            return dout
        keep = self.saved
        # fwd 2: y = x ∘ keep / (1 - p)  ->  dx = dout ∘ keep / (1 - p), the same mask
        dx = dout * keep * self.scale                                   # (...)
        return dx
