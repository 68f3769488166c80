"""Bad input gives one clear error that names what was wrong.

Each test calls an op the way a user would get it wrong and checks the exception type and that
the message names the op and the offending shapes, axes or dtypes, on every device.
"""

import re

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F


def x(*shape):
    return mt.randn(*shape)


def test_matmul_of_unaligned_matrices_names_both_shapes(device):
    with pytest.raises(ValueError, match="matmul") as info:
        F.matmul(x(2, 3), x(4, 5))
    assert "(2, 3)" in str(info.value) and "(4, 5)" in str(info.value)


def test_matmul_of_mismatched_batch_axes_says_so(device):
    with pytest.raises(ValueError, match=r"matmul \(batch axes\)"):
        F.matmul(x(2, 3, 4), x(3, 4, 5))


def test_matmul_of_a_scalar_is_refused(device):
    with pytest.raises(ValueError, match=re.escape("matmul: both operands need at least one")):
        F.matmul(mt.tensor(2.0), x(3))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow"])
def test_binary_op_of_unbroadcastable_shapes_names_both(device, op):
    with pytest.raises(ValueError, match=re.escape(f"{op}: shapes (2, 3) and (4,) cannot be "
                                                   "broadcast")):
        getattr(F, op)(x(2, 3), x(4))


def test_operator_plus_raises_the_same_error(device):
    with pytest.raises(ValueError, match=re.escape("add: shapes (2, 3) and (4,)")):
        x(2, 3) + x(4)


@pytest.mark.parametrize("value", [None, "2"])
def test_an_operand_that_is_not_a_number_is_refused(device, value):
    """x + None once gave a tensor of nan, silently."""
    with pytest.raises(TypeError, match=re.escape(f"Add: an input is {value!r}, not a number")):
        x(2, 3) + value
    with pytest.raises(TypeError, match="Mul: an input is None"):
        None * x(2, 3)


def test_reshape_to_an_impossible_shape_names_both_shapes(device):
    with pytest.raises(ValueError, match=re.escape("shape (2, 3) (6 elements) into shape (4, 2)")):
        F.reshape(x(2, 3), (4, 2))


def test_concat_of_mismatched_shapes_names_them(device):
    with pytest.raises(ValueError, match=re.escape("concat along axis 1: shapes [(2, 3), (3, 3)]")):
        F.concat([x(2, 3), x(3, 3)], axis=1)


def test_concat_of_different_ranks_is_refused(device):
    with pytest.raises(ValueError, match=re.escape("shapes [(2, 3), (3,)]")):
        F.concat([x(2, 3), x(3)], axis=0)


def test_stack_of_different_shapes_names_them(device):
    with pytest.raises(ValueError, match=re.escape("stack: all tensors must have the same shape, "
                                                   "got [(2, 3), (3, 2)]")):
        F.stack([x(2, 3), x(3, 2)])


def test_transpose_with_a_repeated_axis_names_axes_and_shape(device):
    with pytest.raises(ValueError, match=re.escape("transpose: axes (0, 0) are not a permutation "
                                                   "of the 2 axes of a tensor of shape (2, 3)")):
        F.transpose(x(2, 3), (0, 0))


def test_transpose_with_too_many_axes_is_refused(device):
    with pytest.raises(ValueError, match=re.escape("axes (1, 0, 2)")):
        F.transpose(x(2, 3), (1, 0, 2))


@pytest.mark.parametrize("axes", [(0, 5), (0, -3), (2, 1)], ids=str)
def test_transpose_with_an_out_of_range_axis_is_refused(device, axes):
    # Known bug: axes are reduced modulo ndim before the check, so (0, 5) on a 2-D tensor is
    # taken as (0, 1) and silently returns the input; NumPy raises AxisError here.
    with pytest.raises(ValueError, match=re.escape(f"transpose: axes {axes}")):
        F.transpose(x(2, 3), axes)


