"""Beam search (§6.1) against greedy decoding and against brute-force enumeration.

An untrained model is enough: its random logits still define a distribution over sequences,
and beam search must find that distribution's best sequences exactly as an exhaustive search
would, whatever the device.
"""

import itertools
import re
import threading

import numpy as np
import pytest

import minitransformer
from minitransformer import backend
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation.decode import beam_search, gnmt_length_penalty, greedy_decode

PAD, BOS = 0, 1
SOURCES = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0], [5, 5, 5, 5, 0]])  # padded batch


def make_model(vocab_size=11):
    minitransformer.manual_seed(0)
    return Transformer(TransformerConfig.named("tiny", vocab_size, p_dropout=0.0))


def full_log_probs(model, src, hyps, eos_id=None):
    """log P(hyp + EOS | src) of every hypothesis (log P(hyp | src) without ``eos_id``) with
    the full, uncached decoder, in float64 on the host. ``src`` (1, S); a causal mask only,
    since a generated 0 is a token here, not padding."""
    T = max(len(h) for h in hyps) + 1
    tgt_in = np.array([[BOS, *h] + [BOS] * (T - 1 - len(h)) for h in hyps])       # (N, T)
    with minitransformer.no_grad():
        model.eval()
        src_ids = model._ids(np.repeat(src, len(hyps), axis=0), "source")
        src_mask = model.source_mask(src_ids)
        memory = model.encode(src_ids, src_mask)
        ids = model._ids(tgt_in, "target")
        xp = backend.get_array_module(ids.data)
        causal = xp.tril(xp.ones((T, T), dtype=bool))[None, None]                 # (1, 1, T, T)
        x = model._embed(ids, model.tgt_embed, model.tgt_positions)
        logits = model.project(model.decoder(x, memory, causal, src_mask))        # (N, T, V)
    z = backend.to_numpy(logits.data).astype(np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    ends = [] if eos_id is None else [eos_id]
    return np.array([sum(log_p[n, i, y] for i, y in enumerate([*h, *ends]))
                     for n, h in enumerate(hyps)])


@pytest.mark.parametrize("eos_id", [5, 8])
def test_beam_of_one_is_greedy(device, eos_id):
    model = make_model()
    for max_len in (None, 9):
        assert (beam_search(model, SOURCES, BOS, eos_id, beam_size=1, max_len=max_len)
                == greedy_decode(model, SOURCES, BOS, eos_id, max_len=max_len))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_wide_beam_finds_the_best_sequence_of_brute_force(device, alpha):
    V, eos_id, max_len = 6, 2, 4
    model = make_model(V)
    sources = np.array([[3, 4, 5], [5, 3, PAD]])
    # every hypothesis ending in EOS within max_len tokens (EOS included)
    hyps = [list(h) for n in range(max_len) for h in itertools.product(
        [v for v in range(V) if v != eos_id], repeat=n)]
    # A beam wider than the candidates of the last step never prunes: 5³ prefixes × 6 tokens.
    K = (V - 1) ** (max_len - 1) * V
    found, scores = beam_search(model, sources, BOS, eos_id, beam_size=K,
                                length_penalty=alpha, max_len=max_len, return_scores=True)
    for b, src in enumerate(sources):
        normalized = (full_log_probs(model, src[None], hyps, eos_id)
                      / np.array([gnmt_length_penalty(len(h) + 1, alpha) for h in hyps]))
        order = np.argsort(-normalized)
        best, runner_up = normalized[order[0]], normalized[order[1]]
        assert scores[b] == pytest.approx(best, abs=1e-4)
        if best - runner_up > 1e-4:  # a near tie may go either way in float32
            assert found[b] == hyps[order[0]]


def test_beam_is_at_least_as_probable_as_greedy(device):
    model = make_model()
    compared = 0
    for eos_id in (4, 5, 6, 8, 9):
        greedy, greedy_scores = beam_search(model, SOURCES, BOS, eos_id, beam_size=1,
                                            length_penalty=0.0, max_len=12, return_scores=True)
        beam, beam_scores = beam_search(model, SOURCES, BOS, eos_id, beam_size=4,
                                        length_penalty=0.0, max_len=12, return_scores=True)
        for b, hyp in enumerate(greedy):
            if len(hyp) < 12:  # greedy finished: both scores are log P(Y + EOS)
                assert beam_scores[b] >= greedy_scores[b] - 1e-5
                compared += 1
        # with α = 0 the score is log P itself
        log_p = full_log_probs(model, SOURCES[:1], [beam[0]], eos_id)[0]
        if len(beam[0]) < 12:
            assert beam_scores[0] == pytest.approx(log_p, abs=1e-4)
    assert compared >= 3


def test_result_does_not_depend_on_the_batch(device):
    model = make_model()
    together, scores = beam_search(model, SOURCES, BOS, 5, max_len=15, return_scores=True)
    for b in range(len(SOURCES)):
        length = int((SOURCES[b] != PAD).sum())
        alone, score = beam_search(model, SOURCES[b:b + 1, :length], BOS, 5, max_len=15,
                                   return_scores=True)
        assert alone == [together[b]]
        assert score[0] == pytest.approx(scores[b], abs=1e-4)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_default_limit_is_each_sentences_own_length_plus_50(device, beam_size):
    """§6.1's "input length + 50" per sentence: a short sentence batched with a long one
    decodes exactly as it does alone (the batch's padded width is not its length). An
    untrained model rarely ends a sentence, so its outputs run to the limit."""
    model = make_model()
    search = ((lambda src: greedy_decode(model, src, BOS, 2)) if beam_size == 1 else
              (lambda src: beam_search(model, src, BOS, 2, beam_size)))
    short, long = [3, 4], [5] * 30
    alone = search(np.array([short]))
    together = search(np.array([short + [PAD] * 28, long]))
    assert together[0] == alone[0]
    assert len(alone[0]) <= 52 and len(together[1]) <= 80
    assert max(len(alone[0]), len(together[1]) - 28) > 50  # some output ran to its limit


def test_the_default_limit_stays_inside_the_positional_table(device):
    minitransformer.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", 11, p_dropout=0.0, max_len=16))
    source = np.array([[3, 4, 5, 6, 7]])                    # 5 + 50 would pass position 16
    for hyps in (greedy_decode(model, source, BOS, 9), beam_search(model, source, BOS, 9)):
        assert len(hyps[0]) <= 16
    for search in (greedy_decode, beam_search):
        with pytest.raises(ValueError, match="max_len 17 is longer than the model's "
                                             "positional table \\(16 positions\\)"):
            search(model, source, BOS, 9, max_len=17)


def test_generated_ids_are_not_cut_to_the_source_ids_dtype(device):
    """Target ids of a larger, unshared vocabulary from uint8 source ids: none may wrap."""
    minitransformer.manual_seed(0)
    config = TransformerConfig.named("tiny", 11, tgt_vocab_size=300, share_embeddings=False,
                                     tie_output=False, p_dropout=0.0)
    model = Transformer(config)
    for dtype in (np.int64, np.uint8):
        greedy = greedy_decode(model, SOURCES.astype(dtype), BOS, 2, max_len=20)
        beam = beam_search(model, SOURCES.astype(dtype), BOS, 2, max_len=20)
        assert max(max(h) for h in greedy) > 255 and max(max(h) for h in beam) > 255
        if dtype is np.int64:
            expected = greedy, beam
        assert (greedy, beam) == expected


def test_respects_max_len(device):
    model = make_model()
    for max_len in (0, 1, 3):
        for eos_id in (2, 5):
            hyps = beam_search(model, SOURCES, BOS, eos_id, max_len=max_len)
            assert len(hyps) == len(SOURCES)
            assert all(len(h) <= max_len and eos_id not in h for h in hyps)
    assert beam_search(model, SOURCES, BOS, 5, max_len=0, return_scores=True) == (
        [[], [], []], [0.0, 0.0, 0.0])
    # default: source length + 50
    assert max(len(h) for h in beam_search(model, SOURCES[:, :2], BOS, 5)) <= 52


def test_without_a_finished_hypothesis_the_best_alive_one_is_returned():
    model = make_model()
    max_len = 3
    hyps, scores = beam_search(model, SOURCES, BOS, 5, max_len=max_len, return_scores=True)
    unfinished = [b for b, h in enumerate(hyps) if len(h) == max_len]  # no room left for EOS
    assert unfinished
    for b in unfinished:
        log_p = full_log_probs(model, SOURCES[b:b + 1], [hyps[b]])[0]
        assert scores[b] == pytest.approx(log_p / gnmt_length_penalty(max_len, 0.6), abs=1e-4)


def test_stops_early_once_the_result_is_settled():
    model = make_model()
    steps = []
    decode = model.decode
    model.decode = lambda *args, **kwargs: steps.append(1) or decode(*args, **kwargs)
    hyps = beam_search(model, SOURCES, BOS, 8, max_len=50)
    assert hyps == [[], [], []]  # EOS at once is the best for every sentence
    assert len(steps) < 10


def test_model_mode_is_restored():
    model = make_model()
    model.train()
    beam_search(model, SOURCES, BOS, 5, max_len=3)
    assert model.training
    model.eval()
    beam_search(model, SOURCES, BOS, 5, max_len=3)
    assert not model.training


def test_every_modules_own_mode_is_restored():
    """A model training with a frozen part in eval mode keeps it so after decoding."""
    model = make_model()
    model.train()
    model.encoder.eval()
    for search in (greedy_decode, beam_search):
        search(model, SOURCES, BOS, 5, max_len=3)
        assert model.training and model.decoder.training
        assert not any(m.training for m in model.encoder.modules())


def test_searches_on_several_threads_keep_eval_mode_until_the_last_ends():
    """Two searches with one training-mode model at once, on two threads: the first to end
    must not switch dropout back on under the other; the last restores training mode."""
    from minitransformer.translation.decode import _generating

    model = make_model()
    model.train()
    entered, first_ended = threading.Event(), threading.Event()
    seen = {}

    def first():
        with _generating(model):
            entered.set()
            second_entered.wait()
        first_ended.set()

    def second():
        entered.wait()
        with _generating(model):
            second_entered.set()
            first_ended.wait()
            seen["after the first ended"] = [m.training for m in model.modules()]

    second_entered = threading.Event()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not any(seen["after the first ended"])
    assert all(m.training for m in model.modules())


def test_searches_on_two_threads_give_the_eval_tokens():
    model = make_model()
    model.eval()
    expected = [greedy_decode(model, SOURCES, BOS, 5, max_len=12),
                beam_search(model, SOURCES, BOS, 5, max_len=12)]
    model.train()
    start = threading.Barrier(2)
    found: list = [None, None]

    def search(i):
        start.wait()
        found[i] = [greedy_decode(model, SOURCES, BOS, 5, max_len=12),
                    beam_search(model, SOURCES, BOS, 5, max_len=12)]

    threads = [threading.Thread(target=search, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [expected, expected] and model.training


def test_bad_arguments():
    model = make_model()
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, SOURCES, BOS, 5, beam_size=0)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, SOURCES, BOS, 5, max_len=-1)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, SOURCES, BOS, 5, max_len=2.5)


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), "0.6"])
def test_a_length_penalty_that_is_not_a_finite_number_is_refused(alpha):
    """nan gave every hypothesis a nan score, and empty translations, silently."""
    with pytest.raises(ValueError, match=re.escape(f"length_penalty must be a finite number "
                                                   f"(the paper's α = 0.6), got {alpha!r}")):
        beam_search(make_model(), SOURCES, BOS, 5, length_penalty=alpha)


