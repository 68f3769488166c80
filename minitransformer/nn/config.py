"""Model configurations: one dataclass, and the named sizes of Table 3.

    name    N (layers)  d_model  d_ff   h (heads)  P_drop   parameters (shared 37k vocab)
    tiny        2          32      64       4        0.1     tests and lessons
    small       3         256    1024       4        0.1     a translator a CPU can train
    base        6         512    2048       8        0.1     the paper's base model (65M)
    big         6        1024    4096      16        0.3     the paper's big model (213M)
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

NAMED_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": dict(n_layers=2, d_model=32, d_ff=64, n_heads=4, p_dropout=0.1),
    "small": dict(n_layers=3, d_model=256, d_ff=1024, n_heads=4, p_dropout=0.1),
    "base": dict(n_layers=6, d_model=512, d_ff=2048, n_heads=8, p_dropout=0.1),
    "big": dict(n_layers=6, d_model=1024, d_ff=4096, n_heads=16, p_dropout=0.3),
}


@dataclass(frozen=True)
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    n_layers: int = 6            # N: layers in the encoder, and again in the decoder
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    p_dropout: float = 0.1
    max_len: int = 1024          # longest sequence the positional table covers
    pad_id: int = 0
    share_embeddings: bool = True  # one table for source and target (needs one vocabulary)
    tie_output: bool = True        # the pre-softmax projection is the target embedding (§3.4)
    pre_norm: bool = False         # post-LN as the paper; pre-LN as an option
    learned_positions: bool = False  # sinusoidal as the paper; learned (Table 3, row E)

    def __post_init__(self) -> None:
        sizes = ("src_vocab_size", "tgt_vocab_size", "n_layers", "d_model", "d_ff", "n_heads",
                 "max_len")
        for name in (*sizes, "pad_id"):  # NumPy integers become ints: the config is JSON
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                object.__setattr__(self, name, int(value))
        for name in sizes:
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads}): each head gets d_model / n_heads dimensions.")
        if not (isinstance(self.p_dropout, numbers.Real) and 0.0 <= self.p_dropout < 1.0):
            raise ValueError(f"p_dropout must be a number in [0, 1), got {self.p_dropout!r}.")
        object.__setattr__(self, "p_dropout", float(self.p_dropout))  # a NumPy float: JSON-able
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(f"share_embeddings needs one vocabulary, but the source has "
                             f"{self.src_vocab_size} entries and the target "
                             f"{self.tgt_vocab_size}; set share_embeddings=False.")
        if not (type(self.pad_id) is int
                and 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size)):
            raise ValueError(f"pad_id must be a token id of the vocabulary, an int from 0 to "
                             f"{min(self.src_vocab_size, self.tgt_vocab_size) - 1}, got "
                             f"{self.pad_id!r}.")

    @classmethod
    def named(cls, name: str, vocab_size: int, **overrides: Any) -> TransformerConfig:
        """``TransformerConfig.named("base", 37000)``: a Table 3 size with a shared vocabulary
        (or give src_vocab_size / tgt_vocab_size in ``overrides``)."""
        if name not in NAMED_CONFIGS:
            raise ValueError(f"unknown configuration {name!r}: choose one of "
                             f"{', '.join(NAMED_CONFIGS)}.")
        settings = dict(NAMED_CONFIGS[name], src_vocab_size=vocab_size,
                        tgt_vocab_size=vocab_size)
        return cls(**{**settings, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown configuration fields: {', '.join(unknown)}.")
        return cls(**values)

    def replace(self, **changes: Any) -> TransformerConfig:
        return replace(self, **changes)
