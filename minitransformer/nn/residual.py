"""The residual connection around every sub-layer (§3.1, §5.4).

    post-LN (the paper):  LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN (an option):   x + Dropout(Sublayer(LayerNorm(x)))

Pre-LN keeps an un-normalised path from input to output, which lets deep stacks train without
the warmup schedule; post-LN is what the paper trained. The lessons compare the two.

In training, post-LN's three steps run as one Function (``functional/residual.py``): the same
numbers, fewer passes over memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import functional as F
from .layers import Dropout, LayerNorm
from .module import Module


class Residual(Module):
    def __init__(self, d_model: int, p_dropout: float, pre_norm: bool = False):
        super().__init__()
        self.pre_norm = pre_norm
        self.norm = LayerNorm(d_model)
        self.dropout = Dropout(p_dropout)

    def forward(self, x: Any, sublayer: Callable[[Any], Any]) -> Any:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        if (self.dropout.training and self.dropout.p > 0 and type(self.norm) is LayerNorm
                and type(self.dropout) is Dropout):  # the same numbers, fewer passes
            return F.dropout_add_layer_norm(x, sublayer(x), self.norm.gain, self.norm.bias,
                                            self.dropout.p, self.norm.eps)
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return "pre-LN" if self.pre_norm else "post-LN"
