"""Positional encoding (§3.5): where each token is, added to its embedding.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Each pair of dimensions is a sinusoid whose wavelength grows geometrically from 2π to 10000·2π.
The paper chose it "because we hypothesized it would allow the model to easily learn to attend
by relative positions, since for any fixed offset k, PE(pos+k) can be represented as a linear
function of PE(pos)": each (sin, cos) pair at pos + k is the pair at pos rotated by an angle
that depends on k alone. ``learned=True`` replaces the table by a trained one (Table 3, row E).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from . import init
from .layers import check_sizes
from .module import Module, Parameter


def sinusoidal_table(length: int, d_model: int, device: str | None = None,
                     dtype: Any = None) -> Any:
    """The (length, d_model) table of sinusoids, in ``dtype`` (default: the default float
    dtype), on ``device``."""
    xp = backend.get_backend(device).xp
    position = xp.arange(length, dtype="float64")[:, None]               # (L, 1)
    # 1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1
    inv_freq = xp.exp(xp.arange(0, d_model, 2, dtype="float64")
                      * (-math.log(10000.0) / d_model))                  # (ceil(C/2),)
    angles = position * inv_freq                                         # (L, ceil(C/2))
    table = xp.zeros((length, d_model), dtype="float64")
    table[:, 0::2] = xp.sin(angles)
    table[:, 1::2] = xp.cos(angles[:, : d_model // 2])
    return table.astype(backend.get_default_dtype() if dtype is None else dtype)


class PositionalEncoding(Module):
    def __init__(self, d_model: int, max_len: int = 1024, learned: bool = False):
        super().__init__()
        check_sizes("PositionalEncoding", d_model=d_model, max_len=max_len)
        self.d_model, self.max_len, self.learned = d_model, max_len, learned
        if learned:
            self.weight = Parameter(init.normal((max_len, d_model), d_model ** -0.5))
        self._tables: dict[tuple, Any] = {}  # sinusoidal table per (device, dtype), made once

    def table(self, device: str, dtype: Any) -> Any:
        key = (device, str(dtype))
        if key not in self._tables:  # the dtype given, not by default_dtype: threads decode
            self._tables[key] = sinusoidal_table(self.max_len, self.d_model, device, dtype)
        return self._tables[key]

    def forward(self, x: Any, start: Any = 0) -> Any:
        """x (B, T, C) -> x + PE[start : start + T]; ``start`` > 0 while decoding step by step.
        ``start`` may also be an integer array of the T positions on x's device (a captured
        decoding step reads its position there: ``translation/graphs.py``, which keeps it
        inside the table)."""
        if backend.is_array(start):  # (T,) positions: a gather, as the embedding's
            if self.learned:
                return x + self.weight[start]                            # (B, T, C)
            table = self.table(x.device, x.dtype)
            return x + backend.get_array_module(table).take(table, start, axis=0)
        T = x.shape[1]
        if start + T > self.max_len:
            raise ValueError(f"a sequence of {start + T} positions (0 to {start + T - 1}) is "
                             f"longer than the positional table (max_len={self.max_len}, "
                             f"positions 0 to {self.max_len - 1}); raise max_len in the "
                             "model configuration or filter long sentences.")
        if self.learned:
            return x + self.weight[start:start + T]                      # (B, T, C)
        return x + self.table(x.device, x.dtype)[start:start + T]        # (B, T, C)

    def extra_repr(self) -> str:
        return f"{self.d_model}, max_len={self.max_len}, learned={self.learned}"
