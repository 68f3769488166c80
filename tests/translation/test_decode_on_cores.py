"""Decoding a large batch in shares of sentences, one share per core, gives what decoding the
whole batch at once gives: the same tokens and scores for every sentence, in the batch's order.

``MIN_SHARE`` set above the batch size makes the whole batch one share on one core; the
default splits a batch of 40 sentences into one share per worker thread. The model is in
float64: a product over fewer rows may round its last bit differently (BLAS treats the rows
past its kernel's block size apart), which float64 keeps far below any gap between scores.
"""

import multiprocessing
import os
import time

import numpy as np
import pytest

import minitransformer
from minitransformer.functional import _blocks
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation import _processes, decode
from minitransformer.translation.decode import beam_search, greedy_decode

BOS = 1
GREEDY_EOS, BEAM_EOS = (6, 8), (3, 10)  # ids the seeded tiny model ends at many lengths


def sources(n: int = 40, width: int = 9, vocab_size: int = 13) -> np.ndarray:
    """n padded sources of lengths 1..width, sorted by length as the translator sorts them."""
    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(1, width + 1, size=n))
    ids = rng.integers(3, vocab_size, size=(n, width))
    ids[np.arange(width)[None, :] >= lengths[:, None]] = 0                 # padding
    return ids


@pytest.fixture
def model():
    with minitransformer.default_dtype("float64"):
        minitransformer.manual_seed(0)
        return Transformer(TransformerConfig.named("tiny", 13, p_dropout=0.0))


@pytest.fixture
def one_share(monkeypatch):
    """A context in which every batch is decoded as one share."""
    def disable():
        monkeypatch.setattr(decode, "MIN_SHARE", 10**9)
    return disable


