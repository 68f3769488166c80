"""The decoder (§3.1): N layers of masked self-attention, attention over the encoder's
output, and a feed-forward network.

    x = Residual(x, SelfAttention(x, x, x, causal mask))      position i sees positions <= i
    x = Residual(x, CrossAttention(x, memory, memory, source padding mask))
    x = Residual(x, FFN(x))

While generating, ``DecoderCache`` keeps every layer's keys and values, so each new token costs
one position of work instead of recomputing the whole prefix.

    B batch   T target length   S source length   C d_model
"""

from __future__ import annotations

from typing import Any

from .attention import KVCache, MultiHeadAttention
from .feed_forward import PositionwiseFeedForward
from .layers import LayerNorm
from .module import Module, ModuleList
from .residual import Residual

SAME = object()  # DecoderCache.reorder: the cross-attention caches take the same rows


class DecoderCache:
    """Per layer, the self-attention and cross-attention keys and values computed so far."""

    position: Any = None  # a fixed-shape cache's next position, as a device array (graphs.py)

    def __init__(self, n_layers: int, room: int = 0):
        self.layers = [(KVCache(room), KVCache()) for _ in range(n_layers)]
        self.length = 0  # target positions already decoded

    def reorder(self, index: Any, cross_index: Any = SAME) -> None:
        """Keep batch rows ``index`` of every layer's cache (beam search).

            cache.reorder(index)                          self and cross caches alike
            cache.reorder(index, cross_index=None)        cross-attention caches untouched
            cache.reorder(index, cross_index=sentences)   their own rows

        The cross-attention keys and values may keep fewer rows than the self-attention ones:
        with B' rows for B = g·B' queries, each serves g consecutive query rows (beam search
        keeps one per sentence for its beams)."""
        cross_index = index if cross_index is SAME else cross_index
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if cross_index is not None:
                cross_cache.reorder(cross_index)

    def move_rows(self, sources: Any, targets: Any, n: int) -> None:
        """Keep n batch rows of every cache, rows ``sources`` (at or beyond n) moved onto rows
        ``targets`` (below n) first: greedy decoding drops its finished sentences so, copying
        only the rows that move (``KVCache.move_rows``)."""
        for self_cache, cross_cache in self.layers:
            self_cache.move_rows(sources, targets, n)
            cross_cache.move_rows(sources, targets, n)


class DecoderLayer(Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, p_dropout: float = 0.1,
                 pre_norm: bool = False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.self_residual = Residual(d_model, p_dropout, pre_norm)
        self.cross_residual = Residual(d_model, p_dropout, pre_norm)
        self.ff_residual = Residual(d_model, p_dropout, pre_norm)

    def forward(self, x: Any, memory: Any, self_mask: Any = None, memory_mask: Any = None,
                cache: tuple[KVCache, KVCache] | None = None) -> Any:
        """x (B, T, C), memory (B, S, C); self_mask (B, 1, T, T'), memory_mask (B, 1, 1, S)."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.self_residual(
            x, lambda h: self.self_attn(h, h, h, self_mask, cache=self_cache))
        x = self.cross_residual(
            x, lambda h: self.cross_attn(h, memory, memory, memory_mask, cache=cross_cache,
                                         static_kv=True))
        return self.ff_residual(x, self.feed_forward)


class Decoder(Module):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 p_dropout: float = 0.1, pre_norm: bool = False):
        super().__init__()
        self.layers = ModuleList([DecoderLayer(d_model, n_heads, d_ff, p_dropout, pre_norm)
                                  for _ in range(n_layers)])
        self.final_norm = LayerNorm(d_model) if pre_norm else None

    def forward(self, x: Any, memory: Any, self_mask: Any = None, memory_mask: Any = None,
                cache: DecoderCache | None = None) -> Any:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, self_mask, memory_mask,
                      cache.layers[i] if cache is not None else None)
        return self.final_norm(x) if self.final_norm is not None else x
