"""The checker itself: it must pass right backwards and catch wrong ones."""

import dataclasses

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.autograd import Function
from minitransformer.backend import get_array_module
from minitransformer.verify import check_function
from minitransformer.verify.function_cases import CASES, run_case


class Softmax(Function):
    """A correct softmax over the last axis, written here to test the checker."""

    def forward(self, x):
        xp = get_array_module(x)
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
        self.saved = y
        return y

    def backward(self, dout):
        y = self.saved
        return y * (dout - (dout * y).sum(axis=-1, keepdims=True))


class ZeroGradSoftmax(Softmax):
    """Broken: returns zeros, which is the true gradient only for an all-ones dout."""

    def backward(self, dout):
        return get_array_module(dout).zeros_like(dout)


class SloppyTanh(Function):
    """Broken: uses 1 - y instead of 1 - y²."""

    def forward(self, x):
        y = get_array_module(x).tanh(x)
        self.saved = y
        return y

    def backward(self, dout):
        return dout * (1 - self.saved)


def inputs(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_a_correct_backward_passes_with_tiny_errors():
    report = check_function(lambda x: Softmax()(x), inputs(3, 5))
    assert report.passed, report
    assert report.max_rel_error < 1e-8
    assert report.functions == {"Softmax"}


def test_a_zero_gradient_softmax_is_caught_thanks_to_the_random_upstream_gradient():
    # With dout = 1 the true gradient of softmax is exactly zero, so this bug would hide:
    x = mt.tensor(inputs(3, 5), requires_grad=True)
    Softmax()(x).backward(np.ones((3, 5)))
    np.testing.assert_allclose(x.grad, 0.0, atol=1e-12)
    # The checker's random dout exposes it.
    report = check_function(lambda x: ZeroGradSoftmax()(x), inputs(3, 5))
    assert not report.passed
    assert report.max_rel_error > 0.5


def test_a_slightly_wrong_derivative_is_caught():
    report = check_function(lambda x: SloppyTanh()(x), inputs(4, 4))
    assert not report.passed and report.inputs[0].mode == "full"


def test_large_inputs_are_checked_along_directions_and_still_catch_bugs():
    good = check_function(lambda x: x.tanh(), inputs(40, 40), max_full=100)
    bad = check_function(lambda x: SloppyTanh()(x), inputs(40, 40), max_full=100)
    assert good.inputs[0].mode == "directional" and good.passed, good
    assert bad.inputs[0].mode == "directional" and not bad.passed


def test_integer_inputs_are_passed_through_and_not_checked():
    ids = np.array([2, 0, 2])
    report = check_function(lambda table, i: table[i], inputs(4, 3), ids)
    assert report.passed
    assert [c.label for c in report.inputs] == ["input 0"]
    assert "int64(3,)" in report.shapes


def test_every_float_input_is_checked_in_float64():
    seen = []

    def fn(a, b):
        seen.append((a.dtype, b.dtype))
        return a * b

    check_function(fn, np.ones((2, 2), dtype=np.float32), [1.0, 2.0])
    assert all(d == (np.float64, np.float64) for d in seen)


def test_multiple_outputs_are_all_checked():
    report = check_function(lambda x: mt.functional.split(x, 2, axis=1), inputs(3, 4))
    assert report.passed, report
    assert report.functions == {"Split"}


def test_a_function_that_ignores_its_inputs_is_refused():
    with pytest.raises(ValueError, match="do not depend on any floating-point input"):
        check_function(lambda x: mt.tensor([1.0]), inputs(2))


def test_a_function_that_returns_a_plain_array_is_told_to_return_a_tensor():
    """It failed with AttributeError: 'numpy.ndarray' object has no attribute 'requires_grad'."""
    with pytest.raises(TypeError, match=r"check_function: double returned a ndarray, not a "
                                        r"Tensor or a tuple of Tensors"):
        check_function(lambda x: x.data * 2, inputs(2), name="double")


@pytest.mark.parametrize("settings", [dict(n_directions=0), dict(eps=0.0)])
def test_settings_under_which_nothing_is_checked_are_refused(settings):
    """n_directions=0 passed a large input without checking it; eps=0 divided by zero."""
    with pytest.raises(ValueError, match="eps must be > 0 and n_directions at least 1"):
        check_function(lambda x: x * 0.0, inputs(30, 30), **settings)


def test_report_reads_well():
    text = str(check_function(lambda x: x.exp(), inputs(2, 2), name="exp"))
    assert text.startswith("gradcheck exp (2, 2): passed")
    assert "max rel error" in text


class ForgetfulCast(Function):
    """Broken: casts forward but drops dout's second half on the way back."""

    def forward(self, x):
        return x.astype(np.float32)

    def backward(self, dout):
        dx = dout.astype(np.float64)
        dx[..., 2:] = 0
        return dx


def test_the_astype_case_checks_a_real_float32_round_trip():
    case = next(c for c in CASES if c.name == "astype")
    report = run_case(case)
    assert report.passed, report
    # dout came back through float32: its rounding shows, far below the threshold
    assert 1e-9 < report.max_rel_error < 1e-6, report
    # at the default step of 1e-6, float32's rounding swamps the finite differences
    assert not run_case(dataclasses.replace(case, eps=1e-6)).passed
    # and on the same grid and step a wrong cast backward is caught
    broken = dataclasses.replace(
        case, fn=lambda a: mt.functional.astype(ForgetfulCast()(a), "float64"))
    assert not run_case(broken).passed
    x = mt.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    mt.functional.astype(x, "float64").backward(np.ones(3))
    assert x.grad.dtype == np.float32