def test_swapaxes_out_of_range_names_axis_and_shape(device):
    with pytest.raises(ValueError, match=re.escape("swapaxes: axis 2 is out of range for shape "
                                                   "(2, 3)")):
        F.swapaxes(x(2, 3), 0, 2)


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
@pytest.mark.parametrize("axis", [2, -3, (0, 2)])
def test_reduction_over_an_out_of_range_axis(device, op, axis):
    bad = 2 if axis != -3 else -3
    with pytest.raises(ValueError, match=re.escape(f"{op}: axis {bad} is out of range for a "
                                                   "tensor with 2 dimensions")):
        getattr(F, op)(x(2, 3), axis=axis)


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_reduction_over_a_repeated_or_non_integer_axis(device, op):
    """(0, -2) failed inside NumPy ("duplicate value in 'axis'"), 1.0 with "'float' object
    is not iterable"."""
    with pytest.raises(ValueError, match=re.escape(f"{op}: axis (0, -2) names the same axis "
                                                   "twice")):
        getattr(F, op)(x(2, 3), axis=(0, -2))
    with pytest.raises(TypeError, match=re.escape(f"{op}: axis must be an integer or a tuple "
                                                  "of integers, got 1.0")):
        getattr(F, op)(x(2, 3), axis=1.0)


def test_joining_no_tensors_and_splitting_into_none_are_refused(device):
    with pytest.raises(ValueError, match="concat: no tensors to join"):
        F.concat([])
    with pytest.raises(ValueError, match="stack: no tensors to stack"):
        F.stack([])
    with pytest.raises(ValueError, match=re.escape("split of shape (2, 4) into 0 along axis")):
        F.split(x(2, 4), 0, axis=-1)


@pytest.mark.parametrize("T", [-1, 2.5])
def test_a_causal_mask_of_an_impossible_length_is_refused(device, T):
    """-1 gave an empty mask, 2.5 a (3, 3) one."""
    with pytest.raises(ValueError, match=re.escape(f"causal_mask: T must be a non-negative "
                                                   f"integer (the sequence length), got {T!r}")):
        F.causal_mask(T)


def test_max_of_an_empty_tensor_is_refused(device):
    with pytest.raises(ValueError, match="max of an empty tensor"):
        F.max(mt.zeros(0))


@pytest.mark.parametrize("index", [5, (0, 3), -3], ids=["row", "column", "negative"])
def test_getitem_out_of_bounds_names_the_tensor_shape(device, index):
    with pytest.raises(IndexError, match=re.escape("getitem on a tensor of shape (2, 3)")):
        x(2, 3)[index]


def test_getitem_out_of_bounds_index_array_names_the_tensor_shape(device):
    """On a GPU too: the host index is checked before it moves there, where CuPy would wrap
    row 5 round to row 1 (the strict device wraps as CuPy does)."""
    with pytest.raises(IndexError, match=re.escape("getitem on a tensor of shape (2, 3)")):
        x(2, 3)[[0, 5]]


@pytest.mark.parametrize("index", [
    pytest.param([0, 5], id="a list"),
    pytest.param(np.array([-3, 1]), id="a negative position"),
    pytest.param((slice(None), [0, 7]), id="after a slice"),
    pytest.param((Ellipsis, [0, 9]), id="after an ellipsis"),
    pytest.param((None, [2, 0]), id="after a new axis"),
    pytest.param((0, np.array([[1], [6]])), id="a 2-D array after an integer"),
    pytest.param((np.array([True, False]), [0, 3]), id="after a mask"),
    pytest.param((Ellipsis, 1, [1, -5]), id="an ellipsis, an integer, a list"),
    pytest.param((slice(None), mt.tensor([0, 3], device="cpu")), id="a CPU Tensor"),
])
def test_a_host_index_out_of_range_gets_numpys_error_on_every_device(device, index):
    """The same axis and size as NumPy names, whichever axis the index array selects on
    (after slices, an ellipsis, a new axis, an integer or a boolean mask)."""
    shape = (2, 3, 4)
    parts = index if isinstance(index, tuple) else (index,)
    as_numpy = tuple(p.numpy() if isinstance(p, mt.Tensor) else p for p in parts)
    with pytest.raises(IndexError) as numpys:
        np.zeros(shape)[as_numpy if isinstance(index, tuple) else as_numpy[0]]
    with pytest.raises(IndexError, match=re.escape(f"shape {shape}: {numpys.value}.")):
        x(*shape)[index]


