"""Indexing a Tensor is NumPy's indexing on every device, for generated shapes and indices:
the same values wherever NumPy takes the index, and NumPy's IndexError (the same words, after
the tensor's shape) wherever it refuses it for a position out of range. On the strict device,
which wraps a device index out of range round as CuPy does, that holds only because a host
index is checked before it moves there (``functional/_host_index.py``)."""

import re

import numpy as np
import pytest
from conftest import DEVICES
from hypothesis import given, settings
from hypothesis import strategies as st

import minitransformer as mt
from minitransformer.functional._host_index import _host_parts, index_axes


def positions(n):
    """Positions along an axis of n, some out of range (negative ones too)."""
    return st.integers(-2 * n - 1, 2 * n + 1)


@st.composite
def shapes_and_indices(draw, in_range=False):
    """A shape of 1-4 axes (sides 0-4) and an index into it: for each of its first axes (one
    more, now and then) a slice, an integer (Python's or NumPy's), a list, a tuple or an
    array of integers (signed or not, 0-d too, empty too), a CPU Tensor of them, or a boolean
    mask (of the axis's length, or one more); maybe with an ellipsis (or two), a new axis,
    True or False (Python's or NumPy's) among them. ``in_range``: every position inside its
    axis."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=4)))
    parts = []
    n_parts = draw(st.integers(1, len(shape) + (0 if in_range else 1)))
    for n in (shape + (3,))[:n_parts]:
        kind = draw(st.sampled_from(["slice", "integer", "numpy integer", "list", "tuple",
                                     "array", "unsigned", "0-d", "tensor", "mask", "nested"]))
        if in_range:
            rows = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3)) if n else []
        else:
            rows = draw(st.lists(positions(n), min_size=0, max_size=3))
        if kind == "slice":
            parts.append(draw(st.slices(max(n, 1))))
        elif kind in ("integer", "numpy integer", "0-d"):
            if in_range and not n:
                parts.append(slice(None))
                continue
            row = draw(st.integers(-n, n - 1) if in_range else positions(n))
            parts.append(row if kind == "integer" else np.int64(row) if kind == "numpy integer"
                         else np.array(row))
        elif kind == "list":
            parts.append(rows)
        elif kind == "nested":  # a list of one list: a 2-D array of positions ([[]] too)
            parts.append([rows])
        elif kind == "tuple":
            parts.append(tuple(rows))
        elif kind == "array":
            parts.append(np.array(rows, dtype=np.int64))
        elif kind == "unsigned":
            parts.append(np.array([r % max(n, 1) if in_range else abs(r) for r in rows],
                                  dtype=np.uint32))
        elif kind == "tensor":
            parts.append(mt.tensor(np.array(rows, dtype=np.int64), device="cpu"))
        else:
            size = n if in_range else draw(st.sampled_from([n, n + 1]))
            parts.append(np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size))))
    for extra in draw(st.lists(st.sampled_from([Ellipsis, None, True, False, np.True_,
                                                np.False_]),
                               max_size=1 if in_range else 2)):
        if in_range and extra is Ellipsis and any(p is Ellipsis for p in parts):
            continue
        parts.insert(draw(st.integers(0, len(parts))), extra)
    return shape, parts[0] if len(parts) == 1 and draw(st.booleans()) else tuple(parts)


def as_numpy(index):
    """The index with CPU Tensors as their arrays, as NumPy takes it."""
    parts = index if isinstance(index, tuple) else (index,)
    parts = tuple(p.numpy() if isinstance(p, mt.Tensor) else p for p in parts)
    return parts if isinstance(index, tuple) else parts[0]


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=300, deadline=None)
@given(case=shapes_and_indices())
def test_tensor_indexing_is_numpys_on_every_device(device, case):
    shape, index = case
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    try:
        expected = values[as_numpy(index)]
    except IndexError as exc:
        if "out of bounds" not in str(exc):  # refused for its form: some error, any words
            with mt.backend.device(device), pytest.raises((IndexError, TypeError, ValueError)):
                mt.tensor(values)[index]
            return
        with mt.backend.device(device), pytest.raises(
                IndexError, match=re.escape(f"getitem on a tensor of shape {shape}: {exc}.")):
            mt.tensor(values)[index]
        return
    except (TypeError, ValueError):
        return  # not an index NumPy takes at all (a float array, a ragged list)
    with mt.backend.device(device):
        taken = mt.tensor(values)[index]
    np.testing.assert_array_equal(taken.numpy(), expected)


@settings(max_examples=300, deadline=None)
@given(case=shapes_and_indices(in_range=True), data=st.data())
def test_index_axes_names_the_axis_numpy_names(case, data):
    """Put one position far out of range into one integer part: NumPy's error names the axis
    that ``index_axes`` gives that part, so the host check tests against the right size."""
    shape, index = case
    parts = list(index) if isinstance(index, tuple) else [index]
    parts = [p.numpy() if isinstance(p, mt.Tensor) else p for p in parts]
    axes = index_axes(_host_parts(tuple(parts)), len(shape))
    integers = [i for i, p in enumerate(parts)
                if np.asarray(p).dtype.kind in "iu" and not isinstance(p, bool)
                and p is not None and p is not Ellipsis and not isinstance(p, slice)]
    if axes is None or not integers:
        return
    i = data.draw(st.sampled_from(integers))
    parts[i] = np.array(10**6)
    try:
        np.zeros(shape)[tuple(parts)]
    except IndexError as exc:
        named = re.search(r"index 1000000 is out of bounds for axis (\d+) with size", str(exc))
        if named:  # (not where another part, moved by an ellipsis, is out of range first)
            assert int(named.group(1)) == axes[i], str(exc)
