"""The exercise ``beam_step``: one step of beam search for one sentence,
``beam_step(alive_scores, log_probs, eos_id, t, alpha) -> ((beams, tokens, scores), finished)``.

Its contract is the step of the library's ``beam_search`` (translation/decode.py), for one
sentence: candidate scores log P(prefix) + log P(token), the 2K best of the K·V, those among
the K best that end in EOS finished and scored log P / lp(t) with GNMT's length penalty, the K
best of the others the new beam with their plain log P.

The first cases give the step scores drawn so that EOS lands where a mistake shows (among the
K best, just below them, the best of several beams) and compare with ``reference_step``, the
library's step written for one sentence. The last runs a whole search built from the learner's
step on a tiny Transformer, with the stopping rules of ``beam_search``, and compares its
hypotheses and scores with those of the same search built from ``reference_step``; the tests
prove that search equal to ``translation.decode.beam_search`` (course/ does not import the
translation pipeline). A wrong step is recognised by running the known wrong steps of
``MISTAKES`` on the same scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from ...nn.transformer import Transformer
from ._common import AlgorithmTask, Failed, Learner, TaskCase, close, tiny_model

BOS, EOS, VOCAB = 1, 2, 13


def length_penalty(length: float, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α, as translation.decode.gnmt_length_penalty."""
    return ((5.0 + length) / 6.0) ** alpha


