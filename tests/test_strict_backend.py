"""The strict test backend is only useful if it is as strict as CuPy: prove that it is."""

import numpy as np
import pytest
from strict_backend import StrictArray, strict_xp


def strict(values):
    return strict_xp.asarray(np.asarray(values, dtype=np.float32))


def test_implicit_conversion_to_numpy_is_refused():
    x = strict([1.0, 2.0])
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(x)


def test_mixing_with_numpy_arrays_is_refused():
    x = strict([1.0, 2.0])
    with pytest.raises(TypeError, match="Unsupported type"):
        x + np.ones(2, dtype=np.float32)
    with pytest.raises(TypeError, match="Unsupported type"):
        np.ones(2, dtype=np.float32) * x


def test_numpy_functions_are_refused_and_xp_functions_work():
    x = strict([[1.0, 2.0]])
    with pytest.raises(TypeError):
        np.concatenate([x, x])
    joined = strict_xp.concatenate([x, x])
    assert isinstance(joined, StrictArray) and joined.shape == (2, 2)


def test_results_stay_strict_and_explicit_transfer_works():
    x = strict([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(x.sum(axis=0), StrictArray)
    assert isinstance(strict_xp.exp(x), StrictArray)
    np.testing.assert_allclose(x.get(), [[1.0, 2.0], [3.0, 4.0]])
    assert float(x.sum()) == 10.0


def ids(values):
    return strict_xp.asarray(np.asarray(values))


@pytest.mark.parametrize("gather", [
    pytest.param(lambda x, i: x[i], id="x[i]"),
    pytest.param(lambda x, i: x[[0, 3, -1]], id="a list, which CuPy makes an array"),
    pytest.param(lambda x, i: x[None][:, (0, 3, -1)][0], id="a tuple inside the index"),
    pytest.param(lambda x, i: x[np.True_, i], id="beside NumPy's True"),
    pytest.param(lambda x, i: x[..., i], id="after an ellipsis"),
    pytest.param(lambda x, i: x[None, i][0], id="after a new axis"),
    pytest.param(lambda x, i: strict_xp.take(x, i), id="take"),
    pytest.param(lambda x, i: strict_xp.take_along_axis(x, i, axis=0), id="take_along_axis"),
])
def test_an_index_out_of_range_wraps_round_as_on_cupy(gather):
    """CuPy's gathers wrap an integer index round where NumPy refuses it: the stand-in too, so
    code that counts on NumPy's IndexError for a device index fails here as on a GPU. Rows
    0, 3 and -1 of three are rows 0, 0 and 2."""
    taken = gather(strict([0.0, 1.0, 2.0]), ids([0, 3, -1]))
    np.testing.assert_array_equal(taken.get(), [0.0, 0.0, 2.0])


def test_an_index_out_of_range_wraps_round_in_writes_as_on_cupy():
    x = strict([0.0, 0.0, 0.0])
    x[ids([4])] = 5.0                                 # row 4 of 3 is row 1
    strict_xp.add.at(x, ids([3, 3]), 1.0)             # row 3 is row 0, twice
    strict_xp.put(x, ids([5]), 7.0)                   # row 5 is row 2
    np.testing.assert_array_equal(x.get(), [2.0, 5.0, 7.0])
