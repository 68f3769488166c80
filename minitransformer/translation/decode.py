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
On the GPU, ``graphs=DecodingGraphs(model)`` (translation/graphs.py) gives the search a cache
of fixed shapes and runs each step after the first in the CUDA graph of the batch's shape,
captured the second time that shape steps (and replayed by later batches of that shape).

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
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import backend
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..functional import _blocks
from ..functional._blocks import for_blocks, on_workers
from ..functional._cuda import is_cupy
from ..functional._layout import frozen_weights
from ..nn.transformer import Transformer
from . import _processes

MIN_SHARE = 8  # sentences: a batch of fewer than 2·MIN_SHARE is decoded on one core


@dataclass(frozen=True)
class Hypothesis:
    """One output of a search for one source sentence (``n_best`` of the searches)."""

    tokens: list[int]             # the output's token ids, without BOS and EOS
    token_log_probs: list[float]  # log P(y_i | y_<i, X) of each token; EOS's last, if finished
    log_prob: float               # log P(Y | X), as the search accumulated it
    score: float                  # log_prob / lp(|Y|): what beam search ranks by
    finished: bool                # ended with EOS; False when cut at the length limit


_generations: dict[int, list] = {}  # id(model) -> [searches open, the modes to restore]
_generations_lock = threading.Lock()


