"""Blocks of rows: how the layers fuse a chain of NumPy operations into one CPU kernel.

A chain such as softmax's max, subtract, exp, sum and divide, written on whole arrays, makes
one pass over memory per operation, each on one core. Cut into blocks of rows of about
``BLOCK_BYTES``, the whole chain runs on one block while it sits in the cache, and blocks run
on every core at once: NumPy releases the GIL inside its loops, so threads work in parallel.

    for_blocks(kernel, n, row_bytes, xp)    calls kernel(rows) for slices rows covering 0..n
    on_workers(function, items)             [function(item) for item in items], concurrently
    shared_out(task, items)                 the same, for callers that hold BLAS to one thread
    with as_one_worker():                   this thread works as one busy worker: BLAS on one
                                            thread, blocks and products in turn on it

``kernel`` reads and writes only its own rows of the arrays it closes over, so the result is
the same, bit for bit, as one call on all rows. On CuPy there is nothing to gain (the GPU
kernels are fused in ``_cuda.py``) and the kernel runs once on all rows.

The calling thread is one of the workers: it takes blocks from the same counter as the
pool's WORKERS - 1 threads, so a call costs one hand-off per thread, not one per block, and a
thread that the system is not running (another process holds its core) delays only the block
it holds. While blocks run, BLAS is held to one thread (threadpoolctl): a kernel may call
matmul on its block (attention does, for Q Kᵀ and P V), and BLAS's own threads on top of the
workers would fight for the cores; the layers' larger products are cut into blocks the same
way (``_products.py``), never left to BLAS's threads.

``on_workers`` runs larger pieces of work the same way (decoding runs one share of a batch's
sentences per core). Inside a worker, ``for_blocks`` runs its blocks in turn on that thread:
the cores are already busy, and a worker waiting for its own blocks to be scheduled on the
pool it occupies would never be served.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from threadpoolctl import ThreadpoolController

from .. import backend
from ..autograd.grad_mode import is_grad_enabled, set_grad_enabled
from . import _cuda

BLOCK_BYTES = 512 * 1024          # a block of each array a kernel touches stays in cache
MAX_DEFAULT_WORKERS = 8           # without OMP_NUM_THREADS, at most this many workers


def default_workers() -> int:
    """The number of worker threads when nobody chose one: ``OMP_NUM_THREADS`` when it is a
    positive integer (its first entry, as OpenMP and PyTorch read "4,2"), else the cores this
    process may run on (its CPU affinity, not every core of the machine), at most
    ``MAX_DEFAULT_WORKERS``."""
    try:
        requested = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        requested = 0
    if requested > 0:
        return requested
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


WORKERS = default_workers()       # set_threads (minitransformer.set_num_threads) changes it
SOLO = False                      # the calling thread runs every block itself (threads.py's
                                  # CoreSharing sets it where the pool's threads lose time)
_pool: ThreadPoolExecutor | None = None
_pool_workers = 0                 # the number of threads _pool was made with
_pool_lock = threading.Lock()
_blas: ThreadpoolController | None = None
_thread = threading.local()       # .on_worker: this thread runs a task of the pool


def set_threads(n: int) -> None:
    """``n`` worker threads from now on, and ``n`` threads in BLAS's products."""
    global WORKERS
    if getattr(_thread, "on_worker", False):
        raise RuntimeError("set_num_threads was called from one of minitransformer's worker "
                           "threads (inside a function run on the pool); call it before the "
                           "work starts, from the thread that starts it.")
    WORKERS = n
    blas_controller().limit(limits=n, user_api="blas")


def _executor() -> ThreadPoolExecutor:
    """The pool of WORKERS - 1 threads (a new one when WORKERS changed since the last): the
    thread that hands out work is the last worker. An older pool is not shut down: a thread
    that already holds it may still hand it work, and its idle threads end once nothing
    refers to it."""
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers != WORKERS:
            _pool = ThreadPoolExecutor(max(1, WORKERS - 1), "minitransformer")
            _pool_workers = WORKERS
        return _pool


