"""CoreSharing (threads.py): a loop of like steps tries the pool and the calling thread alone,
keeps the faster per token, tries again after its period, and computes the same numbers
either way."""

import itertools
import threading

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.functional import _blocks
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.threads import CoreSharing


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_blocks, "SOLO", False)


def run(sharing, seconds_for):
    """One step: the mode the sharing set, and the seconds it is told the step took."""
    sharing.start_step()
    alone = _blocks.SOLO
    sharing.end_step(seconds_for(alone), 1000)
    return alone


@pytest.mark.parametrize("alone_is_faster", [True, False])
def test_a_trial_alternates_and_keeps_the_faster(two_workers, alone_is_faster):
    sharing = CoreSharing(period=1e9, trials=3)
    fast, slow = 0.1, 0.3
    def seconds_for(alone):
        return fast if alone == alone_is_faster else slow
    modes = [run(sharing, seconds_for) for _ in range(1 + 6 + 5)]
    assert modes[0] is False                                   # the warm-up step: the pool
    assert modes[1:7] == [True, False] * 3                     # the trial, alternating
    assert modes[7:] == [alone_is_faster] * 5                  # then the faster, kept
    assert sharing.alone is alone_is_faster
    sharing.close()
    assert _blocks.SOLO is False


def test_per_token_not_per_step(two_workers):
    """Alone takes longer steps here, but for three times the tokens: it is the faster."""
    sharing = CoreSharing(period=1e9, trials=2)
    sharing.start_step()
    sharing.end_step(1.0, 1000)
    for _ in range(4):
        sharing.start_step()
        alone = _blocks.SOLO
        sharing.end_step(0.2 if alone else 0.1, 3000 if alone else 1000)
    assert sharing.alone


def test_tries_again_after_its_period(two_workers, monkeypatch):
    clock = itertools.count(0.0, 1.0)                          # one second a call
    monkeypatch.setattr("minitransformer.threads.time.perf_counter", lambda: next(clock))
    sharing = CoreSharing(period=20.0, trials=1)
    slow_pool = [run(sharing, lambda alone: 0.1 if alone else 0.3) for _ in range(3)]
    assert slow_pool == [False, True, False] and sharing.alone
    kept = [run(sharing, lambda alone: 0.1 if alone else 0.3) for _ in range(8)]
    assert kept == [True] * 8                                  # within the period
    later = [run(sharing, lambda alone: 0.5 if alone else 0.1) for _ in range(20)]
    assert [True, False] in [later[i:i + 2] for i in range(len(later) - 1)]
    assert not sharing.alone                                   # the pool is faster now


def test_one_worker_is_left_alone(monkeypatch):
    monkeypatch.setattr(_blocks, "WORKERS", 1)
    monkeypatch.setattr(_blocks, "SOLO", False)
    sharing = CoreSharing(period=0.0, trials=1)
    assert [run(sharing, lambda alone: 0.1 if alone else 0.3) for _ in range(5)] == [False] * 5


def test_alone_the_caller_takes_every_block_and_the_step_is_the_same(two_workers,
                                                                      monkeypatch):
    def step():
        mt.manual_seed(0)
        with mt.default_dtype("float64"):
            model = Transformer(TransformerConfig.named("tiny", 40))
        rng = np.random.default_rng(0)
        src, tgt = rng.integers(3, 40, (8, 9)), rng.integers(3, 40, (8, 7))
        monkeypatch.setattr(_blocks, "BLOCK_BYTES", 64)      # many blocks per kernel
        loss = F.cross_entropy(model(src, tgt), tgt, label_smoothing=0.1, ignore_index=0)
        loss.backward()
        return loss.item(), [p.grad.copy() for p in model.parameters()]

    threads = set()
    shared_out = _blocks.shared_out

    def watched(task, items):
        # with the pool, the first two blocks of a call wait for each other: two threads then
        # hold one each, however late the pool's thread wakes (else the caller may take all)
        meet = (threading.Barrier(2, timeout=10) if not _blocks.SOLO and len(items) > 1
                else None)
        taken = itertools.count()

        def run(item):
            threads.add(threading.get_ident())
            if meet is not None and next(taken) < 2:
                meet.wait()
            return task(item)
        return shared_out(run, items)
    monkeypatch.setattr(_blocks, "shared_out", watched)
    pooled_loss, pooled_grads = step()
    assert len(threads) == 2
    threads.clear()
    monkeypatch.setattr(_blocks, "SOLO", True)
    alone_loss, alone_grads = step()
    assert threads == {threading.get_ident()}
    assert alone_loss == pooled_loss
    for alone, pooled in zip(alone_grads, pooled_grads, strict=True):
        np.testing.assert_array_equal(alone, pooled)