def test_a_device_mask_that_selects_nothing_lets_any_host_position_pass():
    """NumPy reads no position of a gather of nothing, and a device mask's count is not read:
    so the host positions beside it are not refused (NumPy's empty result)."""
    with mt.backend.device("strict"):
        nothing = mt.backend.as_array(np.array([False, False]), device="strict")
        assert x(2, 3)[nothing, [7]].shape == (0,)
        false = mt.backend.as_array(np.array(False), device="strict")  # a 0-d mask
        assert x(2, 3)[false, [7]].shape == (0, 3)


def test_an_index_on_the_device_is_not_read_on_the_host():
    """A device index is not checked (that would make the host wait for the GPU): a position
    out of range in it wraps round on a GPU, as CuPy documents."""
    from strict_backend import host_reads

    with mt.backend.device("strict"):
        rows = mt.backend.as_array(np.array([0, 2]), device="strict")
        with host_reads() as reads:
            x(3, 2)[rows]
        assert reads == []


def test_masked_fill_with_a_non_boolean_mask_is_a_type_error(device):
    mask = mt.tensor([[1, 0, 1], [0, 0, 1]])
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean, got dtype int"):
        F.masked_fill(x(2, 3), mask, 0.0)


def test_masked_fill_with_an_unbroadcastable_mask_names_both_shapes(device):
    with pytest.raises(ValueError, match=re.escape("masked_fill: shapes (2, 3) and (2,)")):
        F.masked_fill(x(2, 3), mt.tensor([True, False]), 0.0)


def test_masked_fill_with_a_mask_larger_than_the_tensor(device):
    mask = mt.tensor([[True, False, True], [False, True, False]])
    with pytest.raises(ValueError, match=re.escape("mask of shape (2, 3) must broadcast to the "
                                                   "tensor's shape (3,)")):
        F.masked_fill(x(3), mask, 0.0)


def test_where_with_a_non_boolean_condition_is_a_type_error(device):
    with pytest.raises(TypeError, match="where: the mask must be boolean"):
        F.where(mt.tensor([1, 0, 1]), x(3), x(3))


def test_where_with_unbroadcastable_shapes_names_them(device):
    with pytest.raises(ValueError, match=re.escape("where: shapes (2,) and (3,) and (3,)")):
        F.where(mt.tensor([True, False]), x(3), x(3))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_astype_to_a_non_float_dtype_is_a_type_error(device, dtype):
    with pytest.raises(TypeError, match=re.escape(f"astype({dtype}): only float dtypes")):
        F.astype(x(2, 3), dtype)


def test_astype_to_something_that_is_not_a_dtype(device):
    with pytest.raises(TypeError, match="'float33' is not a dtype"):
        F.astype(x(2), "float33")


def test_split_into_unequal_sections_names_shape_and_sections(device):
    with pytest.raises(ValueError, match=re.escape("split of shape (5,) into 2 along axis 0")):
        F.split(x(5), 2)


def test_broadcast_to_an_incompatible_shape_names_both(device):
    with pytest.raises(ValueError, match=re.escape("broadcast_to: shapes (2, 3) and (3, 3)")):
        F.broadcast_to(x(2, 3), (3, 3))


def test_broadcast_to_a_smaller_shape_is_refused(device):
    with pytest.raises(ValueError, match=re.escape("cannot broadcast shape (2, 3) to (3,)")):
        F.broadcast_to(x(2, 3), (3,))


def test_sum_to_a_shape_that_does_not_broadcast_back(device):
    with pytest.raises(ValueError, match=re.escape("sum_to: shapes (2, 3) and (4,)")):
        F.sum_to(x(2, 3), (4,))


