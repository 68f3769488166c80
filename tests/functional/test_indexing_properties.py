"""Indexing a Tensor is NumPy's indexing on every device, for generated shapes and indices:
the same values wherever NumPy takes the index, and NumPy's IndexError (the same words, after
the tensor's shape) wherever it refuses it. On the strict device, which wraps a device index
out of range round as CuPy does, that holds only because a host index is checked before it
moves there."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitransformer as mt


@st.composite
def shapes_and_indices(draw):
    """A shape of 1-4 axes (sides 0-4) and an index into it: for each of its first axes a
    slice, an integer, a list of integers or a NumPy array of them (possibly out of range,
    negative ones too) or a boolean mask, maybe with an ellipsis, a new axis or True among
    them."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=4)))
    parts = []
    for n in shape[:draw(st.integers(1, len(shape)))]:
        kind = draw(st.sampled_from(["slice", "integer", "list", "array", "mask"]))
        if kind == "mask":  # of the axis's length, or (refused) one more
            parts.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n + 1))))
        elif kind == "slice":
            parts.append(draw(st.slices(max(n, 1))))
        elif kind == "integer":
            parts.append(draw(st.integers(-n - 1, n)))
        else:
            rows = draw(st.lists(st.integers(-2 * n - 1, 2 * n + 1), min_size=1, max_size=3))
            parts.append(rows if kind == "list" else np.array(rows))
    extra = draw(st.sampled_from([None, Ellipsis, True]))
    if extra is not None or draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), extra)
    return shape, parts[0] if len(parts) == 1 and draw(st.booleans()) else tuple(parts)


@pytest.mark.parametrize("device", ["cpu", "strict"])
@settings(max_examples=300, deadline=None)
@given(case=shapes_and_indices())
def test_tensor_indexing_is_numpys_on_every_device(device, case):
    shape, index = case
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    try:
        expected = values[index]
    except IndexError as exc:
        with mt.backend.device(device), pytest.raises(
                IndexError, match=re.escape(f"getitem on a tensor of shape {shape}: {exc}.")):
            mt.tensor(values)[index]
        return
    with mt.backend.device(device):
        taken = mt.tensor(values)[index]
    np.testing.assert_array_equal(taken.numpy(), expected)
