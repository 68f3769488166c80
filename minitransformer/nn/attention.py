"""Multi-head attention (§3.2.2), with a key/value cache for incremental decoding.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),      d_k = d_v = d_model / h

The h projections of width d_k are computed as one projection of width d_model and split into
heads by a reshape, so all heads run as one batched matmul over (batch, heads). In self-
attention W^Q, W^K and W^V (and in cross-attention W^K and W^V) are stacked into one matrix, so
the projections of one input are one matmul: the same numbers, fewer and larger products.

    B batch   T query length   S key length   C d_model   H heads   D = C / H
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .. import functional as F
from ..autograd.grad_mode import is_grad_enabled
from ..autograd.tensor import Tensor
from ..functional import _compiled
from ..functional._host_index import check_rows
from ..functional._layout import laid_out
from .layers import Linear, check_sizes
from .module import Module


class KVCache:
    """The projected keys and values one attention layer has already computed.

    Self-attention appends the new positions' keys and values at every decoding step; cross-
    attention computes the encoder memory's keys and values once and reuses them. A cache
    belongs to one decoding, during which the weights do not change: without gradients it also
    keeps the stacked projection weights (``MultiHeadAttention._project``), so that the steps
    do not stack them again.

    Given ``room`` (greedy decoding's limit, through ``Transformer.new_cache``), a
    self-attention cache without gradients keeps its keys and values in buffers with room for
    that many positions and writes each step's in place, where concatenating would copy every
    position kept so far at every step; ``k`` and ``v`` view the positions written, and
    ``move_rows`` moves rows within the buffers. Otherwise the positions are concatenated:
    with gradients, so that the graph reaches every step's projections; and after a
    ``reorder``, since beam search gathers the rows it keeps into new arrays at every step
    anyway, and new buffers each time would cost more (fresh memory faulted in) than the
    concatenation. Without gradients, with the compiled kernels, a ``reorder`` waits for the
    next ``extend``, which then gathers the kept rows and appends the new positions in one
    copy into one new array (``_gather_append``), where gathering and then concatenating
    copied every position twice (beam search 1.04× as fast on one core); ``k`` and ``v``
    read in between are gathered first.
    """

    def __init__(self, room: int = 0) -> None:
        self._k: Any = None  # (B, H, S, D) Tensor
        self._v: Any = None
        self.stacked: Any = None  # (weight (n·C, C), bias (n·C,)) Tensors, or None
        self.room = room          # positions the buffers are made for (0: no buffers)
        self._buffers: Any = None  # (k, v) arrays (B, H, room, D) that k and v view
        self._index: Any = None    # rows a reorder keeps, not yet gathered (B',) or None

    @property
    def k(self) -> Any:
        self._gather()
        return self._k

    @k.setter
    def k(self, k: Any) -> None:
        self._gather()
        self._k = k

    @property
    def v(self) -> Any:
        self._gather()
        return self._v

    @v.setter
    def v(self, v: Any) -> None:
        self._gather()
        self._v = v

    def _gather(self) -> None:
        """The rows a waiting reorder keeps, gathered now."""
        if self._index is not None:
            index, self._index = self._index, None
            self._k, self._v = self._k[index], self._v[index]

    def extend(self, k: Any, v: Any) -> tuple[Any, Any, Any]:
        """Self-attention: append the new positions' keys and values (B, H, T, D) to those
        kept; what the queries attend to: all keys and values so far, and a mask of the keys
        they may see (None: all of them). ``translation/graphs.py`` has a cache of fixed
        shapes with the same methods, which masks the positions not yet written."""
        if self._index is not None and not is_grad_enabled():  # a reorder waits: one copy
            index, self._index = self._index, None
            self._k, self._v = (Tensor(_gather_append(old.data, index, new.data))
                                for old, new in ((self._k, k), (self._v, v)))
            return self._k, self._v, None                                     # (B, H, S, D)
        if is_grad_enabled() or not self.room or (self.k is not None and self._buffers is None):
            if self.k is not None:
                k = F.concat([self.k, k], axis=2)                             # (B, H, S, D)
                v = F.concat([self.v, v], axis=2)
            self.k, self.v = k, v
            return k, v, None
        B, H, T, D = k.shape
        length = 0 if self.k is None else self.k.shape[2]
        if self._buffers is None or length + T > self._buffers[0].shape[2]:
            xp = backend.get_array_module(k.data)
            room = max(self.room, length + T)
            buffers = tuple(xp.empty((B, H, room, D), dtype=k.dtype) for _ in range(2))
            if self.k is not None:  # the positions kept so far, once
                buffers[0][:, :, :length], buffers[1][:, :, :length] = self.k.data, self.v.data
            self._buffers = buffers                                           # (B, H, room, D)
        for buffer, new in zip(self._buffers, (k, v), strict=True):
            buffer[:, :, length:length + T] = new.data
        self.k, self.v = (Tensor(buffer[:, :, :length + T]) for buffer in self._buffers)
        return self.k, self.v, None                                           # (B, H, S, D)

    def reorder(self, index: Any) -> None:
        """Keep batch rows ``index`` (beam search reorders hypotheses every step): gathered
        into new arrays, to which the next steps concatenate; without gradients, gathered by
        the next ``extend`` as it appends (or when ``k`` or ``v`` is read)."""
        if self._k is None:
            return
        self._buffers = None
        xp = backend.get_array_module(self._k.data)
        n = self._k.shape[0] if self._index is None else len(self._index)  # rows now
        rows = None if is_grad_enabled() or not _compiled.enabled(xp, self._k.data) else \
            _row_index(index, n, xp)                     # NumPy only: no read from a GPU
        if rows is None:
            self._gather()  # (NumPy's gather then concatenation would hold one copy more)
            self._k, self._v = self._k[index], self._v[index]
        else:  # a reorder of a waiting one keeps its rows of those rows
            self._index = rows if self._index is None else self._index[rows]

    def move_rows(self, sources: Any, targets: Any, n: int) -> None:
        """Rows ``sources`` copied onto rows ``targets``, then the first ``n`` rows kept (a
        view): ``reorder`` for an index that leaves all but a few rows where they are, copying
        only those few. The cache owns its arrays (its buffers, or each step's new arrays),
        so this writes in place; sources at or beyond n, targets below it."""
        if self.k is not None:
            check_rows("KVCache.move_rows", self.k.data, sources, targets)
            for array in (self.k.data, self.v.data):
                array[targets] = array[sources]
            self.k, self.v = self.k[:n], self.v[:n]
            if self._buffers is not None:
                self._buffers = tuple(buffer[:n] for buffer in self._buffers)


def _row_index(index: Any, n: int, xp: Any) -> Any:
    """``index`` as a new 1-D int64 NumPy array of rows of n (negative ones counted from the
    end), refused with NumPy's IndexError when one is out of range; None for anything else
    (a mask, a slice, a Tensor, several axes), which the caller gathers at once."""
    if isinstance(index, Tensor) or isinstance(index, slice | tuple):
        return None
    rows = xp.array(index, copy=True)  # the caller's array may change after the call
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        return None
    if rows.size and not -n <= int(rows.min()) <= int(rows.max()) < n:
        bad = int(rows.max()) if int(rows.max()) >= n else int(rows.min())
        raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
    return rows.astype(xp.int64, copy=False)


def _gather_append(kept: Any, index: Any, new: Any) -> Any:
    """concat(kept[index], new) along the positions in one new array: kept (B, H, S, D),
    index (B',), new (B', H, T, D) -> (B', H, S + T, D); compiled (one copy of each
    position), or NumPy's gather then concatenation where the kernel does not apply."""
    xp = backend.get_array_module(kept)
    B, H, S, D = kept.shape
    rows = _row_index(index, B, xp) if _compiled.enabled(xp, kept, new) else None
    if (rows is None or kept.dtype != new.dtype or new.ndim != 4
            or new.shape[0] != len(rows) or (new.shape[1], new.shape[3]) != (H, D)):
        return xp.concatenate([kept[index], new], axis=2)  # and NumPy's errors
    out = xp.empty((len(rows), H, S + new.shape[2], D), dtype=kept.dtype)
    _compiled.kernels().gather_append(kept, rows, new, out)
    return out


class MultiHeadAttention(Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        check_sizes("MultiHeadAttention", d_model=d_model, n_heads=n_heads)
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by the number of heads "
                             f"({n_heads}): each head gets d_model / n_heads dimensions.")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        # For pictures: with record_weights on, every call keeps its weights (B, H, T, S) on
        # `weights`, a Tensor outside the graph.
        self.record_weights = False
        self.weights: Any = None
        self.w_q = Linear(d_model, d_model)
        self.w_k = Linear(d_model, d_model)
        self.w_v = Linear(d_model, d_model)
        self.w_o = Linear(d_model, d_model)

    def _split_heads(self, x: Any) -> Any:
        B, L, C = x.shape
        x = x.reshape(B, L, self.n_heads, self.d_head)               # (B, L, H, D)
        return x.transpose(0, 2, 1, 3)                               # (B, H, L, D)

    def _project(self, x: Any, *layers: Linear, cache: KVCache | None = None) -> list[Any]:
        """x (B, L, C) through several projections at once: their weights stacked into one
        (n·C, C) matrix make one matmul instead of n, whose output is split and into heads.
        Gradients flow back through the stacking to each layer's own weight and bias. While
        decoding without gradients, ``cache`` keeps the stacked weights for the next steps."""
        if cache is not None and cache.stacked is not None:
            weight, bias = cache.stacked
        else:
            weight = F.concat([layer.weight for layer in layers], axis=0)  # (n·C, C)
            bias = F.concat([layer.bias for layer in layers], axis=0)      # (n·C,)
            if cache is not None and not is_grad_enabled():
                # stored for the few rows of a decoding step's product (functional/_layout.py)
                weight = Tensor(laid_out(weight.data))                     # (n·C, C)
                cache.stacked = weight, bias
        projected = F.linear(x, weight, bias)                          # (B, L, n·C)
        return [self._split_heads(part) for part in F.split(projected, len(layers), axis=-1)]

    def forward(self, query: Any, key: Any, value: Any, mask: Any = None,
                cache: KVCache | None = None, static_kv: bool = False,
                return_weights: bool = False) -> Any:
        """query (B, T, C), key and value (B, S, C); mask broadcastable to (B, H, T, S),
        True where a query may attend to a key.

        With ``cache``: for self-attention (``static_kv=False``) the new keys and values are
        appended to the cached ones; for cross-attention (``static_kv=True``) they are
        computed on the first call and reused afterwards.
        """
        for name, x in (("queries", query), ("keys", key), ("values", value)):
            if x.ndim != 3 or x.shape[-1] != self.d_model:
                raise ValueError(f"attention expects {name} of shape (batch, length, "
                                 f"{self.d_model}), got {tuple(x.shape)}.")
        B, T, C = query.shape
        if cache is not None and static_kv:  # cross-attention: the memory's keys and values
            if cache.k is None:              # once, on the first call
                cache.k, cache.v = self._keys_values(key, value)     # (B', H, S, D) each
            q = self._split_heads(self.w_q(query))                   # (B, H, T, D)
            k, v = cache.k, cache.v
            if k.shape[0] != B:  # every cached row serves B / B' consecutive query rows
                return self._shared_kv_attention(q, k, v, mask, return_weights)
            return self._attend(q, k, v, mask, return_weights)
        if key is query and value is query:  # self-attention: Q, K, V in one matmul
            q, k, v = self._project(query, self.w_q, self.w_k, self.w_v, cache=cache)
        else:
            q = self._split_heads(self.w_q(query))
            k, v = self._keys_values(key, value)
        if cache is not None:  # the new positions join the cached ones
            k, v, seen = cache.extend(k, v)                          # (B, H, S, D) each
            if seen is not None:  # (1, 1, 1, S): the cache's positions written so far
                mask = seen if mask is None else seen & mask
        return self._attend(q, k, v, mask, return_weights)

    def _keys_values(self, key: Any, value: Any) -> tuple[Any, Any]:
        """Keys and values in heads (B, H, S, D): one matmul when they come from one input."""
        if value is key:  # cross-attention: K and V in one matmul
            k, v = self._project(key, self.w_k, self.w_v)
            return k, v
        return self._split_heads(self.w_k(key)), self._split_heads(self.w_v(value))

    def _attend(self, q: Any, k: Any, v: Any, mask: Any, return_weights: bool) -> Any:
        """Attention over heads q (B, H, T, D), k and v (B, H, S, D), then W^O."""
        B, H, T, D = q.shape
        want_weights = return_weights or self.record_weights
        attended = F.scaled_dot_product_attention(q, k, v, mask, return_weights=want_weights)
        out, weights = attended if want_weights else (attended, None)
        if self.record_weights:
            self.weights = weights
        out = out.transpose(0, 2, 1, 3).reshape(B, T, H * D)         # (B, T, H·D): concat heads
        out = self.w_o(out)                                          # (B, T, C)
        return (out, weights) if return_weights else out

    def _shared_kv_attention(self, q: Any, k: Any, v: Any, mask: Any,
                             return_weights: bool) -> Any:
        """Cross-attention of q (B, H, T, D) on cached keys and values (B', H, S, D) with
        B = g·B': query rows g·i .. g·i + g - 1 all attend to cached row i (beam search: the
        g beams of a sentence share its memory). Those g rows' queries become g·T queries of
        one row, so the memory's keys and values are read once per sentence, not g times.
        A mask with B rows is regrouped the same way."""
        B, H, T, D = q.shape
        B_kv, S = k.shape[0], k.shape[2]
        g = B // B_kv
        if g * B_kv != B:
            raise ValueError(f"attention: {B} query rows cannot share {B_kv} cached key/value "
                             "rows; the cached rows must divide the queries' batch.")
        mask = mask.data if isinstance(mask, Tensor) else mask
        if mask is not None and mask.ndim <= 4:
            mask = self._regroup_mask(mask, B_kv, g, T, S)           # (B', H_m, g·T, S)
        q = q.reshape(B_kv, g, H, T, D).transpose(0, 2, 1, 3, 4).reshape(B_kv, H, g * T, D)
        attended = self._attend(q, k, v, mask, return_weights)       # (B', g·T, C)
        out, weights = attended if return_weights else (attended, None)
        C = out.shape[-1]
        out = out.reshape(B_kv, g, T, C).reshape(B, T, C)           # (B, T, C)
        if self.record_weights or return_weights:                    # (B', H, g·T, S) -> B rows
            weights = (weights if weights is not None else self.weights)
            weights = weights.reshape(B_kv, H, g, T, S).transpose(0, 2, 1, 3, 4)
            weights = weights.reshape(B, H, T, S)
            if self.record_weights:
                self.weights = weights
        return (out, weights) if return_weights else out

    @staticmethod
    def _regroup_mask(mask: Any, B_kv: int, g: int, T: int, S: int) -> Any:
        """A mask for queries (B, H, T, S), B = g·B', as one for the regrouped queries
        (B', H, g·T, S). A mask with one query position and one row (or one per cached row)
        broadcasts as it is; any other is laid out per query row, then regrouped as q is."""
        xp = backend.get_array_module(mask)
        mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))  # (B_m, H_m, T_m, S_m)
        B_m, H_m, T_m = mask.shape[:3]
        if T_m == 1 and (B_m in (1, B_kv) or g == 1):
            return mask
        if B_m in (1, g * B_kv):      # a mask per query row (or one for all): (B', g, ...)
            rows = xp.broadcast_to(mask, (g * B_kv, H_m, T, S)).reshape(B_kv, g, H_m, T, S)
        elif B_m == B_kv:             # a mask per cached row, shared by its g query rows
            rows = xp.broadcast_to(mask[:, None], (B_kv, g, H_m, T, S))
        else:                         # does not fit: attention names the shapes
            return mask
        return rows.transpose(0, 2, 1, 3, 4).reshape(B_kv, H_m, g * T, S)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}"
