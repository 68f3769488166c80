"""How many CPU threads the library uses: OMP_NUM_THREADS or the cores the process may run on
by default, ``set_num_threads`` for the worker pool and BLAS together."""

import os
import threading

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.functional import _blocks
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation import decode


def blas_threads() -> set[int]:
    return {lib["num_threads"] for lib in _blocks.blas_controller().info()
            if lib["user_api"] == "blas"}


@pytest.fixture
def restored():
    """Put the worker count and BLAS's threads back as they were after the test."""
    workers, blas = _blocks.WORKERS, min(blas_threads())
    yield
    _blocks.WORKERS = workers
    _blocks.blas_controller().limit(limits=blas, user_api="blas")


@pytest.mark.parametrize("value, workers", [("3", 3), ("12", 12), ("4,2", 4), (" 2 ", 2)])
def test_default_reads_omp_num_threads(monkeypatch, value, workers):
    """12 is above the default's cap, but the user asked for it; "4,2" gives the outer level
    its 4, as OpenMP and PyTorch read it."""
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert _blocks.default_workers() == workers


@pytest.mark.parametrize("value", [None, "", "0", "-3", "two", "²"])
def test_default_without_a_usable_omp_num_threads_is_the_cores_we_may_run_on(monkeypatch,
                                                                             value):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count())
    assert _blocks.default_workers() == max(1, min(cores, _blocks.MAX_DEFAULT_WORKERS))


def test_set_num_threads_sets_the_pool_and_blas(restored):
    mt.set_num_threads(1)
    assert mt.get_num_threads() == 1 and blas_threads() == {1}
    caller = threading.current_thread()
    assert set(_blocks.on_workers(lambda _: threading.current_thread(), [0, 1, 2, 3])) == {caller}

    for n in (2, 3, 2):  # the pool grows and shrinks with the count
        mt.set_num_threads(n)
        assert mt.get_num_threads() == n and blas_threads() == {n}
        barrier = threading.Barrier(n, timeout=10)  # passed only by n tasks at once
        ran_on = _blocks.on_workers(lambda _, barrier=barrier: (barrier.wait(),
                                                                threading.current_thread())[1],
                                    list(range(n)))
        assert len(set(ran_on)) == n and caller in ran_on   # the caller is the last worker
        assert _blocks._pool_workers == n


def test_set_num_threads_on_a_worker_thread_is_refused(restored):
    workers = mt.get_num_threads()
    with pytest.raises(RuntimeError, match="called from one of minitransformer's worker"):
        _blocks.on_workers(lambda n: mt.set_num_threads(n), [1, 1])
    assert mt.get_num_threads() == workers


def test_decoding_uses_one_share_a_thread(restored, monkeypatch):
    with mt.default_dtype("float64"):
        mt.manual_seed(0)
        model = Transformer(TransformerConfig.named("tiny", 13, p_dropout=0.0))
    src = np.random.default_rng(0).integers(3, 13, size=(4 * decode.MIN_SHARE, 5))
    shares = []
    original = decode._greedy
    monkeypatch.setattr(decode, "_greedy", lambda model, src, *args:
                        shares.append(src.shape[0]) or original(model, src, *args))
    for n in (1, 2, 4):
        mt.set_num_threads(n)
        shares.clear()
        decode.greedy_decode(model, src, 1, 2, max_len=3)
        assert shares == [4 * decode.MIN_SHARE // n] * n


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", None])
def test_set_num_threads_refuses_what_is_not_a_positive_integer(restored, bad):
    workers = mt.get_num_threads()
    with pytest.raises(ValueError, match=r"set_num_threads takes a positive integer, got "):
        mt.set_num_threads(bad)
    assert mt.get_num_threads() == workers