@contextlib.contextmanager
def _generating(model: Transformer) -> Iterator[None]:
    """Eval mode (no dropout), no graph and frozen weights (their small products read kept
    copies laid out for them, ``functional/_layout.py``) while generating; every module's own
    mode is restored afterwards (a model may be training with some parts frozen in eval mode).

    Searches with one model on several threads at once share the eval mode: the first to
    start notes the modes, and the last to end restores them (one ending first would switch
    dropout back on under the others)."""
    with _generations_lock:
        open_ = _generations.get(id(model))
        if open_ is None:
            modes = [(module, module.training) for module in model.modules()]
            open_ = _generations[id(model)] = [0, modes]
            model.eval()
        open_[0] += 1
    try:
        with no_grad(), frozen_weights(p.data for p in model.parameters()):
            yield
    finally:
        with _generations_lock:
            open_[0] -= 1
            if not open_[0]:
                del _generations[id(model)]
                for module, training in open_[1]:
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
              *args: Any, graphs: Any = None) -> list:
    """``search(model, src, limits, *args)``, a list of one result per sentence of the batch
    ``src`` (with its limits), run on shares of the sentences, one share per core, at once.

    A decoding step is many small products and elementwise operations on a few hundred rows:
    too small for BLAS or blocks of rows to keep two cores busy, so each core decodes a share
    of the sentences on its own, with single-threaded BLAS: the calling thread the first, and
    worker processes the others once they have started (``_processes.py``; threads of this
    process until then, or when switched off). Sentences are dealt out in turn
    (sentences 0, n, 2n, ... to the first of n shares), so that when a batch comes sorted by
    length every share gets as much work. A sentence's search depends on no other sentence,
    and the shares keep the batch's padded width, so the results are those of one search over
    the whole batch (but for the last bit of a product over fewer rows, which BLAS may round
    otherwise). On the GPU, with graphs (one capture at a time), or for fewer than
    2·MIN_SHARE sentences, there is one share."""
    B = src.shape[0]
    n = min(_blocks.WORKERS, B // MIN_SHARE)  # set_num_threads may change WORKERS
    if n < 2 or is_cupy(backend.get_array_module(src.data)) or graphs is not None:
        return search(model, src, limits, *args)
    shares = _on_processes(search, model, src, limits, n, args)
    if shares is None:
        shares = on_workers(lambda i: search(model, Tensor(src.data[i::n]), limits[i::n],
                                             *args), list(range(n)))
    results: list = [None] * B
    for i, share in enumerate(shares):
        results[i::n] = share
    return results


def _on_processes(search: Callable[..., list], model: Transformer, src: Tensor, limits: Any,
                  n: int, args: tuple) -> list | None:
    """The n shares' results, the first decoded here and the others on worker processes
    (``_processes.py``: no turns at Python's lock), or None where they cannot take them:
    then the shares go to threads. A share whose worker failed is decoded here."""
    name = {_greedy: "greedy", _beam_search: "beam"}.get(search)
    plain = [_plain(a) for a in args]  # the arguments as JSON values, where they are
    if (name is None or type(model) is not Transformer  # a subclass may decode otherwise
            or backend.get_array_module(src.data) is not backend.get_backend("cpu").xp
            or any(a is _NOT_PLAIN for a in plain)):
        return None

    def share(i: int) -> list:  # on this thread alone, as a share on a worker thread runs
        with _blocks.as_one_worker():
            return search(model, Tensor(src.data[i::n]), limits[i::n], *args)

    shares = [(src.data[i::n], limits[i::n]) for i in range(n)]
    results = _processes.run(model, name, shares, plain, lambda: share(0))
    if results is not None:
        results = [found if found is not None else share(i)
                   for i, found in enumerate(results)]
    return results


_NOT_PLAIN = object()


def _plain(value: Any) -> Any:
    """``value`` as a JSON value (None, a bool, an int or a float; ids may be NumPy ints), or
    _NOT_PLAIN."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) or _is_index(value):
        return operator.index(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return _NOT_PLAIN


def _decode_prefix(model: Transformer, prefix: Any, memory: Tensor, src_mask: Any) -> Tensor:
    """Logits (N, t, V) of whole prefixes (N, t), BOS first, recomputed from scratch.

    The uncached path of ``use_cache=False``. It still passes a fresh, empty cache: that gives
    the cached path's purely causal self-attention mask, under which a generated padding id
    is a token, where ``decode`` without a cache would mask it as padding."""
    return model.decode(prefix, memory, src_mask, model.new_cache())     # (N, t, V)


def _decode_step(model: Transformer, graphs: Any, ids: Any, memory: Tensor, src_mask: Any,
                 cache: Any) -> Tensor:
    """Logits (N, 1, V) of the newest ids (N, 1) with the cache: with ``graphs``, by the
    graph of the cache's shape (``_new_cache``; the first step, which fills the
    cross-attention cache, runs eagerly)."""
    if graphs is None:
        return model.decode(ids, memory, src_mask, cache)
    return graphs.decode(ids, memory, src_mask, cache)


def _new_cache(model: Transformer, graphs: Any, memory: Tensor, src_mask: Any, beams: int,
               limit: int) -> Any:
    """The model's cache; with ``graphs`` one of fixed shapes, for ``beams`` rows a sentence
    and at most ``limit`` steps, whose steps a graph replays. Greedy decoding's cache writes
    its keys and values in place (``KVCache``); beam search's are gathered at every step."""
    if graphs is None:
        return model.new_cache(limit if beams == 1 else 0)
    return graphs.new_cache(memory, src_mask, beams, limit)


def _on_host(xp: Any, *scalars: Any) -> list[int]:
    """Device scalars (bools and integers) read on the host together: one transfer, where
    reading each would make the host wait for a GPU once per scalar."""
    return backend.to_numpy(xp.stack([xp.asarray(v, dtype=xp.int64)
                                      for v in scalars])).tolist()


def _rows_where(mask: Any, n: int, xp: Any) -> Any:
    """The indices of the n True entries of ``mask`` (A,), in order, found on the device
    (``xp.nonzero`` would read their count on the host, which waits for a GPU): each True
    entry's rank among them, a running count, is its place in the result."""
    place = xp.where(mask, xp.cumsum(mask) - 1, n)          # (A,) False ones: a spare place
    rows = xp.empty(n + 1, dtype=xp.int64)
    rows[place] = xp.arange(mask.shape[0])                  # only the spare place is shared
    return rows[:n]                                                      # (n,)


