"""Solution: one Adam step, and the paper's learning rate with warmup (§5.3).

Adam (Kingma & Ba, 2015) keeps two moving averages per parameter, of the gradient and of its
square, and steps by their ratio:

    m ← β₁ m + (1 − β₁) g            v ← β₂ v + (1 − β₂) g²
    m̂ = m / (1 − β₁ᵗ)                v̂ = v / (1 − β₂ᵗ)
    θ ← θ − lr · m̂ / (√v̂ + ε)

m and v start at zero, so early on they are too small, by exactly the factors 1 − β₁ᵗ and
1 − β₂ᵗ: the bias correction divides them out (at t = 1, m̂ = g and v̂ = g², whatever β). ε
is added to √v̂, outside the root: it only guards the division where v̂ is near zero.

§5.3: "We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ϵ = 10⁻⁹. We varied the learning
rate over the course of training, according to the formula:

    lrate = d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5)

This corresponds to increasing the learning rate linearly for the first warmup_steps training
steps, and decreasing it thereafter proportionally to the inverse square root of the step
number." The two lines meet at step = warmup_steps; ``factor`` scales the whole rate (the
``--lr-scale`` of ``minitransformer train``).

Check it:  minitransformer check-exercise adam_warmup lessons/solutions/adam_warmup.py
"""

import numpy as np

BETA1, BETA2, EPS = 0.9, 0.98, 1e-9  # §5.3


def noam_rate(step, d_model, warmup_steps, factor=1.0):
    """The learning rate at ``step`` (counted from 1)."""
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def adam_step(param, grad, m, v, step, lr):
    """One Adam update of one parameter: the new (param, m, v), all of param's shape."""
    m = BETA1 * m + (1 - BETA1) * grad            # the mean of the gradients
    v = BETA2 * v + (1 - BETA2) * grad * grad     # the mean of their squares
    m_hat = m / (1 - BETA1 ** step)               # bias correction: both started at 0
    v_hat = v / (1 - BETA2 ** step)
    param = param - lr * m_hat / (np.sqrt(v_hat) + EPS)
    return param, m, v