@pytest.mark.skipif(_blocks.WORKERS < 2, reason="needs two cores")
def test_a_large_batch_is_split_across_the_workers(model, monkeypatch):
    seen = []
    original = decode._greedy
    monkeypatch.setattr(decode, "_greedy",
                        lambda model, src, *args: seen.append(src.shape[0]) or
                        original(model, src, *args))
    greedy_decode(model, sources(40), BOS, 2, max_len=6)
    assert len(seen) == min(_blocks.WORKERS, 40 // decode.MIN_SHARE) and sum(seen) == 40
    seen.clear()
    greedy_decode(model, sources(2 * decode.MIN_SHARE - 1), BOS, 2, max_len=6)
    assert seen == [2 * decode.MIN_SHARE - 1]


@pytest.mark.parametrize("eos_id", GREEDY_EOS)
def test_greedy_on_the_cores_is_greedy_on_one(device, model, one_share, eos_id):
    src = sources()
    shared = greedy_decode(model, src, BOS, eos_id, max_len=15)
    assert len(shared) == len(src) and len({len(h) for h in shared}) > 1
    one_share()
    assert greedy_decode(model, src, BOS, eos_id, max_len=15) == shared


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("eos_id", BEAM_EOS)
def test_beam_search_on_the_cores_is_beam_search_on_one(device, model, one_share, eos_id,
                                                         use_cache):
    src = sources()
    hyps, scores = beam_search(model, src, BOS, eos_id, 4, max_len=12, return_scores=True,
                               use_cache=use_cache)
    assert len(hyps) == len(src) and len({len(h) for h in hyps}) > 1
    one_share()
    hyps_one, scores_one = beam_search(model, src, BOS, eos_id, 4, max_len=12,
                                       return_scores=True, use_cache=use_cache)
    assert hyps_one == hyps
    assert scores_one == pytest.approx(scores, rel=1e-12)


def test_an_error_in_a_share_reaches_the_caller(model, monkeypatch):
    def broken(model, src, *args):
        raise RuntimeError(f"share of {src.shape[0]} sentences failed")
    monkeypatch.setattr(decode, "_beam_search", broken)
    with pytest.raises(RuntimeError, match="sentences failed"):
        beam_search(model, sources(), BOS, 2)


def test_blocks_inside_a_share_run_on_its_own_thread():
    """A task of the pool that itself cuts work into blocks runs them in turn: waiting for
    blocks queued behind the tasks that occupy every worker would never end."""
    def task(i):
        seen = []  # one row of BLOCK_BYTES a block: 100 blocks
        _blocks.for_blocks(seen.append, 100, _blocks.BLOCK_BYTES, np)
        return i, len(seen)
    tasks = list(range(2 * _blocks.WORKERS))
    assert _blocks.on_workers(task, tasks) == [(i, 100) for i in tasks]


# ------------------------------------------------------------- shares on worker processes

@pytest.fixture
def processes(monkeypatch):
    """Shares on worker processes (``_processes.py``), started and ready before the test
    decodes a batch of 40 (without ready workers a search takes threads). Yields the list of
    searches sent to a worker so far."""
    n_shares = min(_blocks.WORKERS, 40 // decode.MIN_SHARE)
    if n_shares < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(_processes, "_failed", False)
    _processes.set_decode_processes(True)
    deadline = time.monotonic() + 120
    while _processes._reserve(n_shares) is None:
        assert time.monotonic() < deadline, "the worker processes did not start in 120 s"
        time.sleep(0.05)
    _processes._lock.release()
    sent = []  # each share a worker was asked to search
    original = _processes._Worker.ask
    def ask(worker, header, *arrays):
        if "search" in header:
            sent.append(header["search"])
        return original(worker, header, *arrays)
    monkeypatch.setattr(_processes._Worker, "ask", ask)
    yield sent
    _processes.set_decode_processes(False)
    _processes.shutdown(wait=0)  # the next test starts its own


def test_shares_on_worker_processes_are_those_on_threads(model, processes):
    """The same shares, code, weights, kernels and weight layout: the same tokens, the
    scores to rounding (a kept copy of Wᵀ made at another moment may round a product's last
    bit otherwise, as between the threads' shares)."""
    src = sources()
    runs = {}
    for way in ("processes", "threads"):
        if way == "threads":
            _processes.set_decode_processes(False)
        runs[way] = [greedy_decode(model, src, np.int64(BOS), GREEDY_EOS[0], max_len=15),
                     greedy_decode(model, src, BOS, GREEDY_EOS[1], max_len=15, n_best=1),
                     beam_search(model, src, BOS, BEAM_EOS[0], 4, max_len=12,
                                 return_scores=True),
                     beam_search(model, src, BOS, BEAM_EOS[1], 4, max_len=12, n_best=3)]
        if way == "processes":  # every search sent a share to every worker
            assert len(processes) == 4 * (min(_blocks.WORKERS, 5) - 1)
    (greedy, greedy_n_best, (hyps, scores), n_best), threads = runs.values()
    assert greedy == threads[0] and hyps == threads[2][0]
    assert scores == pytest.approx(threads[2][1], rel=1e-12)  # float64: to rounding at most
    for found, expected in ((greedy_n_best, threads[1]), (n_best, threads[3])):
        assert [[h.tokens for h in hs] for hs in found] == [[h.tokens for h in hs]
                                                            for hs in expected]
        assert [h.score for hs in found for h in hs] == pytest.approx(
            [h.score for hs in expected for h in hs], rel=1e-12)
    assert isinstance(greedy_n_best[0][0], decode.Hypothesis) and len(n_best[0]) == 3
    assert len({len(h) for h in runs["processes"][0]}) > 1


def test_a_worker_is_given_weights_changed_in_place(model, processes):
    src = sources()
    before = greedy_decode(model, src, BOS, GREEDY_EOS[0], max_len=15)
    weight = model.decoder.layers[0].feed_forward.w_1.weight
    weight.data[...] = 1.5 * weight.data        # in place: no version counted
    after = greedy_decode(model, src, BOS, GREEDY_EOS[0], max_len=15)
    _processes.set_decode_processes(False)
    assert after == greedy_decode(model, src, BOS, GREEDY_EOS[0], max_len=15) != before


def test_a_worker_that_died_leaves_the_shares_to_threads(model, processes):
    src = sources()
    for worker in _processes._workers:
        worker.process.kill()
        worker.process.wait()
    with pytest.warns(RuntimeWarning, match="searches use threads from now on"):
        found = beam_search(model, src, BOS, BEAM_EOS[0], 4, max_len=12)
    assert _processes._workers == [] and _processes._reserve(2) is None
    assert beam_search(model, src, BOS, BEAM_EOS[0], 4, max_len=12) == found
    _processes.set_decode_processes(False)
    assert beam_search(model, src, BOS, BEAM_EOS[0], 4, max_len=12) == found


def test_switched_off_the_shares_stay_on_threads(model, processes):
    _processes.set_decode_processes(False)
    greedy_decode(model, sources(), BOS, GREEDY_EOS[0], max_len=6)
    assert processes == []  # no share went to a worker
    with pytest.raises(TypeError, match="True or False"):
        _processes.set_decode_processes("yes")


def test_a_subclass_of_the_transformer_decodes_on_threads(processes):
    class Constrained(Transformer):  # might decode otherwise: a worker builds a Transformer
        pass
    with minitransformer.default_dtype("float64"):
        minitransformer.manual_seed(0)
        model = Constrained(TransformerConfig.named("tiny", 13, p_dropout=0.0))
    greedy_decode(model, sources(), BOS, GREEDY_EOS[0], max_len=6)
    assert processes == []


def test_an_answer_to_another_request_is_refused(model, processes):
    """Each answer names its request: one left unread (by an interrupted search) could
    otherwise be taken for the next search's."""
    greedy_decode(model, sources(), BOS, GREEDY_EOS[0], max_len=6)  # the weights are there
    worker = _processes._workers[0]
    src, limits = sources(8), np.full(8, 4)
    header = _processes._search_header(model, "greedy", [BOS, GREEDY_EOS[0], True, False, None])
    first = worker.ask(header, src, limits)
    worker.ask(header, src, limits)
    with pytest.raises(RuntimeError, match=f"answered request {first} where {first + 1}"):
        worker.answer(first + 1)


def _workers_in_child() -> tuple:
    return len(_processes._workers), _processes._lock.locked(), _processes._sent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_share_the_parents_workers(model, processes):
    greedy_decode(model, sources(), BOS, GREEDY_EOS[0], max_len=6)
    assert _processes._workers
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_workers_in_child) == (0, False, None)


def test_after_a_failure_switching_on_again_tries_again(model, processes):
    for worker in _processes._workers:
        worker.process.kill()
        worker.process.wait()
    with pytest.warns(RuntimeWarning):
        greedy_decode(model, sources(), BOS, GREEDY_EOS[0], max_len=6)
    assert _processes._reserve(2) is None
    _processes.set_decode_processes(True)
    deadline = time.monotonic() + 120
    while _processes._reserve(2) is None:
        assert time.monotonic() < deadline, "no new worker started in 120 s"
        time.sleep(0.05)
    _processes._lock.release()
