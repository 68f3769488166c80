"""Adam, the warmup schedule and gradient clipping against their formulas (§5.3)."""

import math
import re

import numpy as np
import pytest

from minitransformer.nn import Linear, Parameter
from minitransformer.optim import Adam, clip_grad_norm, noam_rate

RNG = np.random.default_rng(0)


def adam_reference(theta, grads, lr, beta1, beta2, eps):
    """Kingma & Ba's Algorithm 1, written out: the moments, their bias corrections, the step."""
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
    return theta, m, v


@pytest.mark.parametrize("betas, eps", [((0.9, 0.98), 1e-9), ((0.5, 0.9), 1e-3)])
def test_adam_follows_algorithm_1_with_bias_correction(betas, eps):
    theta = RNG.normal(size=(3, 4))
    grads = [RNG.normal(size=(3, 4)) * 10.0 ** k for k in (0, -2, 1, -4, 0)]
    p = Parameter(theta.copy())
    optimizer = Adam([p], lr=0.01, betas=betas, eps=eps)
    for g in grads:
        p.grad = g.copy()
        optimizer.step()
        np.testing.assert_array_equal(p.grad, g)          # the gradient is left untouched
    expected, m, v = adam_reference(theta, grads, 0.01, *betas, eps)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(optimizer.m[0], m, rtol=1e-12)
    np.testing.assert_allclose(optimizer.v[0], v, rtol=1e-12)
    assert optimizer.step_count == len(grads)


def test_adams_first_step_moves_every_weight_by_the_learning_rate():
    """With bias correction, step 1 is lr · g / (|g| + ε): lr in the direction of -g, whatever
    the gradient's size (without it the step would be (1-β₁)/√(1-β₂) = 0.71 · lr here)."""
    p = Parameter(np.zeros(4))
    optimizer = Adam([p], lr=0.1, betas=(0.9, 0.98), eps=1e-12)
    p.grad = np.array([1e-3, -2.0, 50.0, -1e-5])
    optimizer.step()
    np.testing.assert_allclose(p.numpy(), [-0.1, 0.1, -0.1, 0.1], rtol=1e-6)


def test_adam_skips_parameters_without_gradients():
    p, q = Parameter(np.ones(2)), Parameter(np.ones(2))
    optimizer = Adam([p, q], lr=0.1)
    p.grad = np.array([1.0, -1.0])
    optimizer.step()
    np.testing.assert_array_equal(q.numpy(), [1.0, 1.0])
    assert not optimizer.m[1].any() and not optimizer.v[1].any()


def test_the_schedule_is_the_papers_formula():
    d_model, warmup = 512, 4000
    for step in (1, 2, 100, 3999, 4000, 4001, 10_000, 100_000):
        expected = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert noam_rate(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert noam_rate(10, d_model, warmup, scale=2.0) == 2 * noam_rate(10, d_model, warmup)


def test_the_schedule_rises_linearly_peaks_at_warmup_then_decays_as_the_inverse_square_root():
    d_model, warmup = 256, 800
    rates = [noam_rate(s, d_model, warmup) for s in range(1, 3 * warmup + 1)]
    assert int(np.argmax(rates)) + 1 == warmup
    assert rates[warmup - 1] == pytest.approx((d_model * warmup) ** -0.5, rel=1e-12)
    assert rates[199] == pytest.approx(200 * rates[0], rel=1e-12)            # linear
    assert rates[4 * warmup // 2 - 1] == pytest.approx(rates[warmup - 1] / math.sqrt(2),
                                                       rel=1e-12)            # 1/√step
    with pytest.raises(ValueError, match="counts steps from 1"):
        noam_rate(0, d_model, warmup)


def test_clipping_scales_all_gradients_together_to_the_limit():
    p, q = Parameter(np.zeros(2)), Parameter(np.zeros(1))
    p.grad, q.grad = np.array([3.0, 0.0]), np.array([4.0])              # global norm 5
    assert clip_grad_norm([p, q], 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(np.concatenate([p.grad, q.grad]), [0.6, 0.0, 0.8], rtol=1e-6)
    assert clip_grad_norm([p, q], 10.0) == pytest.approx(1.0, rel=1e-6)   # under: unchanged
    np.testing.assert_allclose(p.grad, [0.6, 0.0], rtol=1e-6)


def test_clipping_measures_but_leaves_non_finite_gradients_for_the_caller():
    p = Parameter(np.zeros(2))
    p.grad = np.array([np.inf, 1.0])
    assert clip_grad_norm([p], 1.0) == math.inf
    np.testing.assert_array_equal(p.grad, [np.inf, 1.0])   # not scaled into nan


@pytest.mark.parametrize("setting, message", [
    (dict(lr=math.nan), "Adam needs a finite learning rate lr >= 0, got lr=nan."),
    (dict(lr=math.inf), "got lr=inf"),
    (dict(lr=-1e-3), "got lr=-0.001"),
    (dict(eps=math.nan), "Adam needs a finite eps > 0, such as 1e-9, got eps=nan."),
    (dict(eps=0.0), "got eps=0.0"),
    (dict(betas=(0.9,)), "Adam needs two betas in [0, 1), such as (0.9, 0.98), got "
                         "betas=(0.9,)."),
    (dict(betas=0.9), "got betas=0.9"),
    (dict(betas=(0.9, 1.0)), "got betas=(0.9, 1.0)"),
])
def test_adam_refuses_settings_that_would_fill_the_weights_with_nan(setting, message):
    """nan or inf as lr or eps was accepted, and the first step made every weight nan."""
    with pytest.raises(ValueError, match=re.escape(message)):
        Adam([Parameter(np.zeros(2))], **setting)


def test_adam_given_a_model_instead_of_its_parameters_says_so():
    model = Linear(3, 2)
    with pytest.raises(TypeError, match=r"got a Linear; pass model\.parameters\(\)"):
        Adam(model)
    with pytest.raises(TypeError, match=r"got a Linear; pass model\.parameters\(\)"):
        Adam([model])


@pytest.mark.parametrize("d_model, warmup", [(512, 0), (512, -10), (0, 4000)])
def test_the_schedule_refuses_sizes_it_cannot_take_a_power_of(d_model, warmup):
    """warmup 0 was a ZeroDivisionError, a negative warmup a complex rate."""
    with pytest.raises(ValueError, match=re.escape(
            f"the schedule needs d_model > 0 and warmup_steps > 0, got d_model={d_model}, "
            f"warmup_steps={warmup}")):
        noam_rate(1, d_model, warmup)


@pytest.mark.parametrize("max_norm", [-1.0, 0.0, math.nan])
def test_clipping_to_a_limit_of_zero_or_below_is_refused(max_norm):
    """A negative limit turned every gradient around, silently."""
    p = Parameter(np.zeros(2))
    p.grad = np.array([3.0, 4.0])
    with pytest.raises(ValueError, match=re.escape(f"clip_grad_norm: max_norm must be a number "
                                                   f"> 0, or None to only measure; got "
                                                   f"{max_norm!r}")):
        clip_grad_norm([p], max_norm)
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])