def test_sum_to_a_larger_shape_is_refused(device):
    with pytest.raises(ValueError, match=re.escape("sum_to: shape (2, 3) does not broadcast to "
                                                   "(3,)")):
        F.sum_to(x(3), (2, 3))


def test_attention_with_a_non_boolean_mask_says_the_mask_must_be_boolean(device):
    q = x(2, 3).astype("float64")             # a float32 mask beside float64 inputs, too
    for mask in (mt.tensor([[1.0, 0.0, 1.0]] * 2, dtype="float32"), mt.tensor([[1, 0, 1]] * 2)):
        with pytest.raises(TypeError, match="scaled_dot_product_attention: the mask must be "
                                            "boolean"):
            F.scaled_dot_product_attention(q, q, q, mask)


@pytest.mark.parametrize("eps", [0, -1e-5, float("nan"), True])
def test_layer_norm_with_an_eps_that_gives_nan_is_refused(device, eps):
    with pytest.raises(ValueError, match=re.escape(f"layer_norm: eps must be a number > 0 (it "
                                                   f"keeps 1/√(σ² + eps) finite for a constant "
                                                   f"row), got {eps!r}")):
        F.layer_norm(x(2, 4), mt.ones(4), mt.zeros(4), eps)


def test_linear_of_integer_input_says_to_convert_it(device):
    ids = mt.tensor([[1, 2, 3, 4]])
    with pytest.raises(TypeError, match="linear: the input and the weight must be floating "
                                        "point, got dtypes int64 and float32"):
        F.linear(ids, x(5, 4))


INTEGER_INPUTS = {
    "softmax": lambda ids: F.softmax(ids),
    "log_softmax": lambda ids: F.log_softmax(ids),
    "layer_norm": lambda ids: F.layer_norm(ids, mt.ones(4), mt.zeros(4)),
    "dropout": lambda ids: F.dropout(ids, 0.5),
    "scaled_dot_product_attention": lambda ids: F.scaled_dot_product_attention(ids, ids, ids),
    "cross_entropy": lambda ids: F.cross_entropy(ids, mt.tensor([0, 1, 2])),
}


@pytest.mark.parametrize("op", sorted(INTEGER_INPUTS))
def test_integer_input_to_an_op_on_real_numbers_says_to_convert_it(device, op):
    """These failed with NumPy's casting error from deep inside (softmax quietly returned
    float64)."""
    ids = mt.tensor([[1, 2, 3, 4]] * 3)
    with pytest.raises(TypeError, match=re.escape(f"{op}: ") + r"\w+ must be floating point, "
                                        r"got dtype int64; convert it with \.astype"):
        INTEGER_INPUTS[op](ids)


@pytest.mark.parametrize("ignore_index", [0.0, "0", True])
def test_cross_entropy_ignore_index_must_be_a_class_id(device, ignore_index):
    """A float ignore_index was accepted."""
    with pytest.raises(ValueError, match=re.escape(f"cross_entropy: ignore_index must be a class "
                                                   f"id (an integer, e.g. the padding id) or "
                                                   f"None, got {ignore_index!r}")):
        F.cross_entropy(x(3, 4), mt.tensor([0, 1, 2]), ignore_index=ignore_index)


@pytest.mark.parametrize("op", ["embedding", "cross_entropy"])
def test_one_out_of_range_id_is_named_once(device, op):
    ids = mt.tensor([7, 7, 7])
    with pytest.raises(ValueError) as info:
        if op == "embedding":
            F.embedding(ids, x(5, 2))
        else:
            F.cross_entropy(x(3, 5), ids)
    assert "id 7 is outside" in str(info.value) and "7 and 7" not in str(info.value)


def test_cross_entropy_backward_after_a_forward_without_gradients_says_so():
    from minitransformer.functional.loss import CrossEntropy
    loss = CrossEntropy(0.1)
    with mt.no_grad():
        loss.forward(np.zeros((2, 3), np.float32), np.array([0, 1]))
    with pytest.raises(RuntimeError, match="forward pass that kept no gradient"):
        loss.backward(np.float32(1.0))
