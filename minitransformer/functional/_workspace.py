"""Reused memory for the largest arrays of a training step on the CPU.

The allocator behind NumPy hands every large block (above glibc's mmap threshold, at most
32 MiB) back to the operating system when its array is freed, and the next array of that size
is faulted in again page by page: for the (N, V) logits of the output layer, the softmax of
the loss and their gradient that is some 400 MB of page faults per step of the `small` model.
``empty`` keeps those blocks instead (as CuPy's memory pool does on the GPU) and hands one out
again only when no array refers to it any more, which its reference count tells, so reuse is
invisible to the code that holds the arrays.

    empty(shape, dtype, xp)   an uninitialised C-contiguous array, from a kept block if one
                              is free and large enough (NumPy, at least MIN_BYTES), else new

The smaller arrays (a step's (N, d_model) activations, 4 MB in the `small` model at 4,000
tokens) come from glibc's heap, which gives memory back to the system whenever more than its
trim threshold lies free at the top, and glibc sets that threshold low (twice the largest block
freed so far). A step frees its activations together, so the heap was cut back and faulted in
again every step: 43,000 page faults, some 60 ms of the `small` step's 1.1 s on the Xeon.
``keep_freed_memory`` (run at the first call of ``empty``, on Linux with glibc: when the first
linear layer runs on the CPU) fixes both thresholds with ``mallopt``: blocks below 32 MiB from
the heap, and up to 2 GiB freed at its top kept for the next step, as CuPy's pool keeps GPU
memory. The peak stays where it was (measured the
same); the process holds on to that peak until it ends. glibc's own variables
``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_``, when set, win.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
from typing import Any

from .. import backend

MIN_BYTES = 32 * 2**20     # smaller arrays come back from malloc's own free lists anyway
MAX_KEPT_BYTES = 2**30     # kept blocks, in use or free, in all
_blocks: list[Any] = []  # 1-D uint8 NumPy buffers
_keeps_freed_memory: bool | None = None  # None until the first call of empty
_lock = threading.Lock()  # threads decoding shares of a batch ask at once


def empty(shape: tuple[int, ...], dtype: Any, xp: Any) -> Any:
    global _keeps_freed_memory
    dtype = backend.as_dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if xp is not backend.get_backend("cpu").xp:
        return xp.empty(shape, dtype=dtype)
    if _keeps_freed_memory is None:
        _keeps_freed_memory = keep_freed_memory()
    if nbytes < MIN_BYTES:
        return xp.empty(shape, dtype=dtype)
    with _lock:  # a block found unused is taken (referred to) before another thread looks
        free = [i for i in range(len(_blocks)) if _blocks[i].nbytes >= nbytes and _unused(i)]
        if free:
            block = _blocks[min(free, key=lambda i: _blocks[i].nbytes)]
        else:
            block = xp.empty(nbytes, dtype="uint8")
            _make_room(nbytes)
            if sum(b.nbytes for b in _blocks) + nbytes <= MAX_KEPT_BYTES:
                _blocks.append(block)
        return block[:nbytes].view(dtype).reshape(shape)


def _unused(i: int) -> bool:
    """True if only the list _blocks refers to block i (getrefcount counts its own argument
    too). Any array made from the block (a view, a reshape) holds it through its .base."""
    return sys.getrefcount(_blocks[i]) <= 2


def _make_room(nbytes: int) -> None:
    """Forget free blocks until ``nbytes`` more fit under MAX_KEPT_BYTES."""
    for i in reversed(range(len(_blocks))):
        if sum(b.nbytes for b in _blocks) + nbytes <= MAX_KEPT_BYTES:
            return
        if _unused(i):
            del _blocks[i]  # from the highest index down: the other indices stay valid


MALLOC_MMAP_THRESHOLD = 32 * 2**20   # glibc's largest: bigger blocks are mapped (and kept above)
MALLOC_TRIM_THRESHOLD = 2**31 - 1    # the most mallopt takes: up to 2 GiB free is kept
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3   # mallopt's parameters in <malloc.h>


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module's docstring); False where there is
    no glibc, or where the user set either threshold in the environment."""
    if not sys.platform.startswith("linux") or any(
            f"MALLOC_{name}_THRESHOLD_" in os.environ for name in ("TRIM", "MMAP")):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  (glibc, not musl)
    except (AttributeError, OSError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD))
