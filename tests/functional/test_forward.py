"""Forward values of every functional op against a slow, obvious NumPy version.

Inputs are made on the host with NumPy, the op runs on the current device (``device`` fixture:
cpu, the strict CuPy-like backend, cuda when present) and the result is compared with a
reference written as a loop over elements. Every comparison also checks that the result is an
array of the device's backend and that float32 stays float32.
"""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F


def host(*shape, seed=0, low=None):
    """float32 test data on the host; ``low`` shifts |values| to at least ``low``."""
    x = np.random.default_rng(seed).standard_normal(shape)
    if low is not None:
        x = np.sign(x) * (np.abs(x) + low)
    return np.asarray(x, dtype=np.float32)


def dev(data, dtype=None):
    """``data`` as a tensor on the current device (``mt.tensor`` keeps NumPy arrays on the cpu)."""
    return mt.tensor(data, dtype=dtype, device=backend.current_device())


def check(y, expected, device, dtype=np.float32, rtol=1e-5, atol=1e-6):
    """``y`` lives on ``device``, has ``dtype`` and the values of ``expected``."""
    assert backend.device_of(y.data) == device
    assert isinstance(y.data, backend.get_backend(device).array_types)
    assert y.dtype == dtype
    expected = np.asarray(expected, dtype=np.float64)
    assert y.shape == expected.shape
    assert_allclose(y.numpy(), expected, rtol=rtol, atol=atol)


def slow_elementwise(fn, *arrays):
    """fn applied to each output position, reading inputs with NumPy's broadcasting rule."""
    out_shape = np.broadcast_shapes(*(a.shape for a in arrays))
    out = np.empty(out_shape)
    for index in np.ndindex(out_shape):
        args = []
        for a in arrays:
            tail = index[len(index) - a.ndim:]  # align on the right
            args.append(a[tuple(i if n != 1 else 0 for i, n in zip(tail, a.shape, strict=True))])
        out[index] = fn(*(float(v) for v in args))
    return out


