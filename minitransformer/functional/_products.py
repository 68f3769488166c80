"""Matrix products on the worker pool: every core for the layers' products, without BLAS's threads.

    matmul(a, b, out=None)      a @ b, as ``numpy.matmul`` (on CuPy: cuBLAS, ``_cublas.py``)
    matmul(a, b, out, before=prepare, after=finish, align=g)
                                a 2-D product with a pass over rows on either side: prepare(rows)
                                writes rows of a, finish(rows) finishes rows of out (each slice
                                of out's rows beginning at a multiple of g)

BLAS parallelises a product itself: OpenBLAS gives each of its threads a fixed share of the
product, and the threads wait for one another, spinning, at every panel of the reduction. On
a machine of its own that is as fast as anything. On a shared one (a course server, a second
run beside the first, a busy browser) a thread that the system is not running holds up every
wait, and each wait lasts until the scheduler comes back to it. On the 2-core Xeon, beside a
process that kept both cores busy, the tiny model's weight gradient (32, 7000) @ (7000, 32)
took 124 ms with two BLAS threads against 0.2 ms with one, and a training step 980 ms
against 103 ms.

So the library's products never use BLAS's threads. A product large enough to pay for the
hand-off (``MIN_SPLIT_FLOPS``) is cut into one block of its output's rows per worker (of its
columns, when it has fewer rows than columns), and each block is one single-threaded BLAS call
on the pool of ``_blocks``. The pool's threads wait on a lock, not spinning: a core taken by
another process costs its share of the time and no more. Smaller products, and products asked
for on a worker thread (decoding's shares), run at once on the calling thread.

Alone on the machine the blocks are as fast as BLAS's two threads on the small model's shapes
(the (4000, 512) @ (512, 2048) product: 27.3 against 27.2 ms on the Xeon); the results are
the same numbers as one call, up to the order BLAS adds in.

A layer's element-wise pass before or after its product (the bias and ReLU of a linear layer,
the ReLU's mask in its backward) goes with the product's blocks of rows: each thread runs
``before`` on the rows of ``a`` it is about to multiply, and ``after`` on the rows of the
output it has just written, while the last of them are still in its caches, with no second
hand-off to the pool. A product not cut into blocks of rows runs them on ``for_blocks``'s
blocks instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import backend
from . import _blocks, _cublas, _cuda
from ._broadcast import broadcast_shapes

# Below this many floating-point operations (2 M N K) a product runs on the calling thread:
# handing blocks to the pool costs about 0.1 ms, what one core needs for some 10 MFLOP.
MIN_SPLIT_FLOPS = 32_000_000
# A matrix product is split only where every block gets at least this many rows (columns):
# each block packs the whole shared operand again, which thin blocks do not pay back (the
# tiny model's (32, 7000) @ (7000, 32) ran slower in two blocks of 16 rows than in one call).
MIN_BLOCK_ROWS = 64


def matmul(a: Any, b: Any, out: Any = None, *, before: Callable[[slice], Any] | None = None,
           after: Callable[[slice], Any] | None = None, align: int = 1) -> Any:
    """``a @ b`` with NumPy's broadcasting rules, on the worker threads with single-threaded
    BLAS when large enough (see the module's docstring); written into ``out`` when given.

    ``before(rows)`` and ``after(rows)``, for a 2-D ``a`` and ``out``: called on slices of rows
    covering 0..N, ``before`` on rows of ``a`` before they are multiplied, ``after`` on rows of
    the output once written; each touches only its own rows (as ``for_blocks``' kernels).
    ``after``'s slices begin at multiples of ``align``: a pass that sums fixed groups of rows
    (``feed_forward.py``'s db₁) then gets whole groups, however many workers there are."""
    xp = backend.get_array_module(a)
    if before is not None or after is not None:
        return _with_passes(a, b, out, before, after, align, xp)
    if _cuda.is_cupy(xp):  # cuBLAS called directly, so that a CUDA graph can hold it
        return _cublas.matmul(a, b, out)
    if (_blocks.WORKERS == 1
            or getattr(_blocks._thread, "on_worker", False)):
        # one thread asked for (set_num_threads sets BLAS's too); or a task of the pool, for
        # which BLAS is already held to one thread
        return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)
    with _blocks._single_threaded_blas():
        if not _worth_splitting(a, b):
            return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)
        if out is None:
            out = xp.empty(_result_shape(a, b), dtype=a.dtype)
        _blocks.shared_out(lambda block: xp.matmul(*block), _blocks_of(a, b, out))
    return out


def _with_passes(a: Any, b: Any, out: Any, before: Any, after: Any, align: int,
                 xp: Any) -> Any:
    """matmul with ``before`` and ``after`` (see matmul): on the product's blocks of rows when
    it is cut by rows on the pool, else each on ``for_blocks``' blocks around one product.

    ``before`` is called on ``for_blocks``' own blocks of a's rows either way (the product's
    blocks are cut where they begin), so a pass that sums over its rows (the ReLU's db) adds
    the same rows together, in the same order, whatever the number of workers. ``after`` gets
    each block of the product's rows as one slice, each beginning at a multiple of ``align``
    (the blocks are cut there)."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"matmul: passes before and after a product need matrices, got "
                         f"shapes {tuple(a.shape)} and {tuple(b.shape)}.")
    if out is None:
        out = xp.empty(_result_shape(a, b), dtype=a.dtype)
    by_rows = (not _cuda.is_cupy(xp) and _blocks.WORKERS > 1
               and not getattr(_blocks._thread, "on_worker", False)
               and _worth_splitting(a, b) and out.shape[0] >= out.shape[1])
    if not by_rows:
        if before is not None:
            _blocks.for_blocks(before, a.shape[0], a.shape[1] * a.itemsize, xp)
        matmul(a, b, out)
        if after is not None:
            _blocks.for_blocks(after, out.shape[0], out.shape[1] * out.itemsize, xp,
                               multiple=align)
        return out
    cell = _blocks.block_rows(a.shape[1] * a.itemsize)                 # for_blocks' rows

    def block(rows: slice) -> None:
        if before is not None:
            for start in range(rows.start, rows.stop, cell):
                before(slice(start, min(start + cell, rows.stop)))
        xp.matmul(a[rows], b, out=out[rows])
        if after is not None:
            after(rows)
    parts = min(_blocks.WORKERS, out.shape[0] // MIN_BLOCK_ROWS)
    multiple = math.lcm(cell if before is not None else 1, align if after is not None else 1)
    with _blocks._single_threaded_blas():
        _blocks.shared_out(block, _shares(out.shape[0], parts, multiple=multiple))
    return out


def _worth_splitting(a: Any, b: Any) -> bool:
    """Whether ``a @ b`` is large enough to pay for the pool: matrices (a matrix-vector product
    is memory-bound), one dtype, at least MIN_SPLIT_FLOPS, and rows, columns or a leading batch
    axis to share out."""
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return False
    shape = _result_shape(a, b)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = 1
    for n in shape[:-2]:
        batch *= n
    if 2 * batch * M * N * K < MIN_SPLIT_FLOPS:
        return False
    if len(shape) == 2:
        return max(M, N) >= 2 * MIN_BLOCK_ROWS
    return shape[0] >= 2


def _result_shape(a: Any, b: Any) -> tuple:
    """The shape of ``a @ b`` (``numpy.matmul``'s rules; the operands are known to fit)."""
    if a.ndim == 1 and b.ndim == 1:
        return ()
    if a.ndim == 1:
        return b.shape[:-2] + b.shape[-1:]
    if b.ndim == 1:
        return a.shape[:-1]
    batch = broadcast_shapes("matmul (batch axes)", a.shape[:-2], b.shape[:-2])
    return batch + (a.shape[-2], b.shape[-1])


def _blocks_of(a: Any, b: Any, out: Any) -> list[tuple]:
    """The product cut into (a part, b part, out part), one per worker: blocks of the leading
    batch axis when there is one, else of the output's rows (of its columns when it has fewer
    rows than columns)."""
    workers = _blocks.WORKERS
    if out.ndim > 2:
        def part(x: Any, s: slice) -> Any:
            return x[s] if x.ndim == out.ndim and x.shape[0] == out.shape[0] else x
        return [(part(a, s), part(b, s), out[s]) for s in _shares(out.shape[0], workers)]
    M, N = out.shape
    if M >= N:
        return [(a[s], b, out[s]) for s in _shares(M, min(workers, M // MIN_BLOCK_ROWS))]
    return [(a, b[:, s], out[:, s]) for s in _shares(N, min(workers, N // MIN_BLOCK_ROWS))]


def _shares(n: int, parts: int, multiple: int = 1) -> list[slice]:
    """``parts`` slices covering 0..n, as even as can be (none empty), each beginning at a
    multiple of ``multiple`` (then fewer slices where n has fewer such multiples)."""
    parts = max(1, min(parts, n))
    bounds = [(n * i // parts + multiple // 2) // multiple * multiple for i in range(parts)]
    if multiple > 1:  # rounded to a multiple: drop the bounds that met, or passed n
        bounds = sorted({bound for bound in bounds if bound < n} | {0})
    bounds.append(n)
    return [slice(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