def shared_out(task: Callable[[Any], Any], items: list) -> list:
    """``[task(item) for item in items]``, the items taken in turn by the calling thread and
    up to WORKERS - 1 threads of the pool, whichever is free first; BLAS must already be held
    to one thread. The caller works instead of waiting, a call hands the pool at most one
    job a thread (not one a block), and a thread the system is not running holds up only the
    item it has taken. With SOLO set the caller takes every item: the same items, so the
    same numbers, without the pool's threads. The first error stops the others taking items
    and is raised once all have stopped (they may be writing into the caller's arrays)."""
    if SOLO:
        with _working():
            return [task(item) for item in items]
    results: list = [None] * len(items)
    take = itertools.count().__next__                  # atomic under the GIL
    failed: list[BaseException] = []

    def drain() -> None:
        with _working():
            try:
                while not failed:
                    i = take()
                    if i >= len(items):
                        return
                    results[i] = task(items[i])
            except BaseException as error:
                failed.append(error)
    helpers = [_executor().submit(drain) for _ in range(min(WORKERS, len(items)) - 1)]
    drain()
    for helper in helpers:
        helper.result()
    if failed:
        raise failed[0]
    return results


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.shutdown(wait=False)


def blas_controller() -> ThreadpoolController:
    """threadpoolctl's handle on the BLAS libraries loaded in this process."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas


class _SingleThreadedBlas:
    """A context in which BLAS (NumPy's OpenBLAS or MKL) uses one thread; BLAS's count before
    it comes back after the outermost one ends (they nest, and are counted across threads).
    It calls the libraries through threadpoolctl's handles, about 2 us a section, since the
    layers open one around every product and every kernel that multiplies. (threadpoolctl
    lets one thread at a time set OpenBLAS's count, so on a second thread that trains or
    decodes at the same time this changes nothing.)"""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.before: list[tuple[Any, int]] = []
        self.libraries: list[Any] | None = None        # threadpoolctl's BLAS handles, found once

    def __enter__(self) -> None:
        with self.lock:
            if self.depth == 0:
                if self.libraries is None:
                    self.libraries = blas_controller().select(user_api="blas").lib_controllers
                self.before = [(lib, lib.get_num_threads()) for lib in self.libraries]
                for lib, threads in self.before:
                    if threads != 1:
                        lib.set_num_threads(1)
            self.depth += 1

    def __exit__(self, *exc_info: Any) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                for lib, threads in self.before:
                    if threads != 1:
                        lib.set_num_threads(threads)


_one_blas_thread = _SingleThreadedBlas()


def _single_threaded_blas() -> _SingleThreadedBlas:
    """The context in which BLAS uses one thread (see ``_SingleThreadedBlas``)."""
    return _one_blas_thread


def _in_grad_mode_of_caller(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``function`` run in the calling thread's grad mode (each thread has its own). Only
    ``on_workers`` needs it: its tasks call Functions; ``for_blocks`` kernels touch arrays."""
    grad_enabled = is_grad_enabled()

    def in_mode(item: Any) -> Any:
        with set_grad_enabled(grad_enabled):
            return function(item)
    return in_mode


@contextlib.contextmanager
def as_one_worker() -> Iterator[None]:
    """The calling thread works as one worker among busy ones (decoding's first share, beside
    shares on other processes): single-threaded BLAS, and its blocks and products in turn on
    it rather than spread over the pool's threads, whose cores are taken."""
    with _single_threaded_blas(), _working():
        yield


@contextlib.contextmanager
def _working() -> Iterator[None]:
    """This thread runs a task of the pool (``_thread.on_worker``) inside the block."""
    on_worker = getattr(_thread, "on_worker", False)
    _thread.on_worker = True
    try:
        yield
    finally:
        _thread.on_worker = on_worker


def on_workers(function: Callable[[Any], Any], items: list) -> list:
    """``[function(item) for item in items]``, the items on the worker threads at once with
    single-threaded BLAS (in turn when there is one worker, or already on a worker)."""
    if WORKERS == 1 or len(items) < 2 or getattr(_thread, "on_worker", False):
        return [function(item) for item in items]
    with _single_threaded_blas():
        return shared_out(_in_grad_mode_of_caller(function), items)


def for_blocks(kernel: Callable[[slice], Any], n: int, row_bytes: int, xp: Any,
               block_bytes: int | None = None, multiple: int = 1) -> None:
    """Run ``kernel(rows)`` over slices of rows 0..n, each about BLOCK_BYTES of one array of
    ``row_bytes`` per row, spread over the worker threads (one call on CuPy or when small).

    A larger ``block_bytes`` suits kernels of many small NumPy calls, whose per-call cost would
    otherwise outweigh the gain from staying in cache. (The default is read at each call, so
    tests can set BLOCK_BYTES small and run every kernel in many blocks.) Every slice begins
    at a multiple of ``multiple`` (its rows rounded up to one).
    """
    rows_per_block = block_rows(row_bytes, block_bytes, multiple)
    if _cuda.is_cupy(xp):
        kernel(slice(0, n))
        return
    if n <= rows_per_block:
        if WORKERS == 1 or getattr(_thread, "on_worker", False):
            kernel(slice(0, n))
        else:
            with _single_threaded_blas():    # a product in the kernel: not on BLAS's threads
                kernel(slice(0, n))
        return
    starts = range(0, n, rows_per_block)
    blocks = [slice(start, min(start + rows_per_block, n)) for start in starts]
    if WORKERS == 1 or getattr(_thread, "on_worker", False):
        for rows in blocks:
            kernel(rows)
        return
    with _single_threaded_blas():
        shared_out(kernel, blocks)                      # re-raises a kernel's error


def block_rows(row_bytes: int, block_bytes: int | None = None, multiple: int = 1) -> int:
    """The rows of one of ``for_blocks``' blocks: about ``block_bytes`` (BLOCK_BYTES) of an
    array of ``row_bytes`` per row, rounded up to a multiple of ``multiple``."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    return -(-max(1, block_bytes // max(1, row_bytes)) // multiple) * multiple


MIN_SUM_BYTES = 1 << 20  # smaller sums take NumPy's a + b on the calling thread


def added(a: Any, b: Any, out: Any = None) -> Any:
    """a + b in a new array, or into ``out`` (which may be a), on blocks of elements on the
    worker threads where all are NumPy arrays of one shape, dtype and C order of at least
    MIN_SUM_BYTES: the gradients that reach a tensor used twice (the residual stream of
    every layer: 4 MB each in a `small` step), which the engine sums (``Tensor.backward``
    hands it this function)."""
    numpy = backend.get_backend("cpu").xp
    arrays = (a, b) if out is None else (a, b, out)
    if (any(type(x) is not numpy.ndarray or x.shape != a.shape or x.dtype != a.dtype
            or not x.flags.c_contiguous for x in arrays) or a.nbytes < MIN_SUM_BYTES):
        return a + b if out is None else backend.get_array_module(a).add(a, b, out=out)
    xp = numpy
    out = xp.empty_like(a) if out is None else out
    for_element_blocks(lambda a, b, out: xp.add(a, b, out=out), (a, b, out), xp)
    return out


def for_element_blocks(kernel: Callable[..., Any], arrays: tuple, xp: Any) -> None:
    """``kernel(*parts)`` on matching blocks of the elements of same-shaped ``arrays`` (flat
    views, on worker threads) when all are C-contiguous; else once on the whole arrays."""
    if all(a.flags.c_contiguous for a in arrays):
        flat = [a.reshape(-1) for a in arrays]                  # views: writes reach arrays
        itemsize = max(a.itemsize for a in arrays)
        for_blocks(lambda part: kernel(*(a[part] for a in flat)), flat[0].size, itemsize, xp)
    else:
        kernel(*arrays)