def reference_step(alive_scores: Any, log_probs: Any, eos_id: int, t: int, alpha: float,
                   n_best: str = "2K", eos_alive: bool = False, finish_from: str = "K",
                   lp_alive: bool = False, penalty: str = "gnmt", lp_length: int = 0,
                   add_prefix: bool = True, swap_index: bool = False,
                   per_beam: bool = False) -> tuple:
    """The library's beam step for one sentence, or one of the known wrong ones (the keyword
    arguments, as ``MISTAKES`` uses them)."""
    K, V = log_probs.shape
    scores = ((alive_scores[:, None] if add_prefix else 0) + log_probs).reshape(-1)  # (K·V,)
    n = K if n_best == "K" else min(2 * K, K * V)
    if per_beam:  # each beam's own 2 best, then ranked together
        own = np.argsort(-scores.reshape(K, V), axis=1, kind="stable")[:, :2]
        flat = (np.arange(K)[:, None] * V + own).reshape(-1)
        best = flat[np.argsort(-scores[flat], kind="stable")]
    else:
        best = np.argsort(-scores, kind="stable")[:n]
    beams, tokens = (best % K, best // K) if swap_index else (best // V, best % V)
    cand = scores[best]
    is_eos = tokens == eos_id
    with np.errstate(divide="ignore"):
        lp = {"gnmt": length_penalty(t + lp_length, alpha), "none": 1.0,
              "length": float(t) ** alpha, "times": 1 / length_penalty(t, alpha)}[penalty]
    first = K if finish_from == "K" else len(best)
    finished = [(int(beams[i]), float(cand[i] / lp)) for i in range(min(first, len(best)))
                if is_eos[i] and np.isfinite(cand[i])]
    keep = np.arange(K) if eos_alive else np.flatnonzero(~is_eos)[:K]
    alive = cand[keep] / (length_penalty(t, alpha) if lp_alive else 1.0)
    return (beams[keep], tokens[keep], alive), finished


# (what changes in reference_step, the hint): a teacher adds a mistake here and its patch to
# the test catalogue (tests/course/task_mistakes.py)
MISTAKES: list[tuple[dict[str, Any], str]] = [
    (dict(n_best="K"), "the new beam came out short: with only the K best candidates, those "
     "ending in EOS leave fewer than K to go on; take the 2K best (at most K of them, one per "
     "beam, can end in EOS, so at least K do not)."),
    (dict(eos_alive=True), "a candidate ending in EOS stayed in the beam: a hypothesis that "
     "ends in EOS is finished; the new beam is the K best that do not end in EOS."),
    (dict(finish_from="2K"), "a candidate ranked below the K best finished: only EOS "
     "candidates among the K best finish (as in fairseq and the library); ranked lower, they "
     "would not have been in the beam."),
    (dict(lp_alive=True), "the alive scores were divided by the length penalty: alive "
     "hypotheses all have length t, so the penalty only ranks finished ones; the beam keeps "
     "plain log P, which the next step adds to."),
    (dict(penalty="none"), "the finished scores are plain log P: divide by the length penalty "
     "lp(t) = ((5 + t) / 6)^α, or short hypotheses always win."),
    (dict(penalty="times"), "the finished scores were multiplied by the length penalty: "
     "divide, score = log P / lp(t)."),
    (dict(penalty="length"), "the length penalty is GNMT's ((5 + |Y|) / 6)^α, not |Y|^α."),
    (dict(lp_length=-1), "the length penalty counts the EOS: |Y| = t at step t, not t − 1."),
    (dict(add_prefix=False), "a candidate's score is the log-probability of the whole "
     "hypothesis: the prefix's alive score plus the token's log-probability."),
    (dict(swap_index=True), "beams and tokens are mixed up: in the flattened (K, V) scores, "
     "index i is beam i // V and token i % V."),
    (dict(per_beam=True), "the candidates are the 2K best of all K·V, compared across beams, "
     "not the 2 best of each beam."),
]


def log_softmax(z: Any) -> Any:
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


# ----------------------------------------------------------------------------- a step

def _call(learner: Learner, alive: Any, log_probs: Any, t: int, alpha: float) -> tuple:
    """The learner's step, its answer checked for form: ((beams, tokens, scores), finished)
    as arrays and a list of (beam, score)."""
    K, V = log_probs.shape
    shown = f"beam_step(alive_scores ({K},), log_probs ({K}, {V}), {EOS}, {t}, {alpha})"
    out = learner.call("beam_step", alive.copy(), log_probs.copy(), EOS, t, alpha, shown=shown)
    try:
        (beams, tokens, scores), finished = out
        beams, tokens = np.asarray(beams), np.asarray(tokens)
        scores = np.asarray(scores, dtype=float)
        finished = [(int(b), float(s)) for b, s in finished]
    except (TypeError, ValueError):
        raise Failed(f"{shown} returned {type(out).__name__}, not ((beams, tokens, scores), "
                     "finished): three arrays for the new beam and a list of (beam, score) "
                     "pairs.") from None
    if not (beams.ndim == tokens.ndim == scores.ndim == 1
            and len(beams) == len(tokens) == len(scores)):
        raise Failed(f"the new beam's beams, tokens and scores have shapes {beams.shape}, "
                     f"{tokens.shape} and {scores.shape}: give one entry per hypothesis.")
    if len(beams) and (beams.dtype.kind not in "iu" or tokens.dtype.kind not in "iu"):
        raise Failed(f"beams and tokens must be integer arrays, got {beams.dtype} and "
                     f"{tokens.dtype}.")
    return (beams, tokens, scores), finished


def _same(got: tuple, expected: tuple) -> str | None:
    """What differs between two answers of a step, in words; None if nothing does. Where the
    expected score is −∞ (a beam with no prefix yet) any beam and token will do."""
    (b, k, s), fin = got
    (eb, ek, es), efin = expected
    finite = np.isfinite(es)
    if not (b.shape == eb.shape and k.shape == ek.shape and s.shape == es.shape
            and np.array_equal(b[finite], eb[finite]) and np.array_equal(k[finite], ek[finite])
            and np.array_equal(s[~finite], es[~finite]) and close(s[finite], es[finite])):
        return (f"the new beam is wrong: expected {_beam(eb, ek, es)}, got {_beam(b, k, s)} "
                "(beam, token, log P; best first).")
    if len(fin) != len(efin) or any(x[0] != y[0] for x, y in zip(fin, efin, strict=False)) or \
            not close([x[1] for x in fin], [y[1] for y in efin]):
        return (f"the finished hypotheses are wrong: expected {_finished(efin)}, got "
                f"{_finished(fin)} (beam, log P / lp).")
    return None


def _beam(beams: Any, tokens: Any, scores: Any) -> str:
    return ", ".join(f"({b}, {k}, {s:.4g})" for b, k, s in zip(beams, tokens, scores,
                                                               strict=True))


def _finished(finished: list) -> str:
    return "[" + ", ".join(f"({b}, {s:.4g})" for b, s in finished) + "]"


def _recognise(got: tuple, alive: Any, log_probs: Any, t: int, alpha: float) -> str | None:
    for flags, hint in MISTAKES:
        if _same(got, reference_step(alive, log_probs, EOS, t, alpha, **flags)) is None:
            return hint
    return None


def _eos_ranks(alive: Any, log_probs: Any) -> list[int]:
    """Where the EOS candidates stand among the 2K best (0 = best)."""
    K, V = log_probs.shape
    best = np.argsort(-(alive[:, None] + log_probs).reshape(-1), kind="stable")[:2 * K]
    return [r for r, i in enumerate(best) if i % V == EOS]


def _step_case(K: int, t: int, eos_boost: float, wanted: Callable[[list[int], int], bool]):
    """Scores drawn (from the case's seed) until the EOS candidates stand as ``wanted``."""
    def run(learner: Learner, seed: int) -> None:
        g = np.random.default_rng(seed)
        for _ in range(10_000):
            logits = 2.0 * g.standard_normal((K, VOCAB))
            logits[:, EOS] += eos_boost
            log_probs = log_softmax(logits)
            if t == 1:  # the first step: one prefix, [BOS], in beam 0
                alive = np.full(K, -np.inf)
                alive[0] = 0.0
            else:
                alive = -np.sort(g.uniform(0.5, 3.0, K)) * (t - 1)
            if wanted(_eos_ranks(alive, log_probs), K):
                break
        alpha = 0.6
        expected = reference_step(alive, log_probs, EOS, t, alpha)
        got = _call(learner, alive, log_probs, t, alpha)
        problem = _same(got, expected)
        if problem:
            raise Failed(problem, _recognise(got, alive, log_probs, t, alpha))
    return run


# ----------------------------------------------------------------------------- a search

def search(step: Callable, model: Transformer, src: Any, K: int, alpha: float,
           limit: int) -> tuple[list[int], float]:
    """Beam search for one sentence ``src`` (1, S) built from ``step``, with the rules of
    ``translation.decode.beam_search``: stop once K hypotheses finished, or once no alive one
    can beat the best finished, or at ``limit`` tokens; the best finished by log P / lp (the
    best alive, scored with lp(limit), if none finished). Returns it without BOS and EOS, and
    its score."""
    src_mask = model.source_mask(src)                                    # (1, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (1, S, C)
    memory, src_mask = Tensor(memory.data.repeat(K, axis=0)), src_mask.repeat(K, axis=0)
    alive = np.full(K, -np.inf)
    alive[0] = 0.0                                                       # beam 0: [BOS]
    prefixes: list[list[int]] = [[] for _ in range(K)]
    best, best_score, n_finished = None, -np.inf, 0
    for t in range(1, limit + 1):
        ids = np.array([[BOS, *p] for p in prefixes])                    # (K, t)
        logits = model.decode(ids, memory, src_mask, model.new_cache()).data[:, -1]  # (K, V)
        (beams, tokens, scores), finished = step(alive, log_softmax(logits), EOS, t, alpha)
        n_finished += len(finished)
        for beam, score in finished:  # best first
            if score > best_score:
                best, best_score = prefixes[beam], score
        prefixes = [prefixes[b] + [int(k)] for b, k in zip(beams, tokens, strict=True)]
        alive = np.asarray(scores, dtype=float)
        if t == limit:
            if best is None:
                best, best_score = prefixes[0], alive[0] / length_penalty(limit, alpha)
            break
        bound = alive[0] / max(length_penalty(t + 1, alpha), length_penalty(limit, alpha))
        if n_finished >= K or best_score >= bound:
            break
    return best, float(best_score)


def search_model(seed: int) -> Transformer:
    """A tiny Transformer (vocabulary 13: 0 padding, 1 BOS, 2 EOS) leaning towards EOS, so
    that hypotheses finish at different lengths: the last layer norm's bias points along the
    EOS row of the tied output embedding."""
    model = tiny_model(seed, vocab=VOCAB)
    eos_row = model.tgt_embed.weight.data[EOS]
    model.decoder.layers[-1].ff_residual.norm.bias.data[...] = 1.5 * eos_row / np.linalg.norm(
        eos_row)
    return model


def search_sources(seed: int) -> Any:
    """Four source sentences (4, 6), padded with 0."""
    g = np.random.default_rng(seed)
    src = g.integers(3, VOCAB, size=(4, 6))
    for row, length in enumerate((6, 4, 5, 3)):
        src[row, length:] = 0
    return src


K_SEARCH, ALPHA_SEARCH, LIMIT_SEARCH = 3, 0.6, 8


def _search_case(learner: Learner, seed: int) -> None:
    model, src = search_model(seed), search_sources(seed)

    def step(alive, log_probs, eos_id, t, alpha):
        (beams, tokens, scores), finished = _call(learner, alive, log_probs, t, alpha)
        if len(beams) != K_SEARCH:
            raise Failed(f"at step {t} the new beam has {len(beams)} hypotheses, expected "
                         f"K = {K_SEARCH}.", MISTAKES[0][1] if len(beams) < K_SEARCH else None)
        return (beams, tokens, scores), finished

    for i in range(src.shape[0]):
        row = src[i:i + 1]
        hyp, score = search(reference_step, model, row, K_SEARCH, ALPHA_SEARCH, LIMIT_SEARCH)
        got_hyp, got_score = search(step, model, row, K_SEARCH, ALPHA_SEARCH, LIMIT_SEARCH)
        if got_hyp != hyp or not close(got_score, score):
            raise Failed(f"sentence {i}: the search built from your beam_step ends with "
                         f"{got_hyp} (score {got_score:.6g}), beam_search with {hyp} (score "
                         f"{score:.6g}).", "every step passed alone: does beam_step keep "
                         "state between calls, or change the arrays it is given?")


CASES = (
    TaskCase("the first step: one prefix, in beam 0",
             "K 3, V 13, EOS 2, t 1: alive_scores (0, −∞, −∞)",
             _step_case(3, 1, 0.0, lambda ranks, K: not ranks)),
    TaskCase("an EOS among the K best",
             "K 3, V 13, t 4, α 0.6: EOS candidates among the K best, none below",
             _step_case(3, 4, 2.0, lambda ranks, K: any(0 < r < K for r in ranks)
                        and not any(r >= K for r in ranks))),
    TaskCase("an EOS just below the K best",
             "K 3, V 13, t 5, α 0.6: EOS candidates ranked K + 1 to 2K only",
             _step_case(3, 5, 2.0, lambda ranks, K: ranks and min(ranks) >= K)),
    TaskCase("EOS the best of several beams",
             "K 4, V 13, t 3, α 0.6: at least two of the 4 best end in EOS",
             _step_case(4, 3, 4.0, lambda ranks, K: sum(r < K for r in ranks) >= 2)),
    TaskCase("a whole search on a tiny Transformer",
             f"4 sentences, K {K_SEARCH}, α {ALPHA_SEARCH}, at most {LIMIT_SEARCH} tokens: "
             "hypotheses and scores against beam_search's", _search_case),
)

TASK = AlgorithmTask(
    name="beam_step",
    class_name="beam_step",
    functions=("beam_step",),
    summary="one step of beam search: 2K best, finished, length penalty (§6.1)",
    cases=CASES,
    verdict="every step is the library's, and a whole search on a tiny Transformer finds "
            "beam_search's hypotheses and scores",
)
