"""How many CPU threads minitransformer uses: ``get_num_threads`` and ``set_num_threads``.

On the CPU the library works on its pool of worker threads: blocks of rows of the fused
layers, the shares of a decoding batch, and blocks of every large matrix product, each a
single-threaded BLAS call (``functional/_blocks.py``, ``functional/_products.py``). BLAS's own
threads are kept out of the library's work, which keeps a machine shared with other work from
stalling it. By default the pool has one thread per core the process may run on (its CPU
affinity), at most 8, or ``OMP_NUM_THREADS`` when that is set, as PyTorch reads it. To choose
another count, set ``OMP_NUM_THREADS`` before starting Python, or call ``set_num_threads(n)``
before the work starts: it sets the pool and BLAS's count for NumPy code outside the library.

    import minitransformer as mt
    mt.set_num_threads(2)
    mt.get_num_threads()         # 2

A search on several cores decodes its first share of sentences on the calling thread and the
others on worker processes of their own, where two shares do not take turns at Python's lock
(``translation/_processes.py``; ``minitransformer.translation.set_decode_processes(False)``
keeps them on the pool's threads). On the GPU none of this matters: the work runs in CUDA
kernels.
"""

from __future__ import annotations

import operator
import statistics
import time
from typing import Any

from .functional import _blocks


def get_num_threads() -> int:
    """The number of worker threads the CPU layers and decoding use."""
    return _blocks.WORKERS


def set_num_threads(n: int) -> None:
    """Use ``n`` threads on the CPU from now on: ``n`` worker threads for the library's work,
    and ``n`` BLAS threads for NumPy's own products outside it (threadpoolctl). Call it before
    the work starts, from the thread that starts it (a worker thread of the pool is refused)."""
    try:
        threads = operator.index(n)
    except TypeError:
        threads = 0
    if threads < 1 or isinstance(n, bool):
        raise ValueError(f"set_num_threads takes a positive integer, got {n!r}; "
                         "give the number of cores to use, 1 or more.")
    _blocks.set_threads(threads)


class CoreSharing:
    """For a loop of like steps (training): the pool's threads, or the calling thread alone,
    whichever is faster per token on the machine as it is now.

    When other processes keep the cores busy, the pool's threads are not always running, and a
    thread that the system stops while it holds Python's lock (the GIL) stops the others until
    it runs again. Beside a process that kept both cores of the Xeon busy, a step of the tiny
    model took 197 ms with two threads against 165 ms with one (alone: 90 against 97 ms). So
    every ``period`` seconds the loop times ``trials`` steps with each, alternating, and keeps
    the faster until the next trial; with one worker it does nothing. The blocks are the same
    either way (``_blocks.SOLO``), so the numbers a step computes do not depend on the choice.

        sharing = CoreSharing()
        for batch in batches:
            sharing.start_step()
            ...                                   # one step
            sharing.end_step(seconds, tokens)
        sharing.close()                           # the pool again, for what follows
    """

    def __init__(self, period: float = 30.0, trials: int = 3) -> None:
        self.period, self.trials = period, trials
        self.plan: list[bool] = []                # SOLO for the steps of the next trial
        self.times: dict[bool, list[float]] = {True: [], False: []}
        self.next_trial = 0.0                     # the first trial starts at the first step
        self.warm = False                         # the first step (allocations) is not timed
        self.trying: bool | None = None
        self.blas: Any = None                     # the one-thread BLAS section while alone

    def start_step(self) -> None:
        """Set the pool or the calling thread alone for the step about to run."""
        if _blocks.WORKERS == 1:
            return
        if self.warm and not self.plan and time.perf_counter() >= self.next_trial:
            self.plan = [True, False] * self.trials
            self.times = {True: [], False: []}
        self.trying = self.plan.pop(0) if self.plan else None
        if self.trying is not None:
            self._set(self.trying)

    def end_step(self, seconds: float, tokens: int) -> None:
        """Note how long the step took for how many tokens; after a trial's last step, keep
        the faster way."""
        if not self.warm:
            self.warm = True
            return
        if self.trying is None:
            return
        self.times[self.trying].append(seconds / max(1, tokens))
        if not self.plan:
            self._set(statistics.median(self.times[True])
                      < statistics.median(self.times[False]))
            self.next_trial = time.perf_counter() + self.period

    def _set(self, alone: bool) -> None:
        """The calling thread alone, with BLAS held to one thread for as long (each product
        would otherwise set BLAS's count down and up again, which wakes BLAS's threads), or
        the pool, with BLAS's count as it was."""
        if alone and not _blocks.SOLO:
            self.blas = _blocks._single_threaded_blas()
            self.blas.__enter__()
        elif not alone and _blocks.SOLO and self.blas is not None:
            self.blas.__exit__(None, None, None)
            self.blas = None
        _blocks.SOLO = alone

    @property
    def alone(self) -> bool:
        """Whether the calling thread works alone now."""
        return _blocks.SOLO

    def close(self) -> None:
        """The pool again, and BLAS's count as it was."""
        self._set(False)


__all__ = ["CoreSharing", "get_num_threads", "set_num_threads"]
