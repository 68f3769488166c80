"""Weights laid out for decoding's products: Wᵀ contiguous while the weights cannot change.

A linear layer computes y = x Wᵀ with W stored (C_out, C_in), PyTorch's layout (so that the
embedding table (V, C) is also the output projection), and BLAS reads Wᵀ as a transposed
operand. With the thousands of rows of a training step that costs nothing; with the few rows
of a decoding step it does. Single-threaded OpenBLAS on the Xeon (bench/layout_products.py,
bench/results/layout_products.xeon.json), µs per product:

    rows M                                   1      4     16     64    128    512   2048
    (M, 256) @ (256, 1024), Wᵀ as W.T       15    152    189    341    570   1859   6380
                            Wᵀ contiguous   17     69    106    269    497   1805   6872
    (M, 256) @ (256, 8000), Wᵀ as W.T      296   1379   1514   2721   4706  14385  56251
                            Wᵀ contiguous  301    789    984   2218   4124  14020  54673

While a search runs the weights cannot change, so the first product of ``copy_rows`` rows or
more with a weight keeps a contiguous copy of its Wᵀ, and every later product of 2 to
MAX_ROWS rows reads it (a matrix-vector product, one row, reads the view as fast):

    with frozen_weights(arrays):    # a search, or translate's batches: the model's weights
    with frozen_weights(arrays, copy_rows=2):   # a translate session (translation_session)
        linear(x, W, b)             # W one of them: reads the kept copy of Wᵀ
    transposed(W, rows)             # what a product of ``rows`` rows multiplies by: (C_in, C_out)
    laid_out(W)                     # W itself, stored so that W.T is contiguous (a cache's own)

A copy lives as long as its weight stays frozen (the contexts nest, and the threads of one
search share the copies): at most one copy of each frozen weight used in small products, never
of a temporary (such as the stacked projections of a layer without a cache). Decoding batches
of 256 sentences with `small`, that is 16 MiB (its decoder's and output projection's weights),
made in 11 ms; an encoder's weights too where a batch's B·S is 64 to 512 rows.
`translate` over the 1,000 Multi30k test sentences ran 1.03× faster greedy and 1.01× with
beam 4, the same translations. NumPy only: cuBLAS reads a transposed operand as fast, and a CUDA
graph holds the addresses of the weights themselves.

    M rows   C_in, C_out a layer's features in and out
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .. import backend

MAX_ROWS = 512   # from 512 rows on the two layouts are about level, each ahead somewhere
MIN_COPY_ROWS = 64  # a product of fewer rows reads a kept copy but makes none: one sentence's
                    # search (its encoder's rows are its tokens, its decoder's its beams) has
                    # too few products to pay for the copies (11 ms for `small`)
TILE = 64           # rows of W transposed at a time: a (64, C_in) tile and its transpose
                    # stay in cache (8000 x 256: 1.7 ms, where W.T.copy() takes 8.8 ms)

_frozen: dict[int, list] = {}  # id(W) -> [W, copy_rows of each open context that froze it]
_kept: dict[int, Any] = {}     # id(W) -> contiguous Wᵀ, while W is frozen (held: ids stay)
_lock = threading.Lock()


@contextlib.contextmanager
def frozen_weights(weights: Iterable[Any], copy_rows: int = MIN_COPY_ROWS) -> Iterator[None]:
    """Within it, small products with one of ``weights`` (arrays, a model's parameters) keep
    and reuse a contiguous copy of its transpose, made by the first product of ``copy_rows``
    rows or more: they must not change until it ends (a weight frozen by nested contexts,
    until the last of them ends; the smallest copy_rows of those open counts). Other arrays
    (a product's own temporaries, such as the stacked projections of a layer without a cache)
    are never copied. A context that spans many searches (a translate session) may copy at
    fewer rows, since its copies serve them all."""
    cpu = backend.get_backend("cpu").xp
    # NumPy's matrices only: cuBLAS reads either layout as fast
    mine = {id(w): w for w in weights
            if backend.get_array_module(w) is cpu and w.ndim == 2}
    with _lock:
        for key, weight in mine.items():
            _frozen.setdefault(key, [weight, []])[1].append(copy_rows)
    try:
        yield
    finally:
        with _lock:
            for key in mine:
                entry = _frozen[key]
                entry[1].remove(copy_rows)
                if not entry[1]:  # no context holds it frozen: it may change from now on
                    del _frozen[key]
                    _kept.pop(key, None)


def transposed(weight: Any, rows: int) -> Any:
    """Wᵀ (C_in, C_out) for a product of ``rows`` rows with ``weight`` W (C_out, C_in): the
    kept contiguous copy of a frozen weight for 2 to MAX_ROWS rows, else the view
    W.T (one row, a matrix-vector product, reads the view as fast or faster)."""
    view = weight.T
    if not 1 < rows <= MAX_ROWS or view.flags.c_contiguous or not _is_frozen(weight):
        return view
    kept = _kept.get(id(weight))
    if kept is None:
        entry = _frozen.get(id(weight))
        if entry is None or rows < min(entry[1], default=rows + 1):
            return view
        with _lock:  # the shares of a search ask for the same weight at once
            kept = _kept.get(id(weight))
            if kept is None:
                if not _is_frozen(weight):  # its context ended meanwhile
                    return view
                kept = _kept[id(weight)] = _transposed_copy(weight)
    return kept


def copy_rows(weight: Any) -> int | None:
    """The fewest rows at which a product with ``weight`` makes its copy (the smallest
    copy_rows of the contexts holding it frozen), or None where it is not frozen."""
    entry = _frozen.get(id(weight))
    return min(entry[1]) if entry is not None and entry[0] is weight else None


def _is_frozen(weight: Any) -> bool:
    entry = _frozen.get(id(weight))
    return entry is not None and entry[0] is weight


def _transposed_copy(weight: Any) -> Any:
    """A C-contiguous copy of Wᵀ (C_in, C_out), TILE rows of W at a time."""
    C_out, C_in = weight.shape
    out = backend.get_backend("cpu").xp.empty((C_in, C_out), dtype=weight.dtype)
    for start in range(0, C_out, TILE):
        out[:, start:start + TILE] = weight[start:start + TILE].T
    return out


def laid_out(weight: Any) -> Any:
    """``weight`` (C_out, C_in) with the same values, stored so that its transpose is
    contiguous (NumPy; other arrays as they are): for weights a decoding builds and keeps
    itself, such as attention's stacked projections."""
    if backend.get_array_module(weight) is not backend.get_backend("cpu").xp:
        return weight
    return _transposed_copy(weight).T
