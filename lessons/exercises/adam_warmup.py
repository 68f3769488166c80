"""Exercise: write one Adam step, and the paper's learning rate with warmup (§5.3).

§5.3: "We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ϵ = 10⁻⁹. We varied the learning
rate over the course of training, according to the formula:

    lrate = d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5)

This corresponds to increasing the learning rate linearly for the first warmup_steps training
steps, and decreasing it thereafter proportionally to the inverse square root of the step
number. We used warmup_steps = 4000."

Adam (Kingma & Ba, 2015, Algorithm 1), for one parameter θ with gradient g at step t:

    m ← β₁ m + (1 − β₁) g            v ← β₂ v + (1 − β₂) g²
    m̂ = m / (1 − β₁ᵗ)                v̂ = v / (1 − β₂ᵗ)
    θ ← θ − lr · m̂ / (√v̂ + ε)

Write two functions:

* ``noam_rate(step, d_model, warmup_steps, factor=1.0)``: the rate at ``step`` (counted from
  1), multiplied by ``factor`` (``minitransformer train --lr-scale``).
* ``adam_step(param, grad, m, v, step, lr)``: one update of one parameter; ``param``,
  ``grad``, ``m``, ``v`` are NumPy arrays of one shape (m and v are zeros before the first
  step), ``step`` is this update's number t, counted from 1. Return the new
  ``(param, m, v)``. Use BETA1, BETA2 and EPS below.

The training loop calls them as ``lr = noam_rate(t, d_model, warmup)`` and then, for every
parameter, ``param, m, v = adam_step(param, grad, m, v, t, lr)``.

Hints:

* Plot (or print) the rate for steps 1 to 3·warmup: a line rising to step = warmup_steps, then
  a slow decay. Where do the two lines of the min meet?
* m and v start at zero, so after one step m = (1 − β₁) g: far too small. What must m be
  divided by so that m̂ = g exactly at t = 1? And v?
* ε guards a division; where it sits matters when gradients are tiny (the grader tries
  gradients of 1e-7).
* Adam's defaults elsewhere are β₂ = 0.999 and ε = 1e-8; the paper's are not.

Check your answer:
    minitransformer check-exercise adam_warmup lessons/exercises/adam_warmup.py
It compares your rate with optim.noam_rate and your steps with optim.Adam: from zero moments,
with tiny gradients, and training a Linear layer for 12 steps beside the library's optimizer.
"""

import numpy as np  # noqa: F401 - for the square root

BETA1, BETA2, EPS = 0.9, 0.98, 1e-9  # §5.3


def noam_rate(step, d_model, warmup_steps, factor=1.0):
    """The learning rate at ``step`` (counted from 1)."""
    raise NotImplementedError("write the rate: factor · d_model^−0.5 · min(step^−0.5, "
                              "step · warmup_steps^−1.5)")


def adam_step(param, grad, m, v, step, lr):
    """One Adam update of one parameter: the new (param, m, v), all of param's shape."""
    raise NotImplementedError("write the step: update m and v, correct their bias, and move "
                              "param; return (param, m, v)")
