"""The Transformer (§3, Figure 1): embeddings, encoder, decoder, output projection.

    source ids -> Embedding·√d_model + PE -> Dropout -> Encoder -> memory
    target ids -> Embedding·√d_model + PE -> Dropout -> Decoder(·, memory) -> · Eᵀ -> logits

§3.4: "we share the same weight matrix between the two embedding layers and the pre-softmax
linear transformation ... In the embedding layers, we multiply those weights by √d_model."

    B batch   S source length   T target length   C d_model   V vocabulary
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import backend
from .. import functional as F
from ..autograd.tensor import Tensor
from .config import TransformerConfig
from .decoder import Decoder, DecoderCache
from .encoder import Encoder
from .layers import Dropout, Embedding, Linear
from .module import Module
from .positional import PositionalEncoding


class Transformer(Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.src_embed = Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = (self.src_embed if c.share_embeddings
                          else Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id))
        self.src_positions = PositionalEncoding(c.d_model, c.max_len, c.learned_positions)
        self.tgt_positions = PositionalEncoding(c.d_model, c.max_len, c.learned_positions)
        self.embed_dropout = Dropout(c.p_dropout)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.p_dropout,
                               c.pre_norm)
        self.decoder = Decoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.p_dropout,
                               c.pre_norm)
        self.out_proj = None if c.tie_output else Linear(c.d_model, c.tgt_vocab_size, bias=False)

    # ------------------------------------------------------------------ masks
    def source_mask(self, src_ids: Any) -> Any:
        """(B, 1, 1, S) boolean array: True at real source tokens, False at padding."""
        ids = self._ids(src_ids, "source")
        return (ids.data != self.config.pad_id)[:, None, None, :]

    def target_mask(self, tgt_ids: Any) -> Any:
        """(B, 1, T, T) boolean array: position i sees the real positions j <= i."""
        ids = self._ids(tgt_ids, "target")
        T = ids.shape[1]
        causal = F.causal_mask(T, device=ids.device).data                # (T, T)
        return (ids.data != self.config.pad_id)[:, None, None, :] & causal[None, None]

    # ------------------------------------------------------------------ the model
    def _embed(self, ids: Tensor, table: Embedding, positions: PositionalEncoding,
               start: int = 0) -> Tensor:
        x = table(ids) * math.sqrt(self.config.d_model)                   # (B, L, C)
        return self.embed_dropout(positions(x, start))                    # (B, L, C)

    def encode(self, src_ids: Any, src_mask: Any = None) -> Tensor:
        """Source ids (B, S) -> memory (B, S, C); ``src_mask`` defaults to the padding mask."""
        ids = self._ids(src_ids, "source")
        mask = self.source_mask(ids) if src_mask is None else src_mask
        return self.encoder(self._embed(ids, self.src_embed, self.src_positions), mask)

    def decode(self, tgt_ids: Any, memory: Tensor, src_mask: Any = None,
               cache: DecoderCache | None = None) -> Tensor:
        """Target ids (B, T) and memory (B, S, C) -> logits (B, T, V).

        With ``cache``, ``tgt_ids`` are only the new positions after the ``cache.length``
        already decoded; their keys and values are appended to the cache.
        """
        ids = self._ids(tgt_ids, "target")
        start = cache.length if cache is not None else 0
        if cache is None:
            self_mask = self.target_mask(ids)                             # (B, 1, T, T)
        elif ids.shape[1] == 1:  # one new query sees every position: nothing to mask
            self_mask = None
        else:  # new queries see every cached position and the new ones up to themselves
            T = ids.shape[1]
            xp = backend.get_array_module(ids.data)
            keys = xp.arange(start + T)[None, :]                          # (1, start+T)
            queries = xp.arange(start, start + T)[:, None]                # (T, 1)
            self_mask = (keys <= queries)[None, None]                     # (1, 1, T, start+T)
        if cache is not None and cache.position is not None:  # a fixed-shape cache's own
            start = cache.position                                # position, on the device
        x = self._embed(ids, self.tgt_embed, self.tgt_positions, start)
        hidden = self.decoder(x, memory, self_mask, src_mask, cache)      # (B, T, C)
        if cache is not None:
            cache.length += ids.shape[1]
        return self.project(hidden)

    def project(self, hidden: Tensor) -> Tensor:
        """Decoder states (B, T, C) -> logits (B, T, V), through the tied embedding."""
        if self.out_proj is not None:
            return self.out_proj(hidden)
        return F.linear(hidden, self.tgt_embed.weight)                    # (B, T, V)

    def forward(self, src_ids: Any, tgt_ids: Any) -> Tensor:
        """Teacher forcing: logits (B, T, V) for every target position at once."""
        src = self._ids(src_ids, "source")
        src_mask = self.source_mask(src)
        memory = self.encode(src, src_mask)
        return self.decode(tgt_ids, memory, src_mask)

    def new_cache(self, room: int = 0) -> DecoderCache:
        """An empty cache for incremental decoding; ``room``: the positions its self-attention
        keys and values are written into in place (the decoding's limit; grown past it), 0 to
        concatenate them at every step instead (``KVCache``)."""
        try:
            valid = not isinstance(room, bool) and operator.index(room) >= 0
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(f"new_cache: room must be a number of positions, an integer >= 0 "
                             f"(0 to concatenate at every step), got {room!r}.")
        return DecoderCache(self.config.n_layers, operator.index(room))

    def _ids(self, ids: Any, side: str) -> Tensor:
        """Token ids as an integer (B, L) tensor on the model's device."""
        device = self.src_embed.weight.device
        data = ids.data if isinstance(ids, Tensor) else ids
        array = backend.as_array(data, device=device)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{side} token ids must be integers, got dtype {array.dtype}.")
        if array.ndim != 2:
            raise ValueError(f"{side} token ids must have shape (batch, length), got "
                             f"{tuple(array.shape)}; add a batch axis for a single sentence.")
        return ids if isinstance(ids, Tensor) and ids.data is array else Tensor(array)

    def extra_repr(self) -> str:
        return f"parameters={self.num_parameters():,}"
