"""The basic layers: Linear, Embedding, LayerNorm, Dropout.

Each is a Module owning its parameters and calling one fused Function of
``minitransformer.functional``, where the forward and the hand-written backward live.

    Linear       y = x Wᵀ + b              W (C_out, C_in), b (C_out,)
    Embedding    y = E[ids]                E (V, C); the padding row stays zero
    LayerNorm    y = g ∘ (x − μ)/σ + b     over the last axis (§3.1)
    Dropout      y = x ∘ keep / (1 − p)    in training mode only (§5.4)
"""

from __future__ import annotations

import operator
from typing import Any

from .. import functional as F
from ..functional.dropout import check_dropout_p
from ..functional.normalization import check_eps
from . import init
from .module import Module, Parameter


def check_sizes(owner: str, **sizes: int) -> None:
    """Refuse a size that is not a positive integer, naming the layer and the argument."""
    for name, value in sizes.items():
        try:
            positive = not isinstance(value, bool) and operator.index(value) > 0
        except TypeError:
            positive = False
        if not positive:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}.")


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        check_sizes("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.xavier_uniform(out_features, in_features))
        self.bias = Parameter(init.constant((out_features,), 0.0)) if bias else None

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)  # (..., C_in) -> (..., C_out)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A table of ``num_embeddings`` vectors. Initialised N(0, 1/embedding_dim), so that after
    the Transformer's √d_model scaling (§3.4) an embedding has unit variance per component."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        super().__init__()
        check_sizes("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None and not 0 <= padding_idx < num_embeddings:
            raise ValueError(f"padding_idx {padding_idx} is outside the table of "
                             f"{num_embeddings} entries.")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        table = init.normal((num_embeddings, embedding_dim), embedding_dim ** -0.5)
        if padding_idx is not None:
            table[padding_idx] = 0
        self.weight = Parameter(table)

    def forward(self, ids: Any) -> Any:
        return F.embedding(ids, self.weight, self.padding_idx)  # (...) -> (..., C)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}"


class LayerNorm(Module):
    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_sizes("LayerNorm", d_model=d_model)
        check_eps("LayerNorm", eps)
        self.d_model, self.eps = d_model, eps
        self.gain = Parameter(init.constant((d_model,), 1.0))
        self.bias = Parameter(init.constant((d_model,), 0.0))

    def forward(self, x: Any) -> Any:
        return F.layer_norm(x, self.gain, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


class Dropout(Module):
    def __init__(self, p: float = 0.1):
        super().__init__()
        self.p = check_dropout_p(p)  # refused here, not at the first forward

    def forward(self, x: Any) -> Any:
        return F.dropout(x, self.p, training=self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
