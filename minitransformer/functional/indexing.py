"""Selecting and joining: getitem, concat, stack, split, where, masked_fill.

    y = a[index]               da = zeros, then da[index] += dout   (scatter-add: an index
                                                                     used twice gets both)
    y = concat(a_1..a_n)       da_i = the slice of dout that came from a_i
    y = stack(a_1..a_n)        da_i = dout[..., i, ...]
    y_1..y_n = split(a)        da = concat(dy_1..dy_n)
    y = where(c, a, b)         da = dout where c, else 0;   db = dout where not c, else 0
    y = masked_fill(a, m, v)   da = dout where not m, else 0 (filled places got a constant)
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..autograd.function import Function
from ..autograd.tensor import Tensor
from . import _packed
from ._blocks import for_blocks
from ._broadcast import broadcast_shapes, match_float_dtypes, sum_to
from ._host_index import check_host_index, has_host_part, host_positions


class GetItem(Function):
    def __init__(self, index: Any):
        self.index = index
        parts = index if isinstance(index, tuple) else (index,)
        # Integer index arrays may repeat a position: backward must then add, not assign.
        self.gathers = any(backend.is_array(p) and p.dtype.kind in "iu" and p.ndim > 0
                           for p in parts)
        self.returns_views = not any(backend.is_array(p) or isinstance(p, list)
                                     for p in parts)   # basic indexing: a view

    def forward(self, a):
        self.a_shape = a.shape
        try:
            return a[self.index]
        except IndexError as exc:
            raise IndexError(f"getitem on a tensor of shape {tuple(a.shape)}: {exc}.") from None

    def backward(self, dout):
        # da has a's whole shape, zero where nothing was taken (as in PyTorch): n slices of one
        # tensor, taken one by one in a Python loop, cost n whole-sized gradients to add up;
        # split it once instead (split's backward is one concatenation).
        xp = backend.get_array_module(dout)
        da = xp.zeros(self.a_shape, dtype=dout.dtype)
        if self.gathers:
            # fwd: y = a[idx]  ->  da[idx] += dout, repeats accumulating (scatter-add)
            xp.add.at(da, self.index, dout)
        else:
            # fwd: y = a[slices]  ->  da[slices] = dout (each position is taken at most once)
            da[self.index] = dout
        return da


class Concat(Function):
    def __init__(self, axis: int = 0):
        self.axis = axis

    def forward(self, *arrays):
        if not arrays:
            raise ValueError("concat: no tensors to join; pass a non-empty list.")
        shapes = [tuple(a.shape) for a in arrays]
        ndim = arrays[0].ndim
        if not -ndim <= self.axis < ndim:
            raise ValueError(f"concat: axis {self.axis} is out of range for tensors of shapes "
                             f"{shapes}.")
        if any(
            a.ndim != ndim or _without(a.shape, self.axis) != _without(arrays[0].shape, self.axis)
            for a in arrays
        ):
            raise ValueError(f"concat along axis {self.axis}: shapes {shapes} must agree on "
                             "every other axis.")
        self.sizes = [a.shape[self.axis] for a in arrays]
        arrays = match_float_dtypes("concat", *arrays)  # float32 with integers stays float32
        return backend.get_array_module(arrays[0]).concatenate(arrays, axis=self.axis)

    def backward(self, dout):
        # fwd: y = [a_1 | a_2 | ...] along axis  ->  da_i = the i-th block of dout
        xp = backend.get_array_module(dout)
        boundaries = [sum(self.sizes[:i + 1]) for i in range(len(self.sizes) - 1)]
        return tuple(xp.split(dout, boundaries, axis=self.axis))


class Stack(Function):
    def __init__(self, axis: int = 0):
        self.axis = axis

    def forward(self, *arrays):
        if not arrays:
            raise ValueError("stack: no tensors to stack; pass a non-empty list.")
        shapes = {tuple(a.shape) for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"stack: all tensors must have the same shape, got {sorted(shapes)}.")
        if not -(arrays[0].ndim + 1) <= self.axis <= arrays[0].ndim:
            raise ValueError(f"stack: axis {self.axis} is out of range for stacking tensors "
                             f"of shape {tuple(arrays[0].shape)}.")
        arrays = match_float_dtypes("stack", *arrays)   # float32 with integers stays float32
        return backend.get_array_module(arrays[0]).stack(arrays, axis=self.axis)

    def backward(self, dout):
        # fwd: y[..., i, ...] = a_i  ->  da_i = dout[..., i, ...]
        xp = backend.get_array_module(dout)
        return tuple(xp.take(dout, i, axis=self.axis) for i in range(dout.shape[self.axis]))


class Split(Function):
    """Split along ``axis`` into equal sections (an int) or at the given indices (a list)."""

    returns_views = True

    def __init__(self, indices_or_sections: Any, axis: int = 0):
        self.indices_or_sections, self.axis = indices_or_sections, axis

    def forward(self, a):
        xp = backend.get_array_module(a)
        n, axis = self.indices_or_sections, self.axis
        if isinstance(n, int) and n > 0 and -a.ndim <= axis < a.ndim and a.shape[axis] % n == 0:
            # equal sections as plain slices: what xp.split returns, without its Python loop
            width, before = a.shape[axis] // n, (slice(None),) * (axis % a.ndim)
            return tuple(a[before + (slice(i * width, (i + 1) * width),)] for i in range(n))
        try:
            return tuple(xp.split(a, self.indices_or_sections, axis=self.axis))
        except (ValueError, IndexError, ZeroDivisionError) as exc:  # into 0 sections
            raise ValueError(f"split of shape {tuple(a.shape)} into "
                             f"{self.indices_or_sections} along axis {self.axis}: {exc}.") from None

    def backward(self, *douts):
        # fwd: (y_1, ..., y_n) = split(a)  ->  da = concat(dy_1, ..., dy_n)
        xp = backend.get_array_module(douts[0])
        axis = self.axis % douts[0].ndim
        # already side by side in one array (attention's dq, dk, dv: _packed.py): that array
        whole = _packed.side_by_side(douts, axis)
        if whole is not None:
            return whole
        if axis == 0 or xp is not backend.get_backend("cpu").xp:
            return xp.concatenate(douts, axis=axis)
        # along a later axis (gradients in arrays of their own, e.g. attention's on the
        # NumPy path when its inputs were not one projection's split): copied on blocks of
        # the first axis on the worker threads
        widths = [d.shape[axis] for d in douts]
        da = xp.empty(douts[0].shape[:axis] + (sum(widths),) + douts[0].shape[axis + 1:],
                      dtype=douts[0].dtype)
        starts = [sum(widths[:i]) for i in range(len(widths) + 1)]
        before = (slice(None),) * (axis - 1)

        def copy(rows):
            for d, start, stop in zip(douts, starts[:-1], starts[1:], strict=True):
                da[(rows, *before, slice(start, stop))] = d[rows]
        for_blocks(copy, da.shape[0], da[0].nbytes if len(da) else 0, xp)
        return da


class Where(Function):
    def forward(self, condition, a, b):
        broadcast_shapes("where", condition.shape, a.shape, b.shape)
        a, b = match_float_dtypes("where", a, b)
        self.saved = condition
        self.a_shape, self.b_shape = a.shape, b.shape
        return backend.get_array_module(a).where(condition, a, b)

    def backward(self, dout):
        condition = self.saved
        xp = backend.get_array_module(dout)
        zero = xp.zeros((), dtype=dout.dtype)
        # fwd: y = c ? a : b  ->  da = c ? dout : 0,  db = c ? 0 : dout
        da = db = None
        if self.needs_input_grad[1]:
            da = sum_to(xp.where(condition, dout, zero), self.a_shape)
        if self.needs_input_grad[2]:
            db = sum_to(xp.where(condition, zero, dout), self.b_shape)
        return None, da, db


class MaskedFill(Function):
    def __init__(self, value: float):
        self.value = value

    def forward(self, a, mask):
        out_shape = broadcast_shapes("masked_fill", a.shape, mask.shape)
        if out_shape != tuple(a.shape):
            raise ValueError(f"masked_fill: the mask of shape {tuple(mask.shape)} must broadcast "
                             f"to the tensor's shape {tuple(a.shape)}.")
        self.saved = mask
        xp = backend.get_array_module(a)
        return xp.where(mask, xp.asarray(self.value, dtype=a.dtype), a)

    def backward(self, dout):
        mask = self.saved
        xp = backend.get_array_module(dout)
        # fwd: y = m ? v : a  ->  da = m ? 0 : dout (v is a constant)
        return xp.where(mask, xp.zeros((), dtype=dout.dtype), dout), None


def _without(shape: tuple, axis: int) -> tuple:
    shape = list(shape)
    del shape[axis]
    return tuple(shape)


def on_device_of(a: Any, value: Any) -> Any:
    """An index or mask as an array on the device of tensor ``a``."""
    value = value.data if isinstance(value, Tensor) else value
    device = a.device if isinstance(a, Tensor) else backend.device_of(a)
    return backend.as_array(value, device=device)


def _device_index(a: Any, index: Any) -> Any:
    """The index with every sequence in it as an array on a's device, its host positions
    checked first where that device is not the CPU (``_host_index.py``). Within a tuple index
    a tuple is a sequence of positions, as NumPy reads it (``a[:, (1, 1)]`` gathers column 1
    twice), so it becomes an array too: GetItem then sees the gather and adds repeats."""
    parts = tuple(_positions(p) for p in (index if isinstance(index, tuple) else (index,)))
    if (a.device if isinstance(a, Tensor) else backend.device_of(a)) != "cpu" \
            and has_host_part(parts):  # a GPU would wrap a position out of range round
        try:
            check_host_index(tuple(a.shape), parts)
        except IndexError as exc:
            raise IndexError(f"getitem on a tensor of shape {tuple(a.shape)}: {exc}.") from None
    moved = tuple(
        on_device_of(a, p) if isinstance(p, Tensor | list | tuple) or backend.is_array(p) else p
        for p in parts
    )
    return moved if isinstance(index, tuple) else moved[0]


def _positions(part: Any) -> Any:
    """A list or tuple of positions or a mask as a host array, made once (an empty one of
    integers: ``host_positions``); anything else as it is, for ``on_device_of`` to move or to
    refuse in its own words (a ragged list, strings)."""
    if isinstance(part, list | tuple):
        array = host_positions(part)
        if array is not None and array.dtype.kind in "biu":
            return array
    return part


def getitem(a, index): return GetItem(_device_index(a, index))(a)
def concat(tensors, axis=0): return Concat(axis)(*tensors)
def stack(tensors, axis=0): return Stack(axis)(*tensors)
def split(a, indices_or_sections, axis=0): return Split(indices_or_sections, axis)(a)


def where(condition, a, b):
    """``a`` where ``condition`` is true, else ``b`` (all three broadcast together)."""
    return Where()(_as_mask(a if isinstance(a, Tensor) else b, condition, "where"), a, b)


def masked_fill(a, mask, value):
    """``a`` with ``value`` wherever ``mask`` is true (e.g. -inf on masked attention scores)."""
    return MaskedFill(float(value))(a, _as_mask(a, mask, "masked_fill"))


def _as_mask(a: Any, mask: Any, op: str) -> Any:
    array = on_device_of(a, mask)
    if array.dtype.kind != "b":
        raise TypeError(f"{op}: the mask must be boolean, got dtype {array.dtype}; build it "
                        "with a comparison such as (ids == pad_id).")
    return array
