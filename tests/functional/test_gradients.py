"""Every hand-written backward against central finite differences, in float64.

Three layers: the built-in suite (``gradcheck_cases.CASES``) on every device; a check that the
suite meets every Function class of ``minitransformer.functional``, so a new Function without a
gradcheck case fails here; and hypothesis property tests that run ``check_function`` over
generated shapes (broadcasting, size-1 axes, random axes, permutations, repeated indices).
"""

import importlib
import pkgutil

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import (
    array_shapes,
    broadcastable_shapes,
    mutually_broadcastable_shapes,
    valid_tuple_axes,
)

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.autograd import Function
from minitransformer.verify import check_function
from minitransformer.verify.function_cases import CASES, run_case

MAX_REL_ERROR = 1e-6


def _case_id(case):
    return f"{case.name}-{case.note or 'plain'}".replace(" ", "_")


@pytest.mark.parametrize("case", [pytest.param(c, id=_case_id(c)) for c in CASES])
def test_gradcheck_case(device, case):
    report = run_case(case)
    assert report.inputs, f"{case.name}: no floating-point input was checked"
    assert report.passed, str(report)
    assert report.max_rel_error < MAX_REL_ERROR, str(report)


def _float_inputs(case) -> list[int]:
    arrays = case.make_inputs(backend.get_backend("cpu").make_rng(0))
    return [i for i, a in enumerate(arrays) if backend.is_floating(a.dtype)]