def _strip(rows: list[list[int]], eos_id: int) -> list[list[int]]:
    """Each row up to (not including) its first ``eos_id``."""
    return [row[: row.index(eos_id)] if eos_id in row else row for row in rows]


def greedy_decode(model: Transformer, src_ids: Any, bos_id: int, eos_id: int,
                  max_len: int | None = None, use_cache: bool = True,
                  n_best: int | None = None, length_penalty: float = 0.6,
                  graphs: Any = None) -> list:
    """The most probable token at each step, for a batch of sources (B, S).

    Stops a sentence at ``eos_id`` (not included in the output) or after ``max_len`` tokens
    (default: its source length + 50, as §6.1). Returns one list of token ids per sentence.
    With ``use_cache=False`` every step decodes the whole prefix again instead of only the
    newest token (the same result, O(length²) per step: for benchmarks).

    With ``n_best=1`` (greedy decoding keeps one hypothesis) it returns instead, for each
    sentence, a list of one ``Hypothesis``: the tokens with their log-probabilities, and a
    score log P / lp(|Y|) with α = ``length_penalty``, comparable with beam search's.

    ``graphs`` (a ``translation.graphs.DecodingGraphs`` of this model, GPU only) runs the
    cached steps in CUDA graphs; the tokens are the same (the scores to rounding).
    """
    if n_best is not None and (not _is_index(n_best) or n_best != 1):
        raise ValueError(f"greedy decoding keeps one hypothesis, so n_best can only be 1 "
                         f"(got {n_best!r}); use beam_search with beam_size >= n_best for "
                         "more.")
    _check_length_penalty(length_penalty)
    src, limits = _source_and_limits(model, src_ids, max_len, bos_id, eos_id)
    with _generating(model):
        results = _on_cores(_greedy, model, src, limits, bos_id, eos_id, use_cache,
                            n_best is not None, graphs, graphs=graphs)
    if n_best is None:
        return results
    return [[_greedy_hypothesis(tokens, log_probs, eos_id, limit, float(length_penalty))]
            for (tokens, log_probs), limit in zip(results, backend.to_numpy(limits).tolist(),
                                                  strict=True)]


def _greedy(model: Transformer, src: Tensor, limits: Any, bos_id: int, eos_id: int,
            use_cache: bool, with_log_probs: bool, graphs: Any = None) -> list:
    """Greedy decoding of the sentences ``src`` (B, S), each up to its limit (B,): one token
    list per sentence, or with ``with_log_probs`` (tokens, log-probabilities), both up to and
    including the first EOS."""
    src_mask = model.source_mask(src)                                    # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (B, S, C)
    B = src.shape[0]
    xp = backend.get_array_module(src.data)
    limit = int(limits.max()) if B else 0
    cache = _new_cache(model, graphs, memory, src_mask, 1, limit) if use_cache else None
    # generated ids are int64 whatever the source ids are (the target vocabulary may be larger)
    out = xp.full((B, limit), eos_id, dtype=xp.int64)                    # (B, limit)
    out_log_probs = xp.zeros((B, limit), dtype=memory.data.dtype) if with_log_probs else None
    active = xp.arange(B)                                                # (A,) still decoding
    prefix = xp.full((B, 1), bos_id, dtype=xp.int64)                     # (A, t): BOS, tokens
    for t in range(limit):
        if cache is not None:
            logits = _decode_step(model, graphs, prefix[:, -1:], memory, src_mask,
                                  cache)                                  # (A, 1, V)
        else:
            logits = _decode_prefix(model, prefix, memory, src_mask)      # (A, t+1, V)
        z = logits.data[:, -1]                                           # (A, V)
        tokens = z.argmax(axis=-1).astype(xp.int64)                      # (A,)
        out[active, t] = tokens
        if with_log_probs:  # the chosen token is the row's maximum m: z - lse = -log Σ e^(z-m)
            m = z[xp.arange(z.shape[0]), tokens][:, None]                # (A, 1)
            out_log_probs[active, t] = -xp.log(xp.exp(z - m).sum(axis=-1))
        going = (tokens != eos_id) & (t + 1 < limits[active])            # (A,)
        n_going = int(going.sum())
        if n_going == 0:
            break
        prefix = xp.concatenate([prefix, tokens[:, None]], axis=1)       # (A, t+2)
        if n_going < going.shape[0]:  # finished sentences leave the batch: the last rows
            # still going move into the finished rows before them, and the first A' rows
            # stay (views), so only the rows that move are copied, in the cache too
            sources, targets = _fill_from_end(going, n_going, xp)
            for rows in (active, prefix, memory.data, src_mask):
                rows[targets] = rows[sources]
            active, prefix = active[:n_going], prefix[:n_going]          # (A',), (A', t+2)
            memory, src_mask = Tensor(memory.data[:n_going]), src_mask[:n_going]
            if cache is not None:
                cache.move_rows(sources, targets, n_going)
    rows = backend.to_numpy(out).tolist()
    if not with_log_probs:
        return _strip(rows, eos_id)                                      # (B, ≤ limit)
    log_probs = backend.to_numpy(out_log_probs).tolist()
    return [(row, lps) for row, lps in zip(rows, log_probs, strict=True)]


