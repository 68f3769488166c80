"""Undo broadcasting: the one helper every binary op's backward uses.

If forward broadcast ``x`` of shape (4,) against (3, 4), each x[j] was used by 3 outputs, so
its gradient is the sum of those 3 output gradients: sum ``dout`` over the axes broadcasting
added (leading ones) and over the axes where ``x`` had size 1 (kept, with keepdims).
"""

from __future__ import annotations

from typing import Any


def sum_to(array: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``array`` down to ``shape`` (the inverse of broadcasting ``shape`` to array.shape)."""
    shape = tuple(shape)
    if tuple(array.shape) == shape:
        return array
    n_leading = array.ndim - len(shape)
    if n_leading < 0:
        raise ValueError(f"sum_to: cannot reduce shape {tuple(array.shape)} to the larger "
                         f"shape {shape}.")
    stretched = tuple(n_leading + i for i, n in enumerate(shape)
                      if n == 1 and array.shape[n_leading + i] != 1)
    out = array.sum(axis=tuple(range(n_leading)) + stretched, keepdims=True)
    return out.reshape(shape)


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast result shape, or a ValueError naming the op and both shapes."""
    ndim = max(len(s) for s in shapes)
    result = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise ValueError(f"{op}: shapes {listed} cannot be broadcast together (axis "
                             f"{axis} has sizes {sorted(sizes)}); each axis must match or be 1.")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def match_float_dtypes(op: str, *arrays: Any) -> tuple[Any, ...]:
    """Operands of one float dtype: integer and boolean operands (masks, counts) take the float
    operands' dtype, so ``x32 * int_mask`` stays float32 instead of promoting to float64.
    Two different float dtypes are refused: a silent float64 would leak into a float32 step."""
    floats = {a.dtype for a in arrays if a.dtype.kind == "f"}
    if len(floats) > 1:
        names = " and ".join(sorted(str(d) for d in floats))
        raise TypeError(f"{op}: operands of dtypes {names} are mixed; cast one with "
                        ".astype(...) so both have the same float dtype.")
    if not floats:
        return arrays
    dtype = floats.pop()
    return tuple(a if a.dtype == dtype else a.astype(dtype) for a in arrays)


def require_float(op: str, **arrays: Any) -> None:
    """Refuse integer or boolean operands where the op needs real numbers: NumPy would fail
    with a casting error deep inside, or quietly compute in float64."""
    for name, array in arrays.items():
        if array.dtype.kind != "f":
            raise TypeError(f"{op}: {name} must be floating point, got dtype {array.dtype}; "
                            "convert it with .astype('float32') (token ids go through an "
                            "embedding first).")