def slow_reduce(fn, a, axis, keepdims):
    """fn of the list of elements that fall into each output position."""
    axes = range(a.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    axes = {ax % a.ndim for ax in axes}
    groups: dict = {}
    for index in np.ndindex(a.shape):
        key = tuple(0 if ax in axes else i for ax, i in enumerate(index))
        groups.setdefault(key, []).append(float(a[index]))
    shape = tuple(1 if ax in axes else n for ax, n in enumerate(a.shape))
    out = np.empty(shape)
    for key, values in groups.items():
        out[key] = fn(values)
    return out if keepdims else out.reshape([n for ax, n in enumerate(a.shape) if ax not in axes])


def slow_matmul(a, b):
    """Batched a @ b by three loops; 1-D operands become (1, k) and (k, 1), then are dropped."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    n, k, m = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    out = np.zeros(batch + (n, m))
    for bi in np.ndindex(batch):
        for i in range(n):
            for j in range(m):
                out[bi + (i, j)] = sum(float(a2[bi + (i, p)]) * float(b2[bi + (p, j)])
                                       for p in range(k))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


BINARY = {"add": lambda u, v: u + v, "sub": lambda u, v: u - v,
          "mul": lambda u, v: u * v, "div": lambda u, v: u / v}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (3, 4)), ((2, 3, 4), (4,)),
                                              ((3, 1), (1, 4)), ((2, 1, 4), (3, 1)), ((), (3,))])
def test_binary_ops_broadcast_like_numpy(device, op, a_shape, b_shape):
    a, b = host(*a_shape, seed=1), host(*b_shape, seed=2, low=0.5)
    y = getattr(F, op)(dev(a), dev(b))
    check(y, slow_elementwise(BINARY[op], a, b), device)


UNARY = [("neg", F.neg, lambda u: -u, None), ("exp", F.exp, math.exp, None),
         ("log", F.log, math.log, "positive"), ("sqrt", F.sqrt, math.sqrt, "positive"),
         ("tanh", F.tanh, math.tanh, None), ("relu", F.relu, lambda u: max(u, 0.0), None),
         ("pow3", lambda x: F.pow(x, 3.0), lambda u: u ** 3, None),
         ("pow_half", lambda x: x ** 0.5, math.sqrt, "positive")]


@pytest.mark.parametrize("name, fn, scalar_fn, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ops_match_scalar_math(device, name, fn, scalar_fn, domain):
    x = host(2, 3, 4, seed=3)
    if domain == "positive":
        x = np.abs(x) + np.float32(0.1)
    check(fn(dev(x)), slow_elementwise(scalar_fn, x), device)


def test_pow_with_a_tensor_exponent_broadcasts(device):
    a, p = np.abs(host(3, 4, seed=4)) + np.float32(0.5), host(4, seed=5)
    check(F.pow(dev(a), dev(p)), slow_elementwise(math.pow, a, p), device)


def test_astype_converts_float32_to_float64(device):
    x = host(2, 3)
    check(F.astype(dev(x), "float64"), x, device, dtype=np.float64, rtol=0, atol=0)


REDUCTIONS = {"sum": (F.sum, math.fsum), "mean": (F.mean, lambda v: math.fsum(v) / len(v)),
              "max": (F.max, max)}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", [None, 0, 2, -1, -2, (0, 2), (-1, 0), (0, 1, 2)])
@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keepdims"])
def test_reductions_match_a_loop_over_elements(device, op, axis, keepdims):
    x = host(2, 3, 4, seed=6)
    fn, scalar_fn = REDUCTIONS[op]
    check(fn(dev(x), axis=axis, keepdims=keepdims),
          slow_reduce(scalar_fn, x, axis, keepdims), device)


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_reductions_over_a_size_one_axis(device, op):
    x = host(3, 1, 2, seed=7)
    fn, scalar_fn = REDUCTIONS[op]
    check(fn(dev(x), axis=1), slow_reduce(scalar_fn, x, 1, False), device)


def test_reshape_keeps_row_major_order(device):
    x = host(2, 3, 4)
    y = F.reshape(dev(x), (4, -1))
    assert y.shape == (4, 6)
    check(y, np.array([float(v) for v in x.ravel()]).reshape(4, 6), device, rtol=0, atol=0)


@pytest.mark.parametrize("axes", [None, (2, 0, 1), (1, 0, 2), (-1, 0, -2)])
def test_transpose_moves_each_element(device, axes):
    x = host(2, 3, 4)
    perm = [ax % 3 for ax in axes] if axes is not None else [2, 1, 0]
    out_shape = tuple(x.shape[ax] for ax in perm)
    expected = np.empty(out_shape)
    for j in np.ndindex(out_shape):  # y[j] = x[i] with i[perm[k]] = j[k]
        i = [0, 0, 0]
        for k, ax in enumerate(perm):
            i[ax] = j[k]
        expected[j] = x[tuple(i)]
    check(F.transpose(dev(x), axes), expected, device, rtol=0, atol=0)


def test_swapaxes_exchanges_two_axes(device):
    x = host(2, 3, 4)
    expected = np.empty((4, 3, 2))
    for i, j, k in np.ndindex(x.shape):
        expected[k, j, i] = x[i, j, k]
    check(F.swapaxes(dev(x), 0, -1), expected, device, rtol=0, atol=0)


def test_broadcast_to_copies_along_new_and_size_one_axes(device):
    x = host(3, 1)
    expected = slow_elementwise(lambda u, _: u, x, np.zeros((2, 3, 4)))
    check(F.broadcast_to(dev(x), (2, 3, 4)), expected, device, rtol=0, atol=0)


def test_sum_to_sums_over_broadcast_axes(device):
    x = host(2, 3, 4)
    expected = x.astype(np.float64).sum(axis=(0, 2)).reshape(3, 1)
    check(F.sum_to(dev(x), (3, 1)), expected, device)


def test_getitem_slices_and_integers(device):
    x = host(4, 5)
    y = dev(x)
    check(y[1:, ::2], [[x[i, j] for j in range(0, 5, 2)] for i in range(1, 4)], device)
    check(y[2], [x[2, j] for j in range(5)], device)
    check(y[-1, 3], x[3, 3], device)


def test_getitem_with_integer_arrays_repeats_rows(device):
    x = host(4, 5)
    rows, cols = [3, 0, 0, -1], [1, 4, 4, 0]
    check(dev(x)[rows], [x[r] for r in rows], device)
    check(dev(x)[dev(rows), dev(cols)],
          [x[r, c] for r, c in zip(rows, cols, strict=True)], device)


def test_getitem_with_a_boolean_mask_keeps_masked_elements_in_order(device):
    x = host(3, 4)
    mask = x > 0
    y = dev(x)[dev(mask)]
    check(y, [x[i] for i in np.ndindex(x.shape) if mask[i]], device)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_joins_blocks(device, axis):
    a, b = host(2, 3, seed=1), host(2, 3, seed=2)
    expected = np.concatenate([a, b], axis=axis)
    check(F.concat([dev(a), dev(b)], axis=axis), expected, device, rtol=0, atol=0)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_adds_an_axis(device, axis):
    parts = [host(2, 3, seed=s) for s in range(3)]
    expected = np.moveaxis(np.array(parts), 0, axis)  # parts[i] at position i along axis
    check(F.stack([dev(p) for p in parts], axis=axis), expected, device, rtol=0, atol=0)


@pytest.mark.parametrize("spec, bounds", [(3, [(0, 2), (2, 4), (4, 6)]),
                                          ([1, 4], [(0, 1), (1, 4), (4, 6)])],
                         ids=["sections", "indices"])
def test_split_cuts_at_sections_or_indices(device, spec, bounds):
    x = host(2, 6)
    parts = F.split(dev(x), spec, axis=1)
    assert isinstance(parts, tuple) and len(parts) == len(bounds)
    for part, (start, stop) in zip(parts, bounds, strict=True):
        check(part, [[x[i, j] for j in range(start, stop)] for i in range(2)], device)


def test_where_broadcasts_condition_and_branches(device):
    cond, a, b = host(3, 1) > 0, host(4, seed=1), host(3, 4, seed=2)
    expected = slow_elementwise(lambda c, u, v: u if c else v, cond, a, b)
    check(F.where(dev(cond), dev(a), dev(b)), expected, device)


def test_masked_fill_broadcasts_the_mask(device):
    x, mask = host(2, 3, 4), host(3, 4, seed=1) > 0
    expected = slow_elementwise(lambda u, m: -1e9 if m else u, x, mask)
    check(F.masked_fill(dev(x), dev(mask), -1e9), expected, device)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                              ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 5)),
                                              ((3, 4), (4,)), ((4,), (2, 4, 3)), ((4,), (4,))])
def test_matmul_matches_a_triple_loop(device, a_shape, b_shape):
    a, b = host(*a_shape, seed=1), host(*b_shape, seed=2)
    check(F.matmul(dev(a), dev(b)), slow_matmul(a, b), device)


SCALAR_MIXES = {"x * 2": lambda x: x * 2, "2.0 - x": lambda x: 2.0 - x, "x ** 2": lambda x: x ** 2,
                "x / 2": lambda x: x / 2, "1 + x": lambda x: 1 + x, "2 ** x": lambda x: 2 ** x,
                "np.float64(3) * x": lambda x: np.float64(3) * x}


@pytest.mark.parametrize("expr", sorted(SCALAR_MIXES))
def test_python_and_numpy_scalars_keep_float32(device, expr):
    x = dev(host(2, 3))
    y = SCALAR_MIXES[expr](x)
    assert y.dtype == np.float32, f"{expr} gave {y.dtype}"
    assert backend.device_of(y.data) == device


def test_integer_operands_keep_float32(device):
    """x @ int64 once computed in float64, silently leaving the model's float32."""
    x, ids = dev(host(2, 3)), dev(np.arange(6).reshape(3, 2))
    for y in (F.matmul(x, ids), F.matmul(ids.T, x.T), x * ids.T):
        assert y.dtype == np.float32


def test_float64_stays_float64(device):
    x = dev(host(2, 3), dtype="float64")
    for y in (x * 2, x.sum(), x.max(axis=0), F.matmul(x, x.T), x.exp()):
        assert y.dtype == np.float64


def test_an_empty_batch_goes_through_attention_and_layer_norm(device):
    """B = 0 sentences: empty outputs and gradients of the same shapes, a zero gain gradient
    (no row contributes), and no error from a block loop or a kernel launch over no rows."""
    x = dev(np.ones((0, 5, 8), np.float32))
    x.requires_grad = True
    gain, bias = dev(np.ones(8, np.float32)), dev(np.zeros(8, np.float32))
    gain.requires_grad = bias.requires_grad = True
    out = F.layer_norm(F.scaled_dot_product_attention(x, x, x), gain, bias)
    out.sum().backward()
    assert out.shape == (0, 5, 8) and x.grad.shape == (0, 5, 8)
    np.testing.assert_array_equal(backend.to_numpy(gain.grad), np.zeros(8, np.float32))
