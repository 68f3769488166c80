"""Generating translations: greedy decoding and beam search, with the key/value cache.

The decoder is auto-regressive (§3): token t is chosen from the distribution given the source
and tokens 1..t-1. Greedy decoding takes the most probable token at every step. With the cache
(``Transformer.new_cache``) each step feeds only the newest token, and the layers append its
keys and values to those already computed, so a step costs O(length) instead of O(length²).
``use_cache=False`` recomputes the whole prefix at every step instead: the same result, slower,
there to measure what the cache saves (bench/compare_torch.py).

§6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6 ... We set the
maximum output length during inference to input length + 50, but terminate early when
possible." Beam search keeps the K most probable prefixes of every sentence, all B·K of them
decoded as one batch; the length penalty is that of Wu et al. (2016, GNMT):

    lp(Y) = ((5 + |Y|) / 6)^α          score(Y) = log P(Y | X) / lp(Y)

with |Y| counting the end-of-sentence token.

On the CPU a batch's sentences are decoded in shares, one per core, at once (``_on_cores``).

Each sentence's limit is its own length + 50 (not the padded width of its batch), so a
sentence decodes the same alone and in any batch; it is at most the positional table's
length, the longest output the model can place.

    B batch   S source length   K beam size   V vocabulary   A sentences still searching
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
from collections.abc import Callable, Iterator
from typing import Any

from .. import backend
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..functional import _blocks
from ..functional._blocks import for_blocks, on_workers
from ..functional._cuda import is_cupy
from ..nn.transformer import Transformer

MIN_SHARE = 8  # sentences: a batch of fewer than 2·MIN_SHARE is decoded on one core


@contextlib.contextmanager
def _generating(model: Transformer) -> Iterator[None]:
    """Eval mode (no dropout) and no graph while generating; every module's own mode is
    restored afterwards (a model may be training with some parts frozen in eval mode)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with no_grad():
            yield
    finally:
        for module, training in modes:
            object.__setattr__(module, "training", training)


def _source_and_limits(model: Transformer, src_ids: Any, max_len: int | None,
                       bos_id: Any, eos_id: Any) -> tuple[Tensor, Any]:
    """Source ids as a (B, S) tensor, and each sentence's length limit (B,) int64:
    ``max_len`` for all, or by default its own source length (padding not counted) + 50 as
    §6.1, at most the positional table's length. ``bos_id`` and ``eos_id`` must be integers
    (an ``eos_id`` the model cannot emit, such as -1, never ends a sentence)."""
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if not _is_index(value):  # bos_id 1.5 would be cut to 1, silently
            raise ValueError(f"{name} must be an integer token id, got {value!r}; take it from "
                             f"the tokenizer the model was trained with (tokenizer.{name}).")
    V = model.config.tgt_vocab_size
    if not 0 <= bos_id < V:
        raise ValueError(f"bos_id {bos_id} is outside the target vocabulary (ids 0 to {V - 1}); "
                         "take it from the tokenizer the model was trained with "
                         "(tokenizer.bos_id).")
    src = model._ids(src_ids, "source")
    positions = model.config.max_len
    xp = backend.get_array_module(src.data)
    if max_len is None:
        lengths = (src.data != model.config.pad_id).sum(axis=1)         # (B,)
        return src, xp.minimum(lengths + 50, positions).astype(xp.int64)
    try:
        limit = operator.index(max_len)
    except TypeError:
        limit = -1
    if limit < 0:
        raise ValueError(f"max_len must be a non-negative integer, got {max_len!r}.")
    if limit > positions:
        raise ValueError(f"max_len {limit} is longer than the model's positional table "
                         f"({positions} positions); give max_len {positions} or less.")
    return src, xp.full(src.shape[0], limit, dtype=xp.int64)


def _is_index(value: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    try:
        operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, bool)