def _gradients_when_wanted(case, wanted: set[int]) -> dict:
    """The gradients of Σ_k <out_k, w_k> (fixed random w_k) for the inputs in ``wanted``,
    with only those inputs requiring a gradient."""
    arrays = case.make_inputs(backend.get_backend().make_rng(0))
    leaves = [mt.tensor(a, requires_grad=i in wanted) for i, a in enumerate(arrays)]
    outputs = case.fn(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    weights = np.random.default_rng(1)
    loss = sum((y * mt.tensor(weights.standard_normal(y.shape))).sum()
               for y in outputs if y.requires_grad)
    loss.backward()
    return {i: backend.to_numpy(leaves[i].grad) for i in wanted}


@pytest.mark.parametrize("case", [pytest.param(c, id=_case_id(c)) for c in CASES
                                  if len(_float_inputs(c)) > 1])
def test_each_gradient_asked_alone_is_the_one_asked_with_all(device, case):
    """A backward computes only the gradients asked for (``needs_input_grad``): attention
    skips dQ and dK when only V needs one, linear skips dx for a frozen input. Each gradient
    asked alone, and each with all but one, must be what it is when every input asks."""
    floats = _float_inputs(case)
    every = _gradients_when_wanted(case, set(floats))
    subsets = [{i} for i in floats] + [set(floats) - {i} for i in floats]
    for wanted in subsets:
        for i, grad in _gradients_when_wanted(case, wanted).items():
            np.testing.assert_allclose(grad, every[i], rtol=1e-12, atol=1e-12,
                                       err_msg=f"{case.name}: input {i}, asked with {wanted}")


@pytest.mark.parametrize("op", ["relu", "dropout"])
def test_elementwise_kernels_on_non_contiguous_arrays(op):
    """relu and dropout run on blocks of flat views when their arrays are contiguous and
    once on the whole arrays otherwise: here input and dout are transposed views."""
    def fn(a):
        if op == "relu":
            y = F.relu(F.transpose(a))
        else:
            backend.manual_seed(0)
            y = F.dropout(F.transpose(a), 0.3)
        return F.transpose(y)                 # the gradient reaching relu is strided too
    x = np.random.default_rng(0).standard_normal((4, 6))
    x += 0.1 * np.sign(x)                     # away from relu's kink
    report = check_function(fn, x)
    assert report.passed and report.max_rel_error < MAX_REL_ERROR, str(report)


def _functional_function_classes() -> set[str]:
    """Names of the public Function subclasses defined in minitransformer.functional."""
    for module in pkgutil.walk_packages(F.__path__, F.__name__ + "."):
        importlib.import_module(module.name)  # also the modules __init__ does not import
    found, todo = set(), [Function]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return {cls.__name__ for cls in found
            if cls.__module__.startswith("minitransformer.functional")
            and not cls.__name__.startswith("_")}


def test_gradcheck_suite_covers_every_function():
    defined = _functional_function_classes()
    # The collection itself must work: a few that surely exist (the _Binary base must not).
    assert {"Add", "Pow", "Max", "GetItem", "Split", "MatMul"} <= defined
    assert "_Binary" not in defined
    covered = set().union(*(run_case(case).functions for case in CASES))
    missing = defined - covered
    assert not missing, f"Functions with no gradcheck case: {sorted(missing)}"


# ----------------------------------------------------------------------------- properties
# Small sizes: every element is checked (two forward passes each), 25 examples per property.
# Each property runs on every device: the ``device`` fixture only makes a device current, which
# no example changes, so sharing it between examples is safe (hence the suppressed check).

FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
SEEDS = st.integers(0, 2**16)
SMALL = {"max_dims": 3, "max_side": 3}


def assert_gradients_match(fn, *inputs):
    """check_function on the current device, every element of every input compared."""
    report = check_function(fn, *(backend.to_device(x) for x in inputs))
    assert report.passed and report.max_rel_error < MAX_REL_ERROR, str(report)


def normal(rng, shape):
    return np.asarray(rng.standard_normal(shape))


def away_from_zero(rng, shape, low=0.5):
    """Values with |x| in [low, low + 1.5): safe for division, log, sqrt, relu's kink."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return np.asarray(sign * (low + 1.5 * rng.random(shape)))


@FAST
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, **SMALL), seed=SEEDS,
       op=st.sampled_from(["add", "sub", "mul", "div"]))
def test_binary_ops_with_broadcast_shapes(device, shapes, seed, op):
    a_shape, b_shape = shapes.input_shapes
    rng = np.random.default_rng(seed)
    b = away_from_zero(rng, b_shape) if op == "div" else normal(rng, b_shape)
    assert_gradients_match(getattr(F, op), normal(rng, a_shape), b)


@FAST
@given(shape=array_shapes(min_dims=0, **SMALL), seed=SEEDS,
       op=st.sampled_from(["neg", "exp", "log", "sqrt", "tanh", "relu", "pow"]))
def test_unary_ops(device, shape, seed, op):
    rng = np.random.default_rng(seed)
    x = away_from_zero(rng, shape)
    if op in ("log", "sqrt", "pow"):
        x = np.abs(x)
    fn = (lambda a: a ** 1.5) if op == "pow" else getattr(F, op)
    assert_gradients_match(fn, x)


@st.composite
def reduction_args(draw):
    shape = draw(array_shapes(min_dims=0, max_dims=3, max_side=4))
    ndim = len(shape)
    axis_choices = [st.none(), valid_tuple_axes(ndim)]
    if ndim:
        axis_choices.append(st.integers(-ndim, ndim - 1))
    return shape, draw(st.one_of(*axis_choices)), draw(st.booleans())


@FAST
@given(args=reduction_args(), seed=SEEDS, op=st.sampled_from(["sum", "mean", "max"]))
def test_reductions_over_random_axes(device, args, seed, op):
    shape, axis, keepdims = args
    # max of a 0-d tensor has a backward bug of its own (test_backward_values.py).
    assume(op != "max" or shape != ())
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    # Distinct values (gaps >= 0.5, far above the finite-difference step): max has no ties.
    x = (rng.permutation(size) + 0.5 * rng.random(size)).reshape(shape) - size / 2
    fn = getattr(F, op)
    assert_gradients_match(lambda a: fn(a, axis=axis, keepdims=keepdims), x)


@st.composite
def reshape_args(draw):
    """A shape and a new shape of the same size: its sides shuffled, 1s inserted, maybe a -1."""
    shape = draw(array_shapes(min_dims=0, max_dims=3, max_side=4))
    sides = list(draw(st.permutations(shape)))
    for _ in range(draw(st.integers(0, 2))):
        sides.insert(draw(st.integers(0, len(sides))), 1)
    if sides and draw(st.booleans()):
        sides[draw(st.integers(0, len(sides) - 1))] = -1
    return shape, tuple(sides)


@FAST
@given(args=reshape_args(), seed=SEEDS)
def test_reshape_to_random_shapes(device, args, seed):
    shape, new_shape = args
    x = normal(np.random.default_rng(seed), shape)
    assert_gradients_match(lambda a: F.reshape(a, new_shape), x)


@st.composite
def transpose_args(draw):
    """A shape and a permutation of its axes, some written as negative axes."""
    shape = draw(array_shapes(min_dims=1, **SMALL))
    perm = draw(st.permutations(range(len(shape))))
    negative = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    return shape, tuple(ax - len(shape) if neg else ax for ax, neg in zip(perm, negative,
                                                                         strict=True))


@FAST
@given(args=transpose_args(), seed=SEEDS)
def test_transpose_with_random_permutations(device, args, seed):
    shape, perm = args
    x = normal(np.random.default_rng(seed), shape)
    assert_gradients_match(lambda a: F.transpose(a, perm), x)


@st.composite
def broadcast_pair(draw):
    """(small, big): small broadcasts to big, with new leading axes and size-1 axes."""
    big = draw(array_shapes(min_dims=0, **SMALL))
    small = draw(broadcastable_shapes(big, min_dims=0, max_dims=len(big), max_side=3))
    assume(np.broadcast_shapes(small, big) == big)
    return small, big


@FAST
@given(pair=broadcast_pair(), seed=SEEDS)
def test_broadcast_to_and_sum_to(device, pair, seed):
    small, big = pair
    rng = np.random.default_rng(seed)
    assert_gradients_match(lambda a: F.broadcast_to(a, big), normal(rng, small))
    assert_gradients_match(lambda a: F.sum_to(a, small), normal(rng, big))


@FAST
@given(shapes=mutually_broadcastable_shapes(signature="(n,k),(k,m)->(n,m)", max_dims=2,
                                            max_side=3), seed=SEEDS)
def test_batched_matmul_with_broadcast_batch_axes(device, shapes, seed):
    a_shape, b_shape = shapes.input_shapes
    rng = np.random.default_rng(seed)
    assert_gradients_match(F.matmul, normal(rng, a_shape), normal(rng, b_shape))


@st.composite
def gather_args(draw):
    """A shape, an axis and an integer index array along it that repeats a position."""
    shape = draw(array_shapes(min_dims=1, max_dims=3, max_side=4))
    axis = draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    index = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5))
    return shape, axis, np.array(index + [index[0]])  # the last entry repeats the first


@FAST
@given(args=gather_args(), seed=SEEDS)
def test_getitem_with_repeated_integer_indices(device, args, seed):
    shape, axis, index = args
    x = normal(np.random.default_rng(seed), shape)
    key = (slice(None),) * axis + (index,)
    assert_gradients_match(lambda a: a[key], x)


@st.composite
def join_args(draw):
    """Shapes of 1-3 tensors for concat or stack along a random axis (negative allowed)."""
    base = list(draw(array_shapes(min_dims=1, max_dims=3, max_side=3)))
    n = draw(st.integers(1, 3))
    return base, n


@FAST
@given(args=join_args(), data=st.data(), seed=SEEDS)
def test_concat_with_random_sizes(device, args, data, seed):
    base, n = args
    axis = data.draw(st.integers(-len(base), len(base) - 1), label="axis")
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n), label="sizes")
    rng = np.random.default_rng(seed)
    parts = [normal(rng, tuple(base[:axis % len(base)] + [k] + base[axis % len(base) + 1:]))
             for k in sizes]
    assert_gradients_match(lambda *xs: F.concat(list(xs), axis=axis), *parts)


@FAST
@given(args=join_args(), data=st.data(), seed=SEEDS)
def test_stack_along_random_axes(device, args, data, seed):
    base, n = args
    axis = data.draw(st.integers(-len(base) - 1, len(base)), label="axis")
    rng = np.random.default_rng(seed)
    parts = [normal(rng, tuple(base)) for _ in range(n)]
    assert_gradients_match(lambda *xs: F.stack(list(xs), axis=axis), *parts)


@FAST
@given(args=join_args(), data=st.data(), seed=SEEDS)
def test_split_into_sections_or_at_indices(device, args, data, seed):
    base, n = args
    axis = data.draw(st.integers(-len(base), len(base) - 1), label="axis")
    length = base[axis]
    if data.draw(st.booleans(), label="sections"):
        base[axis] = length * n  # n equal sections
        spec = n
    else:
        spec = sorted(data.draw(st.lists(st.integers(0, length), max_size=3), label="indices"))
    x = normal(np.random.default_rng(seed), tuple(base))
    assert_gradients_match(lambda a: F.split(a, spec, axis=axis), x)

