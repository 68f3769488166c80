"""n-best lists: beam search's K hypotheses with their scores and per-token log-probabilities.

The lists are checked against what they claim: the order the search ranks by, the best being
what the search returns without ``n_best``, the top of an exhaustive enumeration, and per-token
log-probabilities equal to a teacher-forced pass of the full (uncached) decoder.
"""

import itertools
import math

import numpy as np
import pytest

import minitransformer
from minitransformer import backend
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation.decode import (
    Hypothesis,
    beam_search,
    gnmt_length_penalty,
    greedy_decode,
)

PAD, BOS = 0, 1
SOURCES = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0], [5, 5, 5, 5, 0]])  # padded batch


def make_model(vocab_size=11):
    minitransformer.manual_seed(0)
    return Transformer(TransformerConfig.named("tiny", vocab_size, p_dropout=0.0))


def teacher_forced(model, src, tokens):
    """log P(y_i | y_<i, src) of each of ``tokens`` (EOS included when it ends them), by one
    pass of the full decoder over the whole output, in float64 on the host. ``src`` (S,)."""
    with minitransformer.no_grad():
        model.eval()
        src_ids = model._ids(np.asarray(src)[None], "source")
        src_mask = model.source_mask(src_ids)
        memory = model.encode(src_ids, src_mask)
        ids = model._ids(np.array([[BOS, *tokens[:-1]]]), "target")
        xp = backend.get_array_module(ids.data)
        T = len(tokens)
        causal = xp.tril(xp.ones((T, T), dtype=bool))[None, None]
        x = model._embed(ids, model.tgt_embed, model.tgt_positions)
        logits = model.project(model.decoder(x, memory, causal, src_mask))      # (1, T, V)
    z = backend.to_numpy(logits.data)[0].astype(np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    return log_p[np.arange(T), tokens]


def check_order(hyps):
    """Finished hypotheses first, each group by score, best first."""
    keys = [(not h.finished, -h.score) for h in hyps]
    assert keys == sorted(keys)


@pytest.mark.parametrize("eos_id", [4, 5, 8])
def test_n_best_lists_are_ranked_and_begin_with_the_one_best(device, eos_id):
    model = make_model()
    best, scores = beam_search(model, SOURCES, BOS, eos_id, beam_size=4, max_len=12,
                               return_scores=True)
    lists = beam_search(model, SOURCES, BOS, eos_id, beam_size=4, max_len=12, n_best=4)
    assert len(lists) == len(SOURCES)
    for b, hyps in enumerate(lists):
        assert 1 <= len(hyps) <= 4
        assert all(isinstance(h, Hypothesis) for h in hyps)
        check_order(hyps)
        assert hyps[0].tokens == best[b]
        assert hyps[0].score == pytest.approx(scores[b], abs=1e-6)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)  # distinct outputs
        for h in hyps:
            length = len(h.tokens) + h.finished
            assert len(h.token_log_probs) == length
            assert h.score == pytest.approx(h.log_prob / gnmt_length_penalty(length, 0.6))
            assert h.log_prob == pytest.approx(math.fsum(h.token_log_probs), abs=1e-4)
    # a shorter list is the start of a longer one: the same hypotheses, their numbers to
    # rounding (stopping sooner, the search decodes its last steps with fewer rows, and BLAS
    # may round a product of fewer rows otherwise in the last bit)
    shorter = beam_search(model, SOURCES, BOS, eos_id, beam_size=4, max_len=12, n_best=2)
    for got, hyps in zip(shorter, lists, strict=True):
        assert [(h.tokens, h.finished) for h in got] == [(h.tokens, h.finished)
                                                         for h in hyps[:2]]
        for h, expected in zip(got, hyps, strict=False):
            assert h.token_log_probs == pytest.approx(expected.token_log_probs, rel=1e-5, abs=1e-6)
            assert (h.log_prob, h.score) == pytest.approx((expected.log_prob, expected.score),
                                                          rel=1e-5, abs=1e-6)


def test_per_token_log_probabilities_are_those_of_teacher_forcing(device):
    model = make_model()
    compared = 0
    for eos_id in (4, 5, 8):
        for b, hyps in enumerate(beam_search(model, SOURCES, BOS, eos_id, beam_size=3,
                                             max_len=10, n_best=3)):
            for h in hyps:
                tokens = [*h.tokens, eos_id] if h.finished else h.tokens
                if not tokens:
                    continue
                expected = teacher_forced(model, SOURCES[b], tokens)
                np.testing.assert_allclose(h.token_log_probs, expected, rtol=1e-4, atol=1e-4)
                compared += 1
    assert compared >= 15