def test_beam_size_takes_numpy_integers_and_refuses_booleans():
    model = make_model()
    assert (beam_search(model, SOURCES, BOS, 5, beam_size=np.int64(2), max_len=3)
            == beam_search(model, SOURCES, BOS, 5, beam_size=2, max_len=3))
    with pytest.raises(ValueError, match="beam_size must be a positive integer, got True"):
        beam_search(model, SOURCES, BOS, 5, beam_size=True)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_special_ids_that_are_not_integer_ids_are_refused(search):
    """bos_id 1.5 was cut to 1, silently."""
    model = make_model()
    with pytest.raises(ValueError, match=re.escape("bos_id must be an integer token id, got 1.5;"
                                                   " take it from the tokenizer")):
        search(model, SOURCES, 1.5, 5, max_len=3)
    with pytest.raises(ValueError, match="eos_id must be an integer token id, got None"):
        search(model, SOURCES, BOS, None, max_len=3)
    with pytest.raises(ValueError, match=re.escape("bos_id 99 is outside the target vocabulary "
                                                   "(ids 0 to")):
        search(model, SOURCES, 99, 5, max_len=3)


def test_length_penalty_is_gnmt():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)
    assert gnmt_length_penalty(10, 0.0) == 1.0


@pytest.mark.parametrize("vocab_size", [7, 640, 1003])
def test_best_continuations_are_the_top_of_a_full_sort(vocab_size, device):
    """The grouped selection (``_best_continuations``) returns exactly the 2K best of all K·V
    scores log P(prefix) + log softmax(logits) of every sentence: checked against a full sort,
    with a vocabulary not divisible into equal groups (1003), beams at -inf (the first step)
    and tied logits; on every device (a GPU selects by a segmented sort, NumPy partitions)."""
    from minitransformer.translation.decode import _best_continuations

    rng = np.random.default_rng(vocab_size)
    A, K = 9, 4
    n_cand = min(2 * K, K * vocab_size)
    logits = (rng.standard_normal((A * K, vocab_size)) * 3).astype(np.float32)
    logits[5, :] = logits[5, 0]                      # one row of equal logits
    logits[6, 10 % vocab_size::3] = logits.max()     # many ties at the row maximum
    alive = np.log(rng.random((A, K))).astype(np.float32)
    alive[0, 1:] = -np.inf                           # first step: only beam 0 may expand
    scores, index, log_norm = (backend.to_numpy(a) for a in _best_continuations(
        backend.to_device(logits, device), backend.to_device(alive, device), n_cand))

    z = logits.astype(np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    full = (alive.astype(np.float64)[:, :, None] + log_p.reshape(A, K, vocab_size)).reshape(A, -1)
    expected = -np.sort(-full, axis=1)[:, :n_cand]
    np.testing.assert_allclose(-np.sort(-scores.astype(np.float64), axis=1), expected,
                               rtol=1e-5, atol=1e-5)
    # each returned index is a distinct continuation, and its score is that continuation's
    assert all(len(set(row)) == n_cand for row in index.tolist())
    np.testing.assert_allclose(scores, full[np.arange(A)[:, None], index], rtol=1e-5, atol=1e-5)
    # and each row's log-softmax normalizer, from which a token's log-probability is read
    lse = z.max(-1) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1))
    np.testing.assert_allclose(log_norm, lse.reshape(A, K), rtol=1e-6, atol=1e-5)
