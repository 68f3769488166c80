"""The exercise ``adam_warmup``: the learner writes the paper's learning rate,
``noam_rate(step, d_model, warmup_steps, factor=1.0)``, and one Adam update of one parameter,
``adam_step(param, grad, m, v, step, lr) -> (param, m, v)``, with β₁ = 0.9, β₂ = 0.98,
ε = 1e-9 and bias correction (§5.3).

Both are graded against the library: the rate against ``optim.noam_rate`` at the first step,
around the warmup and long after; the step against ``optim.Adam`` over several steps (from zero
moments, and with gradients small enough that ε counts); then both together train a Linear
layer, step for step beside the library's optimizer. A wrong answer is recognised by running
the known wrong rates and updates of ``RATE_MISTAKES`` and ``STEP_MISTAKES`` on the same steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import functional as F
from ...autograd.tensor import Tensor
from ...optim import Adam, noam_rate
from ._common import (
    AlgorithmTask,
    Failed,
    Learner,
    TaskCase,
    at,
    close,
    largest_difference,
    pair,
    shape_of,
)

BETAS, EPS = (0.9, 0.98), 1e-9

# ----------------------------------------------------------------------------- the mistakes

# (a wrong rate as a function of (step, d_model, warmup, factor), the hint)
RATE_MISTAKES: list[tuple[Callable[..., float], str]] = [
    (lambda s, d, w, f: f * d ** -0.5 * s ** -0.5,
     "the rate has no warmup: it starts at its largest, where the paper's rises linearly, "
     "step · warmup_steps^−1.5, for the first warmup_steps steps: take the min of the two."),
    (lambda s, d, w, f: f * d ** -0.5 * s * w ** -1.5,
     "the rate keeps rising after the warmup: past warmup_steps it decays as step^−0.5; "
     "take the min of the two lines."),
    (lambda s, d, w, f: f * d ** -0.5 * max(s ** -0.5, s * w ** -1.5),
     "max where the paper has min: the rate is the lower of the two lines."),
    (lambda s, d, w, f: f * min(s ** -0.5, s * w ** -1.5),
     "the factor d_model^−0.5 is missing (larger models take smaller steps)."),
    (lambda s, d, w, f: f * d ** -0.5 * min(s ** -0.5, s * w ** -0.5),
     "warmup_steps^−1.5, not ^−0.5: with −1.5 the two lines meet at step = warmup_steps."),
    (lambda s, d, w, f: d ** -0.5 * min(s ** -0.5, s * w ** -1.5),
     "factor is left out: it multiplies the whole rate."),
]


def adam_variant(param: Any, grad: Any, m: Any, v: Any, step: int, lr: float,
                 beta1: float = 0.9, beta2: float = 0.98, eps: float = 1e-9,
                 correct_m: bool = True, correct_v: bool = True, eps_inside: bool = False,
                 square: bool = True, sign: float = -1.0, stale: bool = False) -> tuple:
    """Adam's update as the paper's, or as one of the known wrong ones."""
    m_new = beta1 * m + (1 - beta1) * grad
    v_new = beta2 * v + (1 - beta2) * (grad * grad if square else grad)
    m_use, v_use = (m, v) if stale else (m_new, v_new)
    m_hat = m_use / (1 - beta1 ** step) if correct_m else m_use
    v_hat = v_use / (1 - beta2 ** step) if correct_v else v_use
    with np.errstate(all="ignore"):
        root = np.sqrt(v_hat + eps) if eps_inside else np.sqrt(v_hat) + eps
        return param + sign * lr * m_hat / root, m_new, v_new


# (what changes in adam_variant, the hint)
STEP_MISTAKES: list[tuple[dict[str, Any], str]] = [
    (dict(correct_m=False, correct_v=False), "no bias correction: m and v start at zero, so "
     "early on they are too small by the factors 1 − β₁ᵗ and 1 − β₂ᵗ; divide them out "
     "(m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ))."),
    (dict(correct_v=False), "only m is bias-corrected: v needs it too, v̂ = v / (1 − β₂ᵗ)."),
    (dict(correct_m=False), "only v is bias-corrected: m needs it too, m̂ = m / (1 − β₁ᵗ)."),
    (dict(beta2=0.999), "β₂ = 0.999 is Adam's default; the paper used β₂ = 0.98 (§5.3)."),
    (dict(beta1=0.98, beta2=0.9), "β₁ and β₂ are swapped: β₁ = 0.9 averages the gradients "
     "(m), β₂ = 0.98 their squares (v)."),
    (dict(eps=1e-8), "ε = 1e-8 is Adam's default; the paper used ε = 1e-9 (§5.3)."),
    (dict(eps_inside=True), "ε is inside the square root: the update divides by √v̂ + ε, "
     "and √(v̂ + ε) is far larger where gradients are small."),
    (dict(square=False), "v averages the squared gradients, g², not g."),
    (dict(sign=1.0), "the update goes uphill: θ ← θ − lr · m̂ / (√v̂ + ε), a minus."),
    (dict(stale=True), "the update used m and v from before this step's gradient: update "
     "the moments first, then step with them."),
]


# ----------------------------------------------------------------------------- the rate

def _rate_case(d_model: int, warmup: int, factor: float | None, steps: tuple[int, ...]):
    def run(learner: Learner, seed: int) -> None:
        args = (d_model, warmup) + (() if factor is None else (factor,))
        got = []
        for step in steps:
            shown = f"noam_rate({', '.join(map(str, (step, *args)))})"
            rate = learner.call("noam_rate", step, *args, shown=shown)
            try:
                got.append(float(rate))
            except (TypeError, ValueError):
                raise Failed(f"{shown} returned {rate!r}, not a number.") from None
        f = 1.0 if factor is None else factor
        for step, rate in zip(steps, got, strict=True):
            expected = noam_rate(step, d_model, warmup, f)
            if not abs(rate - expected) <= 1e-12 * expected:
                hint = next((h for wrong, h in RATE_MISTAKES if all(
                    abs(r - wrong(s, d_model, warmup, f)) <= 1e-12 * abs(r)
                    for s, r in zip(steps, got, strict=True))), None)
                right, mine = pair(expected, rate)
                raise Failed(f"noam_rate({', '.join(map(str, (step, *args)))}) = {mine}, "
                             f"expected {right} (optim.noam_rate).", hint)
    return run


# ----------------------------------------------------------------------------- the step

def _library_steps(param: Any, grads: list, rates: list) -> list[tuple]:
    """(param, m, v) after each step of optim.Adam with the paper's β and ε."""
    p = Tensor(param.copy(), requires_grad=True)
    adam = Adam([p], betas=BETAS, eps=EPS)
    states = []
    for grad, rate in zip(grads, rates, strict=True):
        p.grad, adam.lr = grad.copy(), rate
        adam.step()
        states.append((p.data.copy(), adam.m[0].copy(), adam.v[0].copy()))
    return states


