"""The position-wise feed-forward network (§3.3).

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂,      W₁: d_model -> d_ff,  W₂: d_ff -> d_model

applied to each position separately and identically: two convolutions with kernel size 1.

    B batch   T length   C d_model   F d_ff
"""

from __future__ import annotations

from typing import Any

from .. import functional as F
from .layers import Linear
from .module import Module


class PositionwiseFeedForward(Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = Linear(d_model, d_ff)
        self.w_2 = Linear(d_ff, d_model)

    def forward(self, x: Any) -> Any:
        # w_2(relu(w_1(x))) as one Function (functional/feed_forward.py): the bias and ReLU
        # in one pass over the (B, T, F) product, and backward's mask on dh as it is written
        return F.feed_forward(x, self.w_1.weight, self.w_1.bias,
                              self.w_2.weight, self.w_2.bias)          # (B, T, C)
