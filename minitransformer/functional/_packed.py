"""Gradients that stay packed as their inputs were: attention's dQ, dK, dV in one array.

Multi-head self-attention computes Q, K and V as one projection (B, L, 3C) and splits it into
three views (``nn/attention.py``). Backward has to hand the projection one (B, L, 3C)
gradient, so Split's backward used to concatenate dQ, dK and dV: a copy of 12 MB for each of
the nine attention layers of a `small` step of 4,000 tokens, about 6 ms of its time on the
CPU. Instead attention's backward writes dQ, dK and dV where Q, K and V lie in their
projection, in one new array laid out as that projection (``empty_like_views``), and Split's
backward finds its sections already side by side and returns the array they make up
(``side_by_side``), a view: no copy. Each helper checks what it relies on and otherwise does
what it would have done without it (separate arrays; a concatenation), so other callers see
no difference. NumPy arrays only: on the GPU the copy is one kernel among many.

    empty_like_views(xp, arrays)   empty arrays with the shapes and strides of ``arrays``,
                                   in one new buffer for those that are disjoint views
                                   exactly covering one array
    side_by_side(parts, axis)      the array that ``parts`` are the consecutive sections of
                                   along ``axis``, or None
"""

from __future__ import annotations

import itertools
from typing import Any

from .. import backend

MAX_OVERLAP_WORK = 10_000  # numpy.shares_memory's bound; beyond it the arrays stay separate


def _address(a: Any) -> int:
    """Where a's first element lies in memory."""
    return a.__array_interface__["data"][0]


def empty_like_views(xp: Any, arrays: list) -> list:
    """Empty arrays shaped and strided as ``arrays``. Those that are views of one array (their
    common ``.base``: cross-attention's K and V, not its Q), none of them broadcast (a zero
    stride), pairwise disjoint and together exactly as large as it, become views of one new
    buffer at the same offsets: written in full, the buffer is laid out as that array. Every
    other one is its own ``empty_like``."""
    numpy = backend.get_backend("cpu").xp
    empty = [None] * len(arrays)
    if xp is numpy:
        groups: dict[int, list[int]] = {}
        for i, a in enumerate(arrays):
            if (type(a) is numpy.ndarray and type(a.base) is numpy.ndarray
                    and not _broadcast(a)):
                groups.setdefault(id(a.base), []).append(i)
        for members in groups.values():
            views = [arrays[i] for i in members]
            base = views[0].base
            if (len(views) < 2 or sum(a.nbytes for a in views) != base.nbytes
                    or _any_overlap(numpy, views)):
                continue
            buffer = numpy.empty(base.nbytes, dtype=numpy.uint8)
            start = _address(base)
            try:
                made = [numpy.ndarray(a.shape, a.dtype, buffer, _address(a) - start, a.strides)
                        for a in views]
            except ValueError:  # a view that the new buffer cannot mirror: separate arrays
                continue
            for i, view in zip(members, made, strict=True):
                empty[i] = view
    return [xp.empty_like(a) if e is None else e for a, e in zip(arrays, empty, strict=True)]


def _broadcast(a: Any) -> bool:
    """True if an axis of ``a`` longer than 1 has stride 0 (its elements repeat)."""
    return any(stride == 0 and n > 1 for n, stride in zip(a.shape, a.strides, strict=True))


def _any_overlap(numpy: Any, arrays: list) -> bool:
    """True if two of ``arrays`` share an element (or telling would take too long)."""
    too_hard = getattr(numpy, "exceptions", numpy).TooHardError  # NumPy < 1.25: numpy's own
    try:
        return any(numpy.shares_memory(a, b, max_work=MAX_OVERLAP_WORK)
                   for a, b in itertools.combinations(arrays, 2))
    except too_hard:
        return True


def side_by_side(parts: tuple, axis: int) -> Any:
    """The array whose consecutive sections along ``axis`` are ``parts``, or None: NumPy views
    of one buffer with one dtype and strides, the same shape but along ``axis``, each starting
    where the one before it ends (so none is broadcast along ``axis``). Writable only if
    every part is."""
    numpy = backend.get_backend("cpu").xp
    first = parts[0]
    if type(first) is not numpy.ndarray or type(first.base) is not numpy.ndarray:
        return None
    address, step = _address(first), first.strides[axis]
    if step == 0:
        return None
    for part in parts:
        if (type(part) is not numpy.ndarray or part.base is not first.base
                or part.dtype != first.dtype or part.strides != first.strides
                or _address(part) != address
                or part.shape[:axis] != first.shape[:axis]
                or part.shape[axis + 1:] != first.shape[axis + 1:]):
            return None
        address += part.shape[axis] * step
    shape = first.shape[:axis] + (sum(p.shape[axis] for p in parts),) + first.shape[axis + 1:]
    base = first.base
    try:  # a view of the parts' base, as the parts are
        whole = numpy.ndarray(shape, first.dtype, base, _address(first) - _address(base),
                              first.strides)
    except ValueError:  # a base whose memory NumPy will not lend (its axes out of order)
        whole = numpy.lib.stride_tricks.as_strided(first, shape, first.strides)
    if not all(part.flags.writeable for part in parts):
        whole.flags.writeable = False
    return whole