def _on_cores(search: Callable[..., list], model: Transformer, src: Tensor, limits: Any,
              *args: Any) -> list:
    """``search(model, src, limits, *args)``, a list of one result per sentence of the batch
    ``src`` (with its limits), run on shares of the sentences, one share per core, at once.

    A decoding step is many small products and elementwise operations on a few hundred rows:
    too small for BLAS or blocks of rows to keep two cores busy, so each core decodes a share
    of the sentences on its own, with single-threaded BLAS. Sentences are dealt out in turn
    (sentences 0, n, 2n, ... to the first of n shares), so that when a batch comes sorted by
    length every share gets as much work. A sentence's search depends on no other sentence,
    and the shares keep the batch's padded width, so the results are those of one search over
    the whole batch (but for the last bit of a product over fewer rows, which BLAS may round
    otherwise). On the GPU, or for fewer than 2·MIN_SHARE sentences, there is one share."""
    B = src.shape[0]
    n = min(_blocks.WORKERS, B // MIN_SHARE)  # set_num_threads may change WORKERS
    if n < 2 or is_cupy(backend.get_array_module(src.data)):
        return search(model, src, limits, *args)
    shares = on_workers(lambda i: search(model, Tensor(src.data[i::n]), limits[i::n], *args),
                        list(range(n)))
    results: list = [None] * B
    for i, share in enumerate(shares):
        results[i::n] = share
    return results


def _decode_prefix(model: Transformer, prefix: Any, memory: Tensor, src_mask: Any) -> Tensor:
    """Logits (N, t, V) of whole prefixes (N, t), BOS first, recomputed from scratch.

    The uncached path of ``use_cache=False``. It still passes a fresh, empty cache: that gives
    the cached path's purely causal self-attention mask, under which a generated padding id
    is a token, where ``decode`` without a cache would mask it as padding."""
    return model.decode(prefix, memory, src_mask, model.new_cache())     # (N, t, V)


def _strip(rows: list[list[int]], eos_id: int) -> list[list[int]]:
    """Each row up to (not including) its first ``eos_id``."""
    return [row[: row.index(eos_id)] if eos_id in row else row for row in rows]


def greedy_decode(model: Transformer, src_ids: Any, bos_id: int, eos_id: int,
                  max_len: int | None = None, use_cache: bool = True) -> list[list[int]]:
    """The most probable token at each step, for a batch of sources (B, S).

    Stops a sentence at ``eos_id`` (not included in the output) or after ``max_len`` tokens
    (default: its source length + 50, as §6.1). Returns one list of token ids per sentence.
    With ``use_cache=False`` every step decodes the whole prefix again instead of only the
    newest token (the same result, O(length²) per step: for benchmarks).
    """
    src, limits = _source_and_limits(model, src_ids, max_len, bos_id, eos_id)
    with _generating(model):
        return _on_cores(_greedy, model, src, limits, bos_id, eos_id, use_cache)


def _greedy(model: Transformer, src: Tensor, limits: Any, bos_id: int, eos_id: int,
            use_cache: bool) -> list[list[int]]:
    """Greedy decoding of the sentences ``src`` (B, S), each up to its limit (B,): one token
    list per sentence."""
    src_mask = model.source_mask(src)                                    # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (B, S, C)
    B = src.shape[0]
    cache = model.new_cache() if use_cache else None
    xp = backend.get_array_module(src.data)
    limit = int(limits.max()) if B else 0
    # generated ids are int64 whatever the source ids are (the target vocabulary may be larger)
    out = xp.full((B, limit), eos_id, dtype=xp.int64)                    # (B, limit)
    active = xp.arange(B)                                                # (A,) still decoding
    prefix = xp.full((B, 1), bos_id, dtype=xp.int64)                     # (A, t): BOS, tokens
    for t in range(limit):
        if cache is not None:
            logits = model.decode(prefix[:, -1:], memory, src_mask, cache)  # (A, 1, V)
        else:
            logits = _decode_prefix(model, prefix, memory, src_mask)      # (A, t+1, V)
        tokens = logits.data[:, -1].argmax(axis=-1).astype(xp.int64)      # (A,)
        out[active, t] = tokens
        going = (tokens != eos_id) & (t + 1 < limits[active])            # (A,)
        n_going = int(going.sum())
        if n_going == 0:
            break
        prefix = xp.concatenate([prefix, tokens[:, None]], axis=1)       # (A, t+2)
        if n_going < going.shape[0]:  # finished sentences leave the batch
            keep = xp.nonzero(going)[0]                                  # (A',)
            active, prefix = active[keep], prefix[keep]
            memory, src_mask = memory[keep], src_mask[keep]
            if cache is not None:
                cache.reorder(keep)
    return _strip(backend.to_numpy(out).tolist(), eos_id)                # (B, ≤ limit)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α; |Y| counts the end-of-sentence token."""
    return ((5.0 + length) / 6.0) ** alpha


def _best_continuations(logits: Any, alive_scores: Any, n_cand: int) -> tuple[Any, Any]:
    """The n_cand best continuations of every sentence: their scores (A, n_cand),
    log P(prefix) + log softmax(logits), and their indices beam·V + token, in no order.

    logits (A·K, V) of the newest position, alive_scores (A, K). Partially sorting all K·V
    scores of every sentence would be most of a beam step's work outside the model, so the
    tokens are dealt into G groups by residue (group g: tokens g, g + G, g + 2G, ...). The
    n_cand best scores lie in the n_cand groups (of the sentence's K·G) with the largest
    maxima: a group holding one of them has a maximum at least the n_cand-th best score, and
    fewer than n_cand groups can have a larger one. So one pass takes the group maxima (and
    the log-softmax normalizer, on blocks of sentences on worker threads), a partial sort picks
    n_cand groups, and another picks the best n_cand of their tokens."""
    xp = backend.get_array_module(logits)
    A, K = alive_scores.shape
    V = logits.shape[-1]
    G = min(V, max(n_cand, V // 64))     # groups of about 64 tokens
    per, tail = divmod(V, G)             # groups g < tail have one more token
    width = per + (tail > 0)             # tokens per group, padded
    by_sentence = logits.reshape(A, K, V)
    group_max = xp.empty((A, K, G), dtype=logits.dtype)                  # (A, K, G)
    offset = xp.empty((A, K, 1), dtype=logits.dtype)                     # (A, K, 1)

    def block(sentences):  # steps 1 and 2 read every score: blocks, on worker threads
        z, top = by_sentence[sentences], group_max[sentences]            # (a, K, V), (a, K, G)
        # 1. each group's maximum: an elementwise maximum over the rows of a (per, G) view
        xp.max(z[..., :per * G].reshape(z.shape[0], K, per, G), axis=2, out=top)
        if tail:
            xp.maximum(top[..., :tail], z[..., per * G:], out=top[..., :tail])
        # 2. score = z + offset: log softmax is z - log Σ exp z, plus log P(prefix)
        m = top.max(axis=-1, keepdims=True)                              # (a, K, 1) row max
        lse = m + xp.log(xp.exp(z - m).sum(axis=-1, keepdims=True))      # (a, K, 1)
        xp.subtract(alive_scores[sentences][..., None], lse, out=offset[sentences])
    for_blocks(block, A, K * V * logits.itemsize, xp, block_bytes=2 * 2**20)

    # 3. the n_cand groups with the largest maxima
    flat = (group_max + offset).reshape(A, K * G)                        # (A, K·G)
    groups = xp.argpartition(flat, K * G - n_cand, axis=1)[:, K * G - n_cand:]  # (A, n_cand)
    beam = groups // G                                                   # (A, n_cand)
    tokens = (groups % G)[..., None] + G * xp.arange(width)              # (A, n_cand, width)
    valid = tokens < V                                   # False past the vocabulary
    tokens = xp.minimum(tokens, V - 1)
    s, b = xp.arange(A)[:, None, None], beam[..., None]
    values = xp.where(valid, by_sentence[s, b, tokens] + offset[s, b, 0], -xp.inf)
    values = values.reshape(A, n_cand * width)                           # (A, n_cand·width)
    # 4. the best n_cand of their tokens
    best = xp.argpartition(values, n_cand * (width - 1), axis=1)[:, n_cand * (width - 1):]
    r = xp.arange(A)[:, None]
    cand_scores = values[r, best]                                        # (A, n_cand)
    cand_index = beam[r, best // width] * V + tokens.reshape(A, -1)[r, best]
    return cand_scores, cand_index


def beam_search(model: Transformer, src_ids: Any, bos_id: int, eos_id: int,
                beam_size: int = 4, length_penalty: float = 0.6, max_len: int | None = None,
                return_scores: bool = False, use_cache: bool = True) -> Any:
    """The best of ``beam_size`` hypotheses per sentence, for a batch of sources (B, S).

    Every step decodes the newest token of all B·K alive prefixes in one call, and ranks the
    K·V continuations of each sentence by accumulated log-probability: the 2K best are the
    candidates; those of the first K that end in ``eos_id`` are finished (scored by
    log P / lp with ``length_penalty`` = α), and the K best that do not are the new beam.

    A sentence stops, leaving the batch, when either
      * it has K finished hypotheses (as fairseq; with K = 1 this is greedy decoding), or
      * no alive prefix can beat its best finished score any more: a completion of a prefix
        with log-probability s ≤ 0 has log P ≤ s and length |Y| ≤ max_len, hence score at most
        s / max(lp(|prefix| + 1), lp(max_len)) (the bound of tensor2tensor, the paper's code),
        so this rule never changes the result, it only stops early;
    or when ``max_len`` tokens (default: its source length + 50) have been generated.

    Returns the best finished hypothesis of each sentence by normalized score (the best alive
    one, of its ``max_len`` tokens, if none finished), without BOS and EOS; with
    ``return_scores``, also each one's normalized score log P / lp(|Y|).

    With ``use_cache=False`` every step decodes the B·K whole prefixes again, and the beam
    reordering moves the prefixes instead of the cache (the same result, for benchmarks).
    """
    if not _is_index(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}.")
    if not (isinstance(length_penalty, numbers.Real) and math.isfinite(length_penalty)):
        # nan or inf would give every hypothesis a nan score: empty translations, silently
        raise ValueError(f"length_penalty must be a finite number (the paper's α = 0.6), got "
                         f"{length_penalty!r}.")
    src, limits = _source_and_limits(model, src_ids, max_len, bos_id, eos_id)
    with _generating(model):
        results = _on_cores(_beam_search, model, src, limits, bos_id, eos_id, int(beam_size),
                            float(length_penalty), use_cache)
    hyps = [hyp for hyp, _ in results]
    return (hyps, [score for _, score in results]) if return_scores else hyps


def _beam_search(model: Transformer, src: Tensor, limits: Any, bos_id: int, eos_id: int,
                 K: int, alpha: float, use_cache: bool) -> list[tuple[list[int], float]]:
    """Beam search over the sentences ``src`` (B, S), each up to its limit (B,):
    (hypothesis, score) per sentence."""
    lp = gnmt_length_penalty
    xp = backend.get_array_module(src.data)
    B, ids_dtype = src.shape[0], xp.int64  # generated ids: int64 whatever the source's are
    limit = int(limits.max()) if B else 0                                # the longest
    if limit == 0:
        return [([], 0.0) for _ in range(B)]
    src_mask = model.source_mask(src)                                    # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (B, S, C)
    float_dtype = memory.data.dtype
    lp_limits = lp(limits.astype(xp.float64), alpha).astype(float_dtype)  # (B,) lp(max_len)

    # Every sentence's K beams sit in consecutive rows: row = sentence·K + beam.
    rows = xp.repeat(xp.arange(B), K)                                    # (B·K,)
    cache = model.new_cache() if use_cache else None
    if cache is None:  # every step decodes the B·K prefixes against their memory
        memory, src_mask = memory[rows], src_mask[rows]                  # (B·K, S, C), ...
    # With the cache, memory, source mask and the cross-attention keys and values keep
    # one row per sentence, which its K beams share (MultiHeadAttention lets K consecutive
    # query rows attend to one cached row). The first step decodes one row per sentence,
    # since the K beams start as the same prefix; the self-attention cache then gets K.
    # At the start the K beams are the same empty prefix: only the first may expand.
    alive_scores = xp.full((B, K), -xp.inf, dtype=float_dtype)           # (A, K) log P
    alive_scores[:, 0] = 0.0
    alive_tokens = xp.zeros((B, K, 0), dtype=ids_dtype)                  # (A, K, t)
    active = xp.arange(B)                                                # (A,) sentence ids
    # The best finished hypothesis of every sentence, padded with EOS to the limit.
    best_tokens = xp.full((B, limit), eos_id, dtype=ids_dtype)           # (B, limit)
    best_scores = xp.full(B, -xp.inf, dtype=float_dtype)                 # (B,) log P / lp
    n_finished = xp.zeros(B, dtype=ids_dtype)                            # (B,)

    for t in range(1, limit + 1):  # t: hypothesis length after this step, EOS included
        A = alive_scores.shape[0]
        r = xp.arange(A)[:, None]                                        # (A, 1)
        if cache is not None and t == 1:
            bos = xp.full((B, 1), bos_id, dtype=ids_dtype)             # (B, 1)
            newest = model.decode(bos, memory, src_mask, cache).data[:, -1][rows]
        elif cache is not None:
            last = alive_tokens[:, :, -1].reshape(A * K, 1)              # (A·K, 1)
            newest = model.decode(last, memory, src_mask, cache).data[:, -1]
        else:  # alive_tokens are the prefixes, already in beam order
            prefix = xp.concatenate(
                [xp.full((A, K, 1), bos_id, dtype=ids_dtype), alive_tokens], axis=2)
            newest = _decode_prefix(model, prefix.reshape(A * K, t), memory,
                                    src_mask).data[:, -1]
        V = newest.shape[-1]                                             # newest (A·K, V)
        n_cand = min(2 * K, K * V)
        # 1. The 2K best continuations per sentence, best first.
        cand_scores, top = _best_continuations(newest, alive_scores, n_cand)
        order = xp.argsort(-cand_scores, axis=1)                         # (A, 2K)
        cand_scores, top = cand_scores[r, order], top[r, order]          # (A, 2K)
        cand_beams, cand_tokens = top // V, (top % V).astype(ids_dtype)
        is_eos = cand_tokens == eos_id                                   # (A, 2K)

        # 2. Candidates among the first K that end in EOS are finished hypotheses.
        finished = is_eos[:, :K] & xp.isfinite(cand_scores[:, :K])       # (A, K)
        n_finished[active] = n_finished[active] + finished.sum(axis=1).astype(ids_dtype)
        eos_scores = xp.where(finished, cand_scores[:, :K], -xp.inf)  # (A, K)
        j = eos_scores.argmax(axis=1)[:, None]                           # (A, 1) best of them
        new_score = eos_scores[r, j][:, 0] / lp(t, alpha)                # (A,)
        better = new_score > best_scores[active]                         # (A,)
        prefix = alive_tokens[r, cand_beams[r, j]][:, 0]                 # (A, t-1)
        padded = xp.concatenate(
            [prefix, xp.full((A, limit - t + 1), eos_id, dtype=ids_dtype)], axis=1)
        best_tokens[active] = xp.where(better[:, None], padded, best_tokens[active])
        best_scores[active] = xp.where(better, new_score, best_scores[active])

        # 3. The K best candidates that do not end in EOS are the new beam: sort them
        # first (distinct keys, so the order of the scores is kept).
        position = xp.arange(n_cand)[None]                               # (1, 2K)
        keep = xp.argsort(xp.where(is_eos, position + n_cand, position), axis=1)[:, :K]
        beams = cand_beams[r, keep]                                      # (A, K)
        alive_scores = cand_scores[r, keep]                              # (A, K)
        alive_tokens = xp.concatenate(
            [alive_tokens[r, beams], cand_tokens[r, keep][:, :, None]], axis=2)  # (A, K, t)
        # Sentences at their limit without a finished hypothesis: their best prefix.
        at_limit = limits[active] == t                                   # (A,)
        if bool(at_limit.any()):
            none = at_limit & ~xp.isfinite(best_scores[active])         # (A,)
            padded = xp.concatenate(
                [alive_tokens[:, 0], xp.full((A, limit - t), eos_id, dtype=ids_dtype)], axis=1)
            best_tokens[active] = xp.where(none[:, None], padded, best_tokens[active])
            best_scores[active] = xp.where(
                none, alive_scores[:, 0] / lp_limits[active], best_scores[active])
        if t == limit:
            break

        # 4. Sentences whose result is settled leave the batch.
        bound = alive_scores[:, 0] / xp.maximum(lp(t + 1, alpha), lp_limits[active])  # (A,)
        done = ((n_finished[active] >= K) | (best_scores[active] >= bound)        # (A,)
                | at_limit)
        n_done = int(done.sum())
        flat = r * K + beams                                             # (A, K) rows to keep
        if n_done:
            if n_done == A:
                break
            going = ~done
            flat, active = flat[going], active[going]                    # (A', K), (A',)
            alive_scores, alive_tokens = alive_scores[going], alive_tokens[going]
        flat = flat.reshape(-1)                                          # (A'·K,)
        if cache is None:
            if n_done:  # the beams of a sentence share its source rows
                memory, src_mask = memory[flat], src_mask[flat]
            continue
        staying = xp.nonzero(going)[0] if n_done else None               # (A',) sentence rows
        if n_done:
            memory, src_mask = memory[staying], src_mask[staying]
        # after the first step the self-attention cache grows from 1 to K rows a sentence
        cache.reorder(flat // K if t == 1 else flat, cross_index=staying)

    hyps = _strip(backend.to_numpy(best_tokens).tolist(), eos_id)
    scores = [float(s) for s in backend.to_numpy(best_scores).tolist()]
    return list(zip(hyps, scores, strict=True))


__all__ = ["beam_search", "gnmt_length_penalty", "greedy_decode"]
