"""minitransformer's Transformer as an eager ``torch.nn.Module``, for bench/compare_torch.py.

Idiomatic eager PyTorch, as a PyTorch user would write it after The Annotated Transformer:
nn.Linear, nn.LayerNorm, nn.Dropout, nn.Embedding, and attention as plain operations
(q kᵀ / √D, masked_fill, softmax, @ v; no fused scaled_dot_product_attention). It computes
exactly what ``minitransformer.nn.Transformer`` computes:

    embeddings    Dropout(E[ids] · √d_model + PE)      padding ids embed to zero, PE sinusoidal
    encoder       x = LN(x + Dropout(SelfAttn(x)));  x = LN(x + Dropout(FFN(x)))       (post-LN)
    decoder       the same with a causal self-attention and a cross-attention to the memory
    logits        h Eᵀ                                  one table E for source, target, output
    FFN           w_2(relu(w_1 x))                      no dropout inside, none on attention

Parameter names are minitransformer's (LayerNorm's ``gain`` is torch's ``weight``), so
``copy_weights`` moves a model across. ``greedy_decode`` and ``beam_search`` are ports of
minitransformer/translation/decode.py: the same stopping rules, the key/value cache reordered
with the beams (greedy's written in place, its finished rows replaced by the last ones going),
and ``use_cache=False`` decoding every prefix again.

    B batch   S source length   T target length   C d_model   H heads   D = C / H
    V vocabulary   K beam size   A sentences still searching
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

import minitransformer as mt
from minitransformer.nn import TransformerConfig
from minitransformer.translation.decode import gnmt_length_penalty


class KVCache:
    """One attention layer's projected keys and values (B, H, S, D) computed so far; with
    ``room`` (greedy), self-attention writes them into buffers of that many positions, as
    minitransformer.nn.attention.KVCache does, else concatenates them."""

    def __init__(self, room: int = 0) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.room = room
        self.buffers: tuple | None = None

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple:
        if not self.room or (self.k is not None and self.buffers is None):
            if self.k is not None:
                k = torch.cat([self.k, k], dim=2)                       # (B, H, S, D)
                v = torch.cat([self.v, v], dim=2)
            self.k, self.v = k, v
            return k, v
        B, H, T, D = k.shape
        length = 0 if self.k is None else self.k.shape[2]
        if self.buffers is None or length + T > self.buffers[0].shape[2]:
            room = max(self.room, length + T)
            buffers = tuple(k.new_empty((B, H, room, D)) for _ in range(2))
            if self.k is not None:
                buffers[0][:, :, :length], buffers[1][:, :, :length] = self.k, self.v
            self.buffers = buffers
        for buffer, new in zip(self.buffers, (k, v), strict=True):
            buffer[:, :, length:length + T] = new
        self.k, self.v = (buffer[:, :, :length + T] for buffer in self.buffers)
        return self.k, self.v

    def reorder(self, index: torch.Tensor) -> None:
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]
            self.buffers = None

    def move_rows(self, sources: torch.Tensor, targets: torch.Tensor, n: int) -> None:
        if self.k is not None:
            for tensor in (self.k, self.v):
                tensor[targets] = tensor[sources]
            self.k, self.v = self.k[:n], self.v[:n]
            if self.buffers is not None:
                self.buffers = tuple(buffer[:n] for buffer in self.buffers)


class DecoderCache:
    """Per decoder layer a (self-attention, cross-attention) pair of caches."""

    def __init__(self, n_layers: int, room: int = 0):
        self.layers = [(KVCache(room), KVCache()) for _ in range(n_layers)]
        self.length = 0  # target positions already decoded

    def reorder(self, index: torch.Tensor, cross_index: torch.Tensor | None = None) -> None:
        """Self-attention rows ``index``; cross-attention rows ``cross_index`` (None: kept).
        (minitransformer's reorder(index) alone moves both.)"""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if cross_index is not None:
                cross_cache.reorder(cross_index)

    def move_rows(self, sources: torch.Tensor, targets: torch.Tensor, n: int) -> None:
        for self_cache, cross_cache in self.layers:
            self_cache.move_rows(sources, targets, n)
            cross_cache.move_rows(sources, targets, n)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, C = x.shape
        return x.view(B, L, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, L, D)

    def forward(self, query, key, mask, cache: KVCache | None = None, static_kv=False):
        """query (B, T, C), key (B, S, C), mask broadcastable to (B, H, T, S) -> (B, T, C).

        ``cache`` as in minitransformer: self-attention appends the new keys and values,
        cross-attention (``static_kv``) computes the memory's once."""
        B, T, C = query.shape
        q = self.split_heads(self.w_q(query))                           # (B, H, T, D)
        if cache is not None and static_kv and cache.k is not None:
            k, v = cache.k, cache.v                                     # (B', H, S, D)
            if k.shape[0] != B:  # B = g·B': g consecutive query rows share a cached row
                g, S = B // k.shape[0], k.shape[2]
                q = q.reshape(-1, g, self.n_heads, T, self.d_head).transpose(1, 2)
                q = q.reshape(-1, self.n_heads, g * T, self.d_head)     # (B', H, g·T, D)
                if mask.shape[0] == B:
                    mask = mask.expand(B, mask.shape[1], T, S).reshape(
                        -1, g, mask.shape[1], T, S).transpose(1, 2).reshape(
                        -1, mask.shape[1], g * T, S)                    # (B', H_m, g·T, S)
                out = self._attend(q, k, v, mask)                       # (B', g·T, C)
                return out.reshape(B, T, C)
        else:
            k = self.split_heads(self.w_k(key))                         # (B, H, S_new, D)
            v = self.split_heads(self.w_v(key))
            if cache is not None and not static_kv:
                k, v = cache.extend(k, v)                               # (B, H, S, D)
            elif cache is not None:
                cache.k, cache.v = k, v
        return self._attend(q, k, v, mask)

    def _attend(self, q, k, v, mask):
        """Heads q (B, H, T, D), k and v (B, H, S, D) -> (B, T, C) after W^O."""
        B, H, T, D = q.shape
        # minitransformer multiplies by 1/√D rather than dividing: the same rounding
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(dim=-1) @ v                                # (B, H, T, D)
        return self.w_o(out.transpose(1, 2).reshape(B, T, H * D))       # (B, T, C)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))                        # (B, T, C)


class Residual(nn.Module):
    """Post-LN: LayerNorm(x + Dropout(sublayer(x)))."""

    def __init__(self, d_model: int, p_dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(p_dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads)
        self.feed_forward = FeedForward(c.d_model, c.d_ff)
        self.attn_residual = Residual(c.d_model, c.p_dropout)
        self.ff_residual = Residual(c.d_model, c.p_dropout)

    def forward(self, x, mask):
        x = self.attn_residual(x, lambda h: self.self_attn(h, h, mask))
        return self.ff_residual(x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads)
        self.feed_forward = FeedForward(c.d_model, c.d_ff)
        self.self_residual = Residual(c.d_model, c.p_dropout)
        self.cross_residual = Residual(c.d_model, c.p_dropout)
        self.ff_residual = Residual(c.d_model, c.p_dropout)

    def forward(self, x, memory, self_mask, memory_mask, cache=None):
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.self_residual(x, lambda h: self.self_attn(h, h, self_mask, self_cache))
        x = self.cross_residual(
            x, lambda h: self.cross_attn(h, memory, memory_mask, cross_cache, static_kv=True))
        return self.ff_residual(x, self.feed_forward)


class Stack(nn.Module):
    """The encoder's or the decoder's layers (named ``layers`` as in minitransformer)."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class TorchTransformer(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        if c.pre_norm or c.learned_positions or not (c.share_embeddings and c.tie_output):
            raise ValueError("TorchTransformer mirrors the paper's layout only: post-LN, "
                             "sinusoidal positions, one embedding table tied three ways.")
        self.config = c
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.embed_dropout = nn.Dropout(c.p_dropout)
        self.encoder = Stack([EncoderLayer(c) for _ in range(c.n_layers)])
        self.decoder = Stack([DecoderLayer(c) for _ in range(c.n_layers)])
        # float64 always, cast to the activations' dtype where added (a float64 parity model
        # needs the exact table; .to(float32) would round the buffer for good)
        self.register_buffer("positions", sinusoidal_table(c.max_len, c.d_model),
                             persistent=False)

    def source_mask(self, src):
        return (src != self.config.pad_id)[:, None, None, :]            # (B, 1, 1, S)

    def target_mask(self, tgt):
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).tril()
        return (tgt != self.config.pad_id)[:, None, None, :] & causal   # (B, 1, T, T)

    def embed(self, ids, start: int = 0):
        """ids (B, L) -> Dropout(E[ids]·√C + PE[start : start + L]), zero at padding ids."""
        L, C = ids.shape[1], self.config.d_model
        x = self.src_embed(ids).masked_fill((ids == self.config.pad_id)[..., None], 0.0)
        x = x * math.sqrt(C) + self.positions[start:start + L].to(x.dtype)  # (B, L, C)
        return self.embed_dropout(x)

    def encode(self, src, src_mask):
        x = self.embed(src)                                             # (B, S, C)
        for layer in self.encoder.layers:
            x = layer(x, src_mask)
        return x                                                        # (B, S, C)

    def decode(self, tgt, memory, src_mask, cache: DecoderCache | None = None):
        """Target ids (B, T) -> logits (B, T, V); with ``cache``, ``tgt`` holds only the new
        positions, which see every cached position and the new ones up to themselves."""
        start = cache.length if cache is not None else 0
        if cache is None:
            self_mask = self.target_mask(tgt)                           # (B, 1, T, T)
        elif tgt.shape[1] == 1:  # one new query sees every position
            self_mask = None
        else:
            T = tgt.shape[1]
            keys = torch.arange(start + T, device=tgt.device)[None, :]  # (1, start+T)
            queries = torch.arange(start, start + T, device=tgt.device)[:, None]  # (T, 1)
            self_mask = (keys <= queries)[None, None]                   # (1, 1, T, start+T)
        y = self.embed(tgt, start)                                      # (B, T, C)
        for i, layer in enumerate(self.decoder.layers):
            y = layer(y, memory, self_mask, src_mask,
                      cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.length += tgt.shape[1]
        return nn.functional.linear(y, self.src_embed.weight)           # (B, T, V)

    def forward(self, src, tgt):
        src_mask = self.source_mask(src)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def new_cache(self, room: int = 0) -> DecoderCache:
        return DecoderCache(self.config.n_layers, room)


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """PE (length, d_model) in float64, as minitransformer.nn.positional."""
    position = torch.arange(length, dtype=torch.float64)[:, None]       # (L, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64)
                         * (-math.log(10000.0) / d_model))              # (C/2,)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


def copy_weights(model: TorchTransformer, mt_model) -> None:
    """Copy every parameter of a minitransformer Transformer into ``model``, by name."""
    own = dict(model.named_parameters())
    theirs = {name.replace(".gain", ".weight"): p for name, p in mt_model.named_parameters()}
    if set(own) != set(theirs):
        raise ValueError(f"parameter names differ: {sorted(set(own) ^ set(theirs))}")
    with torch.no_grad():
        for name, p in theirs.items():
            own[name].copy_(torch.from_numpy(mt.to_numpy(p.data)))


# ------------------------------------------------------------------ decoding (decode.py)

@contextlib.contextmanager
def _generating(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _strip(rows: list[list[int]], eos_id: int) -> list[list[int]]:
    return [row[: row.index(eos_id)] if eos_id in row else row for row in rows]


def _decode_prefix(model, prefix, memory, src_mask):
    """Whole prefixes again, through a fresh cache for the causal-only mask (decode.py)."""
    return model.decode(prefix, memory, src_mask, model.new_cache())    # (N, t, V)


def _limits(model, src, max_len):
    """Each sentence's length limit (B,): max_len, or its own length + 50 within the
    positional table (decode.py)."""
    if max_len is not None:
        return torch.full((src.shape[0],), max_len, dtype=torch.int64, device=src.device)
    lengths = (src != model.config.pad_id).sum(dim=1)
    return torch.clamp(lengths + 50, max=model.config.max_len)


def greedy_decode(model, src, bos_id, eos_id, max_len=None, use_cache=True):
    """minitransformer.decode.greedy_decode for torch ids (B, S)."""
    with _generating(model):
        src_mask = model.source_mask(src)                               # (B, 1, 1, S)
        memory = model.encode(src, src_mask)                            # (B, S, C)
        limits = _limits(model, src, max_len)                           # (B,)
        B, dev = src.shape[0], src.device
        limit = int(limits.max()) if B else 0
        cache = model.new_cache(limit) if use_cache else None
        out = torch.full((B, limit), eos_id, dtype=torch.int64, device=dev)  # (B, limit)
        active = torch.arange(B, device=dev)                            # (A,) still decoding
        prefix = torch.full((B, 1), bos_id, dtype=torch.int64, device=dev)  # (A, t)
        for t in range(limit):
            if cache is not None:
                logits = model.decode(prefix[:, -1:], memory, src_mask, cache)  # (A, 1, V)
            else:
                logits = _decode_prefix(model, prefix, memory, src_mask)  # (A, t+1, V)
            tokens = logits[:, -1].argmax(dim=-1)                       # (A,)
            out[active, t] = tokens
            going = (tokens != eos_id) & (t + 1 < limits[active])
            n_going = int(going.sum())
            if n_going == 0:
                break
            prefix = torch.cat([prefix, tokens[:, None]], dim=1)
            if n_going < going.shape[0]:  # finished sentences leave the batch (decode.py)
                targets = (~going[:n_going]).nonzero()[:, 0]
                sources = going[n_going:].nonzero()[:, 0] + n_going
                for rows in (active, prefix, memory, src_mask):
                    rows[targets] = rows[sources]
                active, prefix = active[:n_going], prefix[:n_going]
                memory, src_mask = memory[:n_going], src_mask[:n_going]
                if cache is not None:
                    cache.move_rows(sources, targets, n_going)
    return _strip(out.tolist(), eos_id)


def beam_search(model, src, bos_id, eos_id, beam_size=4, length_penalty=0.6, max_len=None,
                use_cache=True):
    """minitransformer.decode.beam_search for torch ids (B, S); see it for the algorithm.

    One difference of means, not of result: torch.topk replaces decode.py's grouped partial
    sort for the 2K best candidates (both best first; exact ties may come out in another
    order). As there, with the cache a sentence's beams share one cross-attention row."""
    alpha, K, lp = float(length_penalty), beam_size, gnmt_length_penalty
    with _generating(model):
        src_mask = model.source_mask(src)
        memory = model.encode(src, src_mask)
        limits = _limits(model, src, max_len)                           # (B,)
        B, dev, ids = src.shape[0], src.device, torch.int64
        limit = int(limits.max()) if B else 0
        if limit == 0:
            return [[] for _ in range(B)]
        inf = float("inf")
        lp_limits = lp(limits.double(), alpha).to(memory.dtype)         # (B,)

        rows = torch.arange(B, device=dev).repeat_interleave(K)         # (B·K,)
        cache = model.new_cache() if use_cache else None
        if cache is None:  # with the cache: a row per sentence, shared by its beams
            memory, src_mask = memory[rows], src_mask[rows]             # (B·K, S, C)
        alive_scores = torch.full((B, K), -inf, dtype=memory.dtype, device=dev)  # (A, K)
        alive_scores[:, 0] = 0.0
        alive_tokens = torch.zeros((B, K, 0), dtype=ids, device=dev)    # (A, K, t)
        active = torch.arange(B, device=dev)                            # (A,)
        best_tokens = torch.full((B, limit), eos_id, dtype=ids, device=dev)      # (B, limit)
        best_scores = torch.full((B,), -inf, dtype=memory.dtype, device=dev)
        n_finished = torch.zeros(B, dtype=ids, device=dev)

        for t in range(1, limit + 1):
            A = alive_scores.shape[0]
            r = torch.arange(A, device=dev)[:, None]                    # (A, 1)
            if cache is not None and t == 1:  # one row per sentence: its beams are equal
                bos = torch.full((B, 1), bos_id, dtype=ids, device=dev)
                newest = model.decode(bos, memory, src_mask, cache)[:, -1][rows]
            elif cache is not None:
                last = alive_tokens[:, :, -1].reshape(A * K, 1)         # (A·K, 1)
                newest = model.decode(last, memory, src_mask, cache)[:, -1]
            else:
                bos = torch.full((A, K, 1), bos_id, dtype=ids, device=dev)
                prefix = torch.cat([bos, alive_tokens], dim=2).reshape(A * K, t)
                newest = _decode_prefix(model, prefix, memory, src_mask)[:, -1]
            log_probs = newest.log_softmax(dim=-1)                      # (A·K, V)
            V = log_probs.shape[-1]
            scores = (alive_scores.reshape(A * K, 1) + log_probs).reshape(A, K * V)

            # 1. the 2K best continuations per sentence, best first
            cand_scores, top = scores.topk(min(2 * K, K * V), dim=1)    # (A, 2K)
            n_cand = top.shape[1]
            cand_beams, cand_tokens = top // V, top % V
            is_eos = cand_tokens == eos_id

            # 2. candidates among the first K that end in EOS are finished hypotheses
            finished = is_eos[:, :K] & torch.isfinite(cand_scores[:, :K])  # (A, K)
            n_finished[active] = n_finished[active] + finished.sum(dim=1)
            eos_scores = torch.where(finished, cand_scores[:, :K], -inf)
            j = eos_scores.argmax(dim=1, keepdim=True)                  # (A, 1)
            new_score = eos_scores.gather(1, j)[:, 0] / lp(t, alpha)    # (A,)
            better = new_score > best_scores[active]
            prefix = alive_tokens[r, cand_beams.gather(1, j)][:, 0]     # (A, t-1)
            padded = torch.cat(
                [prefix, torch.full((A, limit - t + 1), eos_id, dtype=ids, device=dev)], 1)
            best_tokens[active] = torch.where(better[:, None], padded, best_tokens[active])
            best_scores[active] = torch.where(better, new_score, best_scores[active])

            # 3. the K best that do not end in EOS are the new beam
            position = torch.arange(n_cand, device=dev)[None]           # (1, 2K)
            keep = torch.where(is_eos, position + n_cand, position).argsort(dim=1)[:, :K]
            beams = cand_beams.gather(1, keep)                          # (A, K)
            alive_scores = cand_scores.gather(1, keep)
            alive_tokens = torch.cat(
                [alive_tokens[r, beams], cand_tokens.gather(1, keep)[:, :, None]], dim=2)
            # sentences at their limit without a finished hypothesis: their best prefix
            at_limit = limits[active] == t
            if bool(at_limit.any()):
                none = at_limit & ~torch.isfinite(best_scores[active])
                padded = torch.cat([alive_tokens[:, 0], torch.full(
                    (A, limit - t), eos_id, dtype=ids, device=dev)], 1)
                best_tokens[active] = torch.where(none[:, None], padded, best_tokens[active])
                best_scores[active] = torch.where(none, alive_scores[:, 0] / lp_limits[active],
                                                  best_scores[active])
            if t == limit:
                break

            # 4. sentences whose result is settled leave the batch
            bound = alive_scores[:, 0] / torch.clamp(lp_limits[active], min=lp(t + 1, alpha))
            done = (n_finished[active] >= K) | (best_scores[active] >= bound) | at_limit
            n_done = int(done.sum())
            flat = r * K + beams                                        # (A, K)
            if n_done:
                if n_done == A:
                    break
                going = ~done
                flat, active = flat[going], active[going]
                alive_scores, alive_tokens = alive_scores[going], alive_tokens[going]
            flat = flat.reshape(-1)                                     # (A'·K,)
            if cache is None:
                if n_done:  # a sentence's beams share its source (as in decode.py)
                    memory, src_mask = memory[flat], src_mask[flat]
                continue
            staying = going.nonzero()[:, 0] if n_done else None         # (A',)
            if n_done:
                memory, src_mask = memory[staying], src_mask[staying]
            cache.reorder(flat // K if t == 1 else flat, staying)

        return _strip(best_tokens.tolist(), eos_id)
