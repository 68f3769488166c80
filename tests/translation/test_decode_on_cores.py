"""Decoding a large batch in shares of sentences, one share per core, gives what decoding the
whole batch at once gives: the same tokens and scores for every sentence, in the batch's order.

``MIN_SHARE`` set above the batch size makes the whole batch one share on one core; the
default splits a batch of 40 sentences into one share per worker thread. The model is in
float64: a product over fewer rows may round its last bit differently (BLAS treats the rows
past its kernel's block size apart), which float64 keeps far below any gap between scores.
"""

import numpy as np
import pytest

import minitransformer
from minitransformer.functional import _blocks
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation import decode
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
