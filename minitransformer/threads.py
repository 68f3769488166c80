"""How many CPU threads minitransformer uses: ``get_num_threads`` and ``set_num_threads``.

On the CPU the library works on two kinds of threads: BLAS's own, inside every matrix product,
and its pool of worker threads, on which blocks of rows of the fused layers and the shares of
a decoding batch run at once (``functional/_blocks.py``). By default the pool has one thread
per core the process may run on (its CPU affinity), at most 8, or ``OMP_NUM_THREADS`` when
that is set, as PyTorch reads it; BLAS reads ``OMP_NUM_THREADS`` itself. To share a machine
(two runs side by side, a course server), set ``OMP_NUM_THREADS`` before starting Python, or
call ``set_num_threads(n)`` before the work starts: it sets both the pool and BLAS.

    import minitransformer as mt
    mt.set_num_threads(2)
    mt.get_num_threads()         # 2

On the GPU neither matters: the work runs in CUDA kernels.
"""

from __future__ import annotations

import operator

from .functional import _blocks


def get_num_threads() -> int:
    """The number of worker threads the CPU layers and decoding use."""
    return _blocks.WORKERS


def set_num_threads(n: int) -> None:
    """Use ``n`` threads on the CPU from now on: ``n`` worker threads, and ``n`` threads in
    BLAS's matrix products (threadpoolctl). Call it before the work starts, from the thread
    that starts it (a worker thread of the pool is refused)."""
    try:
        threads = operator.index(n)
    except TypeError:
        threads = 0
    if threads < 1 or isinstance(n, bool):
        raise ValueError(f"set_num_threads takes a positive integer, got {n!r}; "
                         "give the number of cores to use, 1 or more.")
    _blocks.set_threads(threads)


__all__ = ["get_num_threads", "set_num_threads"]