def _fill_from_end(going: Any, n: int, xp: Any) -> tuple[Any, Any]:
    """(sources, targets): the rows at or beyond ``n`` still ``going`` (A,), and the rows
    below n that are not, as many of each; moving sources onto targets leaves the n rows
    going first."""
    targets = xp.nonzero(~going[:n])[0]
    sources = xp.nonzero(going[n:])[0] + n
    return sources, targets


def _greedy_hypothesis(row: list[int], log_probs: list[float], eos_id: int, limit: int,
                       alpha: float) -> Hypothesis:
    """A greedy output row (padded with EOS to the batch's limit) as a Hypothesis."""
    finished = eos_id in row[:limit]
    length = row.index(eos_id) + 1 if finished else limit               # |Y|, EOS counted
    token_log_probs = log_probs[:length]
    log_prob = math.fsum(token_log_probs)
    return Hypothesis(row[:length - finished], token_log_probs, log_prob,
                      log_prob / gnmt_length_penalty(length, alpha), finished)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α; |Y| counts the end-of-sentence token."""
    return ((5.0 + length) / 6.0) ** alpha


def _largest(x: Any, k: int, xp: Any) -> Any:
    """The column indices of each row's k largest entries of x (rows, n), in no order.

    NumPy partitions (linear time). On a GPU, rows this short (a few hundred entries) are
    sorted instead: CuPy's argpartition reads the device from the host at every call (in
    ``unravel_index``), which stalls the stream; beam search with decoding graphs on an H200
    took 0.62 s with the sort against 0.80 s (bench/beam_topk.py)."""
    n = x.shape[1]
    if xp is backend.get_backend("cpu").xp:
        return xp.argpartition(x, n - k, axis=1)[:, n - k:]
    return xp.argsort(x, axis=1)[:, n - k:]


def _best_continuations(logits: Any, alive_scores: Any, n_cand: int
                        ) -> tuple[Any, Any, Any]:
    """The n_cand best continuations of every sentence: their scores (A, n_cand),
    log P(prefix) + log softmax(logits), and their indices beam·V + token, in no order; and
    the log-softmax normalizer log Σ exp(logits) of every row (A, K).

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
    log_norm = xp.empty((A, K, 1), dtype=logits.dtype)                   # (A, K, 1)

    def block(sentences):  # steps 1 and 2 read every score: blocks, on worker threads
        z, top = by_sentence[sentences], group_max[sentences]            # (a, K, V), (a, K, G)
        # 1. each group's maximum: an elementwise maximum over the rows of a (per, G) view
        xp.max(z[..., :per * G].reshape(z.shape[0], K, per, G), axis=2, out=top)
        if tail:
            xp.maximum(top[..., :tail], z[..., per * G:], out=top[..., :tail])
        # 2. score = z + offset: log softmax is z - log Σ exp z, plus log P(prefix)
        m = top.max(axis=-1, keepdims=True)                              # (a, K, 1) row max
        lse = m + xp.log(xp.exp(z - m).sum(axis=-1, keepdims=True))      # (a, K, 1)
        log_norm[sentences] = lse
        xp.subtract(alive_scores[sentences][..., None], lse, out=offset[sentences])
    for_blocks(block, A, K * V * logits.itemsize, xp, block_bytes=2 * 2**20)

    # 3. the n_cand groups with the largest maxima
    flat = (group_max + offset).reshape(A, K * G)                        # (A, K·G)
    groups = _largest(flat, n_cand, xp)                                  # (A, n_cand)
    beam = groups // G                                                   # (A, n_cand)
    tokens = (groups % G)[..., None] + G * xp.arange(width)              # (A, n_cand, width)
    valid = tokens < V                                   # False past the vocabulary
    tokens = xp.minimum(tokens, V - 1)
    s, b = xp.arange(A)[:, None, None], beam[..., None]
    values = xp.where(valid, by_sentence[s, b, tokens] + offset[s, b, 0], -xp.inf)
    values = values.reshape(A, n_cand * width)                           # (A, n_cand·width)
    # 4. the best n_cand of their tokens
    best = _largest(values, n_cand, xp)                                  # (A, n_cand)
    r = xp.arange(A)[:, None]
    cand_scores = values[r, best]                                        # (A, n_cand)
    cand_index = beam[r, best // width] * V + tokens.reshape(A, -1)[r, best]
    return cand_scores, cand_index, log_norm[..., 0]


def beam_search(model: Transformer, src_ids: Any, bos_id: int, eos_id: int,
                beam_size: int = 4, length_penalty: float = 0.6, max_len: int | None = None,
                return_scores: bool = False, use_cache: bool = True,
                n_best: int | None = None, graphs: Any = None) -> Any:
    """The best of ``beam_size`` hypotheses per sentence, for a batch of sources (B, S).

    Every step decodes the newest token of all B·K alive prefixes in one call, and ranks the
    K·V continuations of each sentence by accumulated log-probability: the 2K best are the
    candidates; those of the first K that end in ``eos_id`` are finished (scored by
    log P / lp with ``length_penalty`` = α), and the K best that do not are the new beam.

    A sentence stops, leaving the batch, when either
      * it has K finished hypotheses (as fairseq; with K = 1 this is greedy decoding), or
      * no alive prefix can beat its N-th best finished score any more (N = ``n_best``, 1 by
        default): a completion of a prefix with log-probability s ≤ 0 has log P ≤ s and
        length |Y| ≤ max_len, hence score at most s / max(lp(|prefix| + 1), lp(max_len))
        (the bound of tensor2tensor, the paper's code), so this rule never changes the result,
        it only stops early;
    or when ``max_len`` tokens (default: its source length + 50) have been generated. Then,
    if it finished fewer than K hypotheses, its alive ones join them, cut at the limit
    (unfinished, scored log P / lp(max_len)).

    Returns the best finished hypothesis of each sentence by normalized score (the best alive
    one, of its ``max_len`` tokens, if none finished), without BOS and EOS; with
    ``return_scores``, also each one's normalized score log P / lp(|Y|).

    With ``n_best`` (1 to ``beam_size``) it returns instead, for each sentence, a list of its
    ``n_best`` best hypotheses (``Hypothesis``: tokens, their log-probabilities, log P, score),
    finished ones first, each group best first; the first is the hypothesis returned without
    ``n_best``. Fewer when the search found fewer.

    With ``use_cache=False`` every step decodes the B·K whole prefixes again, and the beam
    reordering moves the prefixes instead of the cache (the same result, for benchmarks).

    ``graphs`` (a ``translation.graphs.DecodingGraphs`` of this model, GPU only) runs the
    cached steps in CUDA graphs; the hypotheses are the same (their scores to rounding).

    A beam wider than the target vocabulary V is searched as asked: the first step fills only
    V of its places (one empty prefix, V tokens), later ones have K·V candidates, and a beam
    wider than every step's candidates never prunes, an exhaustive search (the tests compare
    it with brute force on a vocabulary of 6). Its memory grows with K: ``translate`` refuses
    a beam wider than V, and estimates the memory of a search before it starts
    (``memory.decoding_bytes``), lowering its batches to fit; this function decodes the batch
    it is given.
    """
    if not _is_index(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}.")
    _check_length_penalty(length_penalty)
    if n_best is not None:
        if not _is_index(n_best) or not 1 <= n_best <= beam_size:
            raise ValueError(f"n_best must be an integer from 1 to the beam size "
                             f"({beam_size}), got {n_best!r}: the search keeps only "
                             "beam_size hypotheses.")
        if return_scores:
            raise ValueError("give n_best or return_scores, not both: the hypotheses of "
                             "n_best carry their scores.")
    src, limits = _source_and_limits(model, src_ids, max_len, bos_id, eos_id)
    with _generating(model):
        results = _on_cores(_beam_search, model, src, limits, bos_id, eos_id, int(beam_size),
                            float(length_penalty), use_cache, int(n_best or 1), graphs,
                            graphs=graphs)
    if n_best is not None:
        return [found[:n_best] for found in results]
    hyps = [found[0].tokens for found in results]
    return (hyps, [found[0].score for found in results]) if return_scores else hyps


def _check_length_penalty(alpha: Any) -> None:
    if not (isinstance(alpha, numbers.Real) and math.isfinite(alpha)):
        # nan or inf would give every hypothesis a nan score: empty translations, silently
        raise ValueError(f"length_penalty must be a finite number (the paper's α = 0.6), got "
                         f"{alpha!r}.")


class _Finished:
    """The finished hypotheses of every sentence of a search: at most K each, finished ones
    first, each group by score, best first (ties: the earlier found first); and on the
    device, each sentence's N-th best finished score, which the stopping bound compares."""

    def __init__(self, B: int, K: int, N: int, xp: Any, dtype: Any):
        self.K, self.N, self.xp = K, N, xp
        self.by_sentence: list[list[Hypothesis]] = [[] for _ in range(B)]
        self.nth_best = xp.full(B, -xp.inf, dtype=dtype)                 # (B,)

    def add(self, sentences: Any, tokens: Any, token_log_probs: Any, log_probs: Any,
            length: int, alpha: float, finished: bool) -> None:
        """Hypotheses (F of them) of ``sentences`` (F,): ``tokens`` (F, L) without EOS,
        ``token_log_probs`` (F, L'), log P (F,), all of length |Y| = ``length`` for the length
        penalty. Two reads on the host (integers and floats), each of which waits for a GPU."""
        xp = self.xp
        integers = backend.to_numpy(xp.concatenate(
            [sentences[:, None].astype(tokens.dtype), tokens], axis=1)).tolist()  # (F, 1 + L)
        floats = backend.to_numpy(xp.concatenate(
            [log_probs[:, None], token_log_probs], axis=1)).tolist()            # (F, 1 + L')
        changed = set()
        for (b, *ids), (log_p, *lps) in zip(integers, floats, strict=True):
            if not math.isfinite(log_p):
                continue
            found = self.by_sentence[b]
            found.append(Hypothesis(ids, lps, log_p, log_p / gnmt_length_penalty(length, alpha),
                                    finished))
            found.sort(key=lambda h: (not h.finished, -h.score))  # stable: ties keep order
            del found[self.K:]
            changed.add(b)
        if not finished or not changed:
            return
        changed = sorted(changed)
        nth = [self.by_sentence[b][self.N - 1].score if len(self.by_sentence[b]) >= self.N
               else -math.inf for b in changed]
        self.nth_best[xp.asarray(changed)] = xp.asarray(nth, dtype=self.nth_best.dtype)

    def results(self) -> list[list[Hypothesis]]:
        return [found or [Hypothesis([], [], -math.inf, -math.inf, False)]
                for found in self.by_sentence]


def _beam_search(model: Transformer, src: Tensor, limits: Any, bos_id: int, eos_id: int,
                 K: int, alpha: float, use_cache: bool, N: int,
                 graphs: Any = None) -> list[list[Hypothesis]]:
    """Beam search over the sentences ``src`` (B, S), each up to its limit (B,): the
    hypotheses of each sentence, best first, at most K; stopping once the N-th best is
    settled."""
    lp = gnmt_length_penalty
    xp = backend.get_array_module(src.data)
    B, ids_dtype = src.shape[0], xp.int64  # generated ids: int64 whatever the source's are
    limit = int(limits.max()) if B else 0                                # the longest
    if limit == 0:
        return [[Hypothesis([], [], 0.0, 0.0, False)] for _ in range(B)]
    src_mask = model.source_mask(src)                                    # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (B, S, C)
    float_dtype = memory.data.dtype
    lp_limits = lp(limits.astype(xp.float64), alpha).astype(float_dtype)  # (B,) lp(max_len)

    # Every sentence's K beams sit in consecutive rows: row = sentence·K + beam.
    rows = xp.repeat(xp.arange(B), K)                                    # (B·K,)
    cache = _new_cache(model, graphs, memory, src_mask, K, limit) if use_cache else None
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
    alive_log_probs = xp.zeros((B, K, 0), dtype=float_dtype)             # (A, K, t) per token
    active = xp.arange(B)                                                # (A,) sentence ids
    found = _Finished(B, K, N, xp, float_dtype)
    n_finished = xp.zeros(B, dtype=ids_dtype)                            # (B,)

    for t in range(1, limit + 1):  # t: hypothesis length after this step, EOS included
        A = alive_scores.shape[0]
        r = xp.arange(A)[:, None]                                        # (A, 1)
        if cache is not None and t == 1 and graphs is not None:  # all B·K rows: one shape
            bos = xp.full((B * K, 1), bos_id, dtype=ids_dtype)         # (B·K, 1)
            newest = _decode_step(model, graphs, bos, memory, src_mask, cache).data[:, -1]
        elif cache is not None and t == 1:
            bos = xp.full((B, 1), bos_id, dtype=ids_dtype)             # (B, 1)
            newest = model.decode(bos, memory, src_mask, cache).data[:, -1][rows]
        elif cache is not None:
            last = alive_tokens[:, :, -1].reshape(A * K, 1)              # (A·K, 1)
            newest = _decode_step(model, graphs, last, memory, src_mask, cache).data[:, -1]
        else:  # alive_tokens are the prefixes, already in beam order
            prefix = xp.concatenate(
                [xp.full((A, K, 1), bos_id, dtype=ids_dtype), alive_tokens], axis=2)
            newest = _decode_prefix(model, prefix.reshape(A * K, t), memory,
                                    src_mask).data[:, -1]
        V = newest.shape[-1]                                             # newest (A·K, V)
        n_cand = min(2 * K, K * V)
        # 1. The 2K best continuations per sentence, best first, and each one's token's
        # log-probability (its logit less its row's normalizer).
        cand_scores, top, log_norm = _best_continuations(newest, alive_scores, n_cand)
        order = xp.argsort(-cand_scores, axis=1)                         # (A, 2K)
        cand_scores, top = cand_scores[r, order], top[r, order]          # (A, 2K)
        cand_beams, cand_tokens = top // V, (top % V).astype(ids_dtype)
        cand_log_probs = newest[r * K + cand_beams, cand_tokens] - log_norm[r, cand_beams]
        is_eos = cand_tokens == eos_id                                   # (A, 2K)

        # 2. Candidates among the first K that end in EOS are finished hypotheses.
        finished = is_eos[:, :K] & xp.isfinite(cand_scores[:, :K])       # (A, K)
        n_finished[active] = n_finished[active] + finished.sum(axis=1).astype(ids_dtype)
        old_alive_tokens, old_alive_log_probs = alive_tokens, alive_log_probs

        # 3. The K best candidates that do not end in EOS are the new beam: sort them
        # first (distinct keys, so the order of the scores is kept).
        position = xp.arange(n_cand)[None]                               # (1, 2K)
        keep = xp.argsort(xp.where(is_eos, position + n_cand, position), axis=1)[:, :K]
        beams = cand_beams[r, keep]                                      # (A, K)
        alive_scores = cand_scores[r, keep]                              # (A, K)
        alive_tokens = xp.concatenate(
            [alive_tokens[r, beams], cand_tokens[r, keep][:, :, None]], axis=2)  # (A, K, t)
        alive_log_probs = xp.concatenate(
            [alive_log_probs[r, beams], cand_log_probs[r, keep][:, :, None]], axis=2)
        # 4. Sentences whose result is settled leave the batch (at their limit, or by the
        # bound against the finished scores as they stand before this step's are added).
        at_limit = limits[active] == t                                   # (A,)
        bound = alive_scores[:, 0] / xp.maximum(lp(min(t + 1, limit), alpha),      # (A,)
                                                lp_limits[active])  # (unused at the limit)
        done = ((n_finished[active] >= K) | (found.nth_best[active] >= bound)     # (A,)
                | at_limit)
        # one read on the host a step while no hypothesis finishes: on a GPU each read waits
        # for the device, so the step's three answers come back together
        any_finished, any_at_limit, n_done = _on_host(xp, finished.any(), at_limit.any(),
                                                      done.sum())
        if any_finished:
            a, k = xp.nonzero(finished)                                  # (F,), (F,)
            beam = cand_beams[a, k]                                      # (F,)
            found.add(active[a], old_alive_tokens[a, beam],
                      xp.concatenate([old_alive_log_probs[a, beam], cand_log_probs[a, k, None]],
                                     axis=1), cand_scores[a, k], t, alpha, finished=True)
        # Sentences at their limit: their alive hypotheses join the finished ones, cut (a
        # sentence with K finished already keeps them: finished ones rank first).
        if any_at_limit:
            a = xp.repeat(xp.nonzero(at_limit)[0], K)                    # (F,)
            k = xp.tile(xp.arange(K), a.shape[0] // K)                   # (F,)
            found.add(active[a], alive_tokens[a, k], alive_log_probs[a, k],
                      alive_scores[a, k], t, alpha, finished=False)
        if t == limit:
            break
        if any_finished:  # the new finished scores may settle more sentences
            done |= found.nth_best[active] >= bound
            n_done = int(done.sum())
        flat = r * K + beams                                             # (A, K) rows to keep
        staying = None
        if n_done:
            if n_done == A:
                break
            staying = _rows_where(~done, A - n_done, xp)                 # (A',) sentence rows
            flat, active = flat[staying], active[staying]                # (A', K), (A',)
            alive_scores, alive_tokens = alive_scores[staying], alive_tokens[staying]
            alive_log_probs = alive_log_probs[staying]
        flat = flat.reshape(-1)                                          # (A'·K,)
        if cache is None:
            if n_done:  # the beams of a sentence share its source rows
                memory, src_mask = memory[flat], src_mask[flat]
            continue
        if n_done:
            memory, src_mask = memory[staying], src_mask[staying]
        # after the first step the self-attention cache grows from 1 to K rows a sentence
        # (with graphs it has K from the start)
        cache.reorder(flat // K if t == 1 and graphs is None else flat, cross_index=staying)

    return found.results()


__all__ = ["Hypothesis", "beam_search", "gnmt_length_penalty", "greedy_decode"]