def _learner_step(learner: Learner, param: Any, grad: Any, m: Any, v: Any, step: int,
                  lr: float) -> tuple:
    shown = f"adam_step(param, grad, m, v, {step}, {lr:.3g})"
    out = learner.call("adam_step", param.copy(), grad.copy(), m.copy(), v.copy(), step, lr,
                       shown=shown)
    if not (isinstance(out, tuple | list) and len(out) == 3):
        raise Failed(f"{shown} returned {type(out).__name__}"
                     f"{' of ' + str(len(out)) if isinstance(out, tuple | list) else ''}: "
                     "return the three new arrays (param, m, v).")
    for name, array in zip(("param", "m", "v"), out, strict=True):
        if np.shape(array) != param.shape:
            raise Failed(f"{shown} returned a new {name} of shape {shape_of(array)}, expected "
                         f"{param.shape}: each keeps the parameter's shape.")
    return tuple(np.asarray(a, dtype=param.dtype) for a in out)


def _step_case(n_steps: int, scale: float, d_model: int, warmup: int):
    def run(learner: Learner, seed: int) -> None:
        g = np.random.default_rng(seed)
        param = g.standard_normal((3, 4))
        grads = [scale * g.standard_normal((3, 4)) for _ in range(n_steps)]
        grads[-1][0, 0] = 0.0                   # a gradient of zero in one entry
        rates = [noam_rate(t, d_model, warmup) for t in range(1, n_steps + 1)]
        expected = _library_steps(param, grads, rates)
        got, state = [], (param, np.zeros_like(param), np.zeros_like(param))
        for t, (grad, rate) in enumerate(zip(grads, rates, strict=True), start=1):
            state = _learner_step(learner, state[0], grad, state[1], state[2], t, rate)
            got.append(state)
        for t, (mine, right) in enumerate(zip(got, expected, strict=True), start=1):
            for name, a, b in zip(("param", "m", "v"), mine, right, strict=True):
                if not close(a, b):
                    index, rel = largest_difference(a, b)
                    right, mine = pair(b[index], a[index])
                    raise Failed(f"after step {t} (lr {rates[t - 1]:.3g}), {name} is wrong: "
                                 f"largest error at {name}{at(index)}: expected {right}, got "
                                 f"{mine} (relative error {rel:.1e}).",
                                 _recognise_step(param, grads, rates, got))
    return run


