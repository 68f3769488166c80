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

On the GPU neither matters: the work runs in CUDA kernels.
"""

from __future__ import annotations

import operator

from .functional import _blocks


def get_num_threads() -> int:
    """The number of worker threads the CPU layers and decoding use."""
    return _blocks.WORKERS


def set_num_threads(n: int) -> None:
    """Use ``n`` threads on the CPU from now on: ``n`` worker threads for the library's work,
    and ``n`` BLAS threads for NumPy's own products outside it (threadpoolctl). Call it before the work starts, from the thread
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