def test_greedy_log_probabilities_are_those_of_teacher_forcing_and_of_a_beam_of_one(device):
    model = make_model()
    for eos_id in (4, 8):
        greedy = greedy_decode(model, SOURCES, BOS, eos_id, max_len=9, n_best=1)
        assert [g[0].tokens for g in greedy] == greedy_decode(model, SOURCES, BOS, eos_id,
                                                              max_len=9)
        beam = beam_search(model, SOURCES, BOS, eos_id, beam_size=1, max_len=9, n_best=1)
        for b, ([g], [h]) in enumerate(zip(greedy, beam, strict=True)):
            assert (g.tokens, g.finished) == (h.tokens, h.finished)
            assert g.score == pytest.approx(h.score, abs=1e-4)
            np.testing.assert_allclose(g.token_log_probs, h.token_log_probs, atol=1e-4)
            tokens = [*g.tokens, eos_id] if g.finished else g.tokens
            np.testing.assert_allclose(g.token_log_probs,
                                       teacher_forced(model, SOURCES[b], tokens), atol=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_n_best_is_the_top_of_an_exhaustive_enumeration(alpha):
    """A beam wider than every candidate never prunes, so its n-best list is the top of all
    hypotheses that end in EOS within the limit."""
    V, eos_id, max_len, N = 6, 2, 4, 5
    model = make_model(V)
    src = np.array([3, 4, 5])
    hyps = [list(h) for n in range(max_len) for h in itertools.product(
        [v for v in range(V) if v != eos_id], repeat=n)]
    K = (V - 1) ** (max_len - 1) * V
    [found] = beam_search(model, src[None], BOS, eos_id, beam_size=K, length_penalty=alpha,
                          max_len=max_len, n_best=N)
    scores = np.array([teacher_forced(model, src, [*h, eos_id]).sum()
                       / gnmt_length_penalty(len(h) + 1, alpha) for h in hyps])
    order = np.argsort(-scores)
    assert [h.finished for h in found] == [True] * N
    np.testing.assert_allclose([h.score for h in found], scores[order[:N]], atol=1e-4)
    for i, h in enumerate(found):
        if np.all(np.abs(np.delete(scores, order[i]) - scores[order[i]]) > 1e-4):
            assert h.tokens == hyps[order[i]]


def test_hypotheses_cut_at_the_limit_come_after_the_finished_ones():
    model = make_model()
    max_len = 3
    for eos_id in (4, 5, 8, 9):
        for b, hyps in enumerate(beam_search(model, SOURCES, BOS, eos_id, beam_size=4,
                                             max_len=max_len, n_best=4)):
            check_order(hyps)
            assert len(hyps) == 4  # fewer than 4 finished: the cut ones fill the list
            for h in hyps:
                if not h.finished:
                    assert len(h.tokens) == max_len
                    assert h.score == pytest.approx(
                        teacher_forced(model, SOURCES[b], h.tokens).sum()
                        / gnmt_length_penalty(max_len, 0.6), abs=1e-4)


def test_the_stopping_bound_waits_for_the_n_th_best():
    """With n_best = N the search stops once no alive prefix can beat the N-th best finished
    hypothesis: the list is the one a search without the bound finds."""
    model = make_model()
    for eos_id in (4, 5, 8):
        bounded = beam_search(model, SOURCES, BOS, eos_id, beam_size=4, max_len=8, n_best=3)
        # n_best = K: the bound would wait for K finished, which stop a sentence anyway
        to_the_limit = [beam_search(model, SOURCES[b:b + 1], BOS, eos_id, beam_size=4,
                                    max_len=8, n_best=4)[0][:3] for b in range(len(SOURCES))]
        for got, full in zip(bounded, to_the_limit, strict=True):
            assert [h.tokens for h in got if h.finished] == [
                h.tokens for h in full if h.finished][:len([h for h in got if h.finished])]


def test_bad_n_best_values_are_refused():
    model = make_model()
    with pytest.raises(ValueError, match=r"n_best must be an integer from 1 to the beam size "
                                         r"\(4\), got 5"):
        beam_search(model, SOURCES, BOS, 5, beam_size=4, n_best=5)
    with pytest.raises(ValueError, match="got 0"):
        beam_search(model, SOURCES, BOS, 5, beam_size=4, n_best=0)
    with pytest.raises(ValueError, match="give n_best or return_scores, not both"):
        beam_search(model, SOURCES, BOS, 5, beam_size=4, n_best=2, return_scores=True)
    with pytest.raises(ValueError, match="greedy decoding keeps one hypothesis"):
        greedy_decode(model, SOURCES, BOS, 5, n_best=2)


def test_an_empty_limit_gives_one_empty_unfinished_hypothesis():
    model = make_model()
    assert beam_search(model, SOURCES, BOS, 5, max_len=0, n_best=2) == [
        [Hypothesis([], [], 0.0, 0.0, False)]] * 3
    assert greedy_decode(model, SOURCES, BOS, 5, max_len=0, n_best=1) == [
        [Hypothesis([], [], 0.0, 0.0, False)]] * 3
