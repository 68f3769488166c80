"""Exercise: write the backward of inverted dropout, in training and in evaluation.

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

The forward below is complete. Write `backward`: given dout (the shape of x), return dx, in
both modes (`self.training` says which one forward ran in).

Hints (derive, don't guess):

* y_i depends on x_i alone: the Jacobian is diagonal. What is ∂y_i/∂x_i for a kept entry, for
  a dropped one, and in evaluation?
* Which mask? Not a new one: the entries that forward dropped are the ones that did not reach
  the output.
* The scale 1 / (1 - p) is part of y = f(x): forgetting it in the backward gives a gradient
  that is right in direction and wrong in size, which the check catches.
* In evaluation nothing is dropped or scaled (that is the point of inverted dropout).

Check your answer:  minitransformer check-exercise dropout lessons/exercises/dropout.py
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
        # self.training: the mode forward ran in
        # training:    keep = self.saved (the mask of step 1), self.scale = 1 / (1 - p)
        #   fwd 2: y = x ∘ keep / (1 - p)  ->  dx = ?
        # evaluation:  y = x               ->  dx = ?
        raise NotImplementedError("write the backward: return dx, the shape of x, in training "
                                  "and in evaluation")