def _recognise_step(param: Any, grads: list, rates: list, got: list) -> str | None:
    for flags, hint in STEP_MISTAKES:
        state = (param, np.zeros_like(param), np.zeros_like(param))
        for t, (grad, rate, mine) in enumerate(zip(grads, rates, got, strict=True), start=1):
            state = adam_variant(state[0], grad, state[1], state[2], t, rate, **flags)
            if not all(np.allclose(a, b, rtol=1e-9, atol=0, equal_nan=True)
                       for a, b in zip(mine, state, strict=True)):
                break
        else:
            return hint
    return None


# ----------------------------------------------------------------------------- training

def _training(learner: Learner, seed: int, n_steps: int = 12, d_model: int = 16,
              warmup: int = 4) -> None:
    """Fit a Linear layer by least squares: the learner's rate and step beside optim.Adam and
    noam_rate, as the training loop uses them, compared after every step."""
    g = np.random.default_rng(seed)
    x, y = g.standard_normal((8, 5)), g.standard_normal((8, 3))
    start = {"weight": g.standard_normal((3, 5)) * 0.5, "bias": g.standard_normal(3) * 0.1}

    def gradients(values: dict[str, Any]) -> dict[str, Any]:
        leaves = {k: Tensor(v, requires_grad=True) for k, v in values.items()}
        error = F.linear(Tensor(x), leaves["weight"], leaves["bias"]) - Tensor(y)
        (error * error).mean().backward()
        return {k: t.grad for k, t in leaves.items()}

    library = {k: Tensor(v.copy(), requires_grad=True) for k, v in start.items()}
    adam = Adam(list(library.values()), betas=BETAS, eps=EPS)
    mine = {k: (v.copy(), np.zeros_like(v), np.zeros_like(v)) for k, v in start.items()}
    for step in range(1, n_steps + 1):
        for k, grad in gradients({k: t.data for k, t in library.items()}).items():
            library[k].grad = grad
        adam.lr = noam_rate(step, d_model, warmup)
        adam.step()
        rate = learner.call("noam_rate", step, d_model, warmup,
                            shown=f"noam_rate({step}, {d_model}, {warmup})")
        grads = gradients({k: state[0] for k, state in mine.items()})
        for k, (param, m, v) in mine.items():
            mine[k] = _learner_step(learner, param, grads[k], m, v, step, float(rate))
        for k, tensor in library.items():
            if not close(mine[k][0], tensor.data):
                index, rel = largest_difference(mine[k][0], tensor.data)
                right, got = pair(tensor.data[index], mine[k][0][index])
                raise Failed(f"after step {step}, {k} is wrong: largest error at {k}{at(index)}: "
                             f"expected {right}, got {got} (relative error {rel:.1e}).",
                             "each call of adam_step must depend only on its arguments: keep "
                             "no state between calls (the moments come in as m and v).")


CASES = (
    TaskCase("the rate of the paper's base model",
             "d_model 512, warmup 4000, no factor; steps 1, 2, 1000, 3999 to 4001, 8000, 1e5",
             _rate_case(512, 4000, None, (1, 2, 1000, 3999, 4000, 4001, 8000, 100_000))),
    TaskCase("a small model's rate, with a factor",
             "d_model 16, warmup 10, factor 2; steps 1 to 40",
             _rate_case(16, 10, 2.0, tuple(range(1, 41)))),
    TaskCase("the first steps, from zero moments",
             "param (3, 4), 3 steps, gradients ~1, lr of d_model 16, warmup 4",
             _step_case(3, 1.0, 16, 4)),
    TaskCase("small gradients, where ε counts",
             "param (3, 4), 10 steps, gradients ~1e-7, lr of d_model 16, warmup 4",
             _step_case(10, 1e-7, 16, 4)),
    TaskCase("training a Linear layer beside optim.Adam",
             "weight (3, 5), bias (3,), least squares on 8 rows; 12 steps, warmup 4",
             _training),
)

TASK = AlgorithmTask(
    name="adam_warmup",
    class_name="noam_rate, adam_step",
    functions=("noam_rate", "adam_step"),
    summary="Adam with bias correction and the warmup schedule (§5.3)",
    cases=CASES,
    verdict="the rate is optim.noam_rate's and every step optim.Adam's, to 1e-9",
)
