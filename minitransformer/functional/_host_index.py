"""A host index checked on the host before it moves to a device: NumPy's IndexError where a
GPU would take the wrong rows.

CuPy's gathers and scatters wrap an integer index out of range round (of three rows, row 3 is
row 0), where NumPy raises IndexError. So an index the caller holds on the host (a list, a
tuple, an integer, a NumPy array, a Tensor on the CPU) is checked here before it moves to a
device, and refused in NumPy's words. An index already on the device is not checked: that
would read it from the device, making the host wait for the GPU (beam search's own indices
are such, in range by construction).

The checks come in NumPy's order, so an index with several faults gets the error NumPy would
give: the index's form (one ellipsis at most, no more indices than axes), each part's type and
each mask's size, the integers, whether the gathering arrays broadcast together, the arrays.
Where NumPy's first error is not one of range, nothing is raised here: the device's own
indexing refuses the index (CuPy in NumPy's words).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..autograd.tensor import Tensor


def index_axes(parts: tuple, ndim: int) -> list[int | None] | None:
    """The axis of an ``ndim``-axis array that each part of an index selects on, as NumPy
    reads it (None for a part that selects on none: ``None``, ``...``, a boolean scalar; a
    mask's first axis of those it spans); None for an index NumPy refuses by its form (two
    ellipses, more indices than axes)."""
    spans = [_span(p) for p in parts]
    if sum(p is Ellipsis for p in parts) > 1 or sum(spans) > ndim:
        return None
    axes: list[int | None] = []
    axis = 0
    for i, (part, span) in enumerate(zip(parts, spans, strict=True)):
        if part is Ellipsis:
            axis = ndim - sum(spans[i + 1:])  # what follows the ellipsis ends at the last axis
        axes.append(None if span == 0 else axis)
        axis += span
    return axes


def _span(part: Any) -> int:
    """How many of the array's axes one part of an index selects on (a part given as a host
    array, see ``_host_parts``)."""
    if part is None or part is Ellipsis or isinstance(part, bool):
        return 0
    kind = getattr(getattr(part, "dtype", None), "kind", None)
    return part.ndim if kind == "b" else 1  # a boolean scalar (0-d) adds an axis instead


def host_positions(part: Any) -> Any:
    """A list, tuple, integer or boolean as a host array, an empty sequence as an empty
    integer one (``[]`` and ``[[]]`` are no positions to NumPy and CuPy, not an empty float
    array); None where a sequence is no array at all (ragged)."""
    host = backend.get_backend("cpu").xp
    try:
        array = host.asarray(part)
    except (ValueError, TypeError):
        return None
    return array.astype(host.intp) if array.size == 0 and array.dtype.kind == "f" else array


def _host_parts(parts: tuple) -> tuple | None:
    """The parts with each host sequence, integer or boolean as a host array
    (``host_positions``) and Tensors as their arrays; None where a sequence is no array at all
    (ragged), which the device's own conversion refuses."""
    host = backend.get_backend("cpu").xp
    converted = []
    for part in parts:
        part = part.data if isinstance(part, Tensor) else part
        if isinstance(part, list | tuple | bool | int) or isinstance(part, host.generic):
            part = host_positions(part)
            if part is None:
                return None
        converted.append(part)
    return tuple(converted)


def check_host_index(shape: tuple, index: Any) -> None:
    """Raise NumPy's IndexError (``index 5 is out of bounds for axis 0 with size 2``) where a
    host part of ``index`` selects a position outside an array of ``shape``, as NumPy would
    name it first; nothing for a device part, nor where NumPy would first refuse the index for
    another reason."""
    parts = _host_parts(index if isinstance(index, tuple) else (index,))
    axes = None if parts is None else index_axes(parts, len(shape))
    if axes is None:
        return
    host = backend.get_backend("cpu").xp
    checked, gathers = [], []  # the integers to check; the shapes of the gathering arrays
    for part, axis in zip(parts, axes, strict=True):
        if part is None or part is Ellipsis or isinstance(part, slice):
            continue
        kind = getattr(getattr(part, "dtype", None), "kind", None)
        if backend.is_array(part) and backend.device_of(part) != "cpu":  # never read
            if kind == "b":
                if part.ndim and part.shape != tuple(shape[axis:axis + part.ndim]):
                    return  # a mask of the wrong size: refused by the device, as NumPy does first
                gathers.append(None)  # positions: as many as it holds True, unknown here
            elif kind in ("i", "u"):
                gathers.append(part.shape)
            elif kind != "b":
                return  # not an index: refused by the device, as NumPy does first
            continue
        if not backend.is_array(part):
            continue
        if kind == "b":
            if part.ndim == 0:  # True or False: a new axis of 1 or 0 positions
                gathers.append((int(bool(part)),))
            elif part.shape != tuple(shape[axis:axis + part.ndim]):
                return  # a mask of the wrong size: refused by the device, as NumPy does first
            else:
                gathers.append((int(part.sum()),))  # as part.ndim arrays of its positions
        elif kind in ("i", "u"):
            checked.append((part.ndim > 0, axis, part))
            if part.ndim:
                gathers.append(part.shape)
        else:
            return  # not an index: refused by the device, as NumPy does first
    try:  # (a device mask's count is unknown: it may gather nothing, and NumPy reads nothing)
        gathered = 0 if None in gathers else math.prod(host.broadcast_shapes(*gathers))
    except ValueError:
        gathered = 0  # the device's own indexing refuses them (after any integer)
    for is_array, axis, rows in sorted(checked, key=lambda c: c[:2]):  # integers first
        if is_array and not gathered:  # NumPy reads no array that gathers nothing
            return
        n = shape[axis]
        outside = (rows < -n) | (rows >= n)
        if outside.any():  # the first in reading order, as NumPy names it
            bad = rows.reshape(-1)[int(outside.argmax())]
            raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")


def has_host_part(index: Any) -> bool:
    """Whether ``index`` has a part that ``check_host_index`` would read (a cheap test for the
    common slices-only index)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, list | tuple | int | Tensor)
               or (backend.is_array(p) and backend.device_of(p) == "cpu") for p in parts)


def check_rows(what: str, array: Any, *indices: Any) -> None:
    """Each index of ``array``'s rows that the caller holds on the host, checked as
    ``check_host_index`` checks it where ``array`` is on a device, the error naming ``what``:
    for code that indexes a device array directly, not through a Tensor. (On the CPU,
    NumPy's own indexing refuses a row out of range.)"""
    if backend.device_of(array) == "cpu":
        return
    for index in indices:
        if has_host_part(index):
            try:
                check_host_index(array.shape[:1], (index,))  # rows: one part, a tuple too
            except IndexError as exc:
                raise IndexError(f"{what}: {exc}.") from None
