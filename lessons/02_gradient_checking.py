# %% [markdown]
# # Chapter 2 — Gradient checking
#
# Every backward in minitransformer is written by hand, and a hand-written backward can be
# wrong in ways that still train, a little worse, for a long time. Chapter 1 compared one
# gradient with finite differences. This chapter turns that into a tool: what exactly to
# compare, in which precision, with which error measure, and why the upstream gradient must be
# random. Then we write a Function with a subtle bug and watch the check catch it.

# %%
import numpy as np

import minitransformer as mt
from minitransformer import Function
from minitransformer.backend import get_array_module
from minitransformer.verify import check_function
from minitransformer.verify.function_cases import CASES, run_case

rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## What to differentiate
#
# An operation $y = f(x)$ usually has many outputs. Backward never computes the full Jacobian
# $\partial y / \partial x$; it receives the gradient of the loss with respect to $y$, `dout`,
# and returns $dx = J^\top \, dout$. So the natural thing to check is the scalar
#
# $$L(x) = \sum_k y_k(x) \, dout_k,$$
#
# whose gradient is exactly what backward returns for that `dout`.
#
# ## Why float64, and how small a step
#
# The central difference $\frac{L(x + h e_j) - L(x - h e_j)}{2h}$ has two errors: truncation,
# about $h^2 |L'''| / 6$, and rounding, about $\varepsilon |L| / h$ where $\varepsilon$ is the
# machine precision. Their sum is smallest near $h = \varepsilon^{1/3}$.

# %%
for dtype in (np.float32, np.float64):
    eps = np.finfo(dtype).eps
    print(f"{dtype.__name__}: machine epsilon {eps:.1e}, best step ~{eps ** (1 / 3):.0e}, "
          f"best achievable error ~{eps ** (2 / 3):.0e}")

# %% [markdown]
# In float32 the best we can hope for is an error around $10^{-5}$, too coarse to tell a
# correct backward from a slightly wrong one. In float64 it is around $10^{-10}$, so the
# checker works in float64 with $h = 10^{-6}$.
#
# ## Relative error
#
# An absolute error of $10^{-8}$ is excellent for a gradient of size 1000 and terrible for a
# gradient of size $10^{-8}$. The checker divides the largest absolute error by the largest
# gradient magnitude in the check: correct backwards land around $10^{-9}$ to $10^{-11}$,
# wrong ones far above the threshold of $10^{-6}$.

# %%
x = rng.standard_normal((3, 4))
report = check_function(lambda t: t.tanh(), x, name="tanh")
print(report)

# %% [markdown]
# ## Why the upstream gradient must be random
#
# Softmax turns a row of scores into probabilities that sum to 1. Because the sum never
# changes, the gradient of $\sum_k y_k$, which is the check with $dout = 1$ everywhere, is
# exactly zero whatever the input. So a softmax whose backward returns zeros passes a check
# with an all-ones `dout`. Here is such a broken softmax:

# %%
class BrokenSoftmax(Function):
    def forward(self, x):
        xp = get_array_module(x)
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def backward(self, dout):
        return get_array_module(dout).zeros_like(dout)   # wrong: forgot the whole derivation


def finite_differences(fn, x, dout, h=1e-6):
    """Central differences of L(x) = sum(fn(x) * dout), one element of x at a time."""
    grad = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[j] = h
        grad[j] = ((fn(mt.tensor(x + step)).numpy() - fn(mt.tensor(x - step)).numpy())
                   * dout).sum() / (2 * h)
    return grad


x = rng.standard_normal((2, 5))
for name, dout in (("dout = 1", np.ones((2, 5))), ("random dout", rng.standard_normal((2, 5)))):
    scores = mt.tensor(x, requires_grad=True)
    BrokenSoftmax()(scores).backward(dout)
    truth = finite_differences(lambda t: BrokenSoftmax()(t), x, dout)
    print(f"{name:<11}: largest |true gradient| {np.abs(truth).max():.1e}, broken backward "
          f"matches it: {np.allclose(scores.grad, truth, rtol=1e-6, atol=1e-8)}")

# %% [markdown]
# The forward is right, so finite differences of it are the truth. With `dout = 1` that truth
# is zero up to rounding, and the broken backward matches it; with a random `dout` it is not,
# and the same comparison fails. The checker always draws `dout` at random, so it sees the
# bug at once:

# %%
report = check_function(lambda t: BrokenSoftmax()(t), rng.standard_normal((2, 5)),
                        name="broken softmax")
print(report)
assert not report.passed

# %% [markdown]
# ## A subtle bug
#
# A mistake in one term is more typical. Here a row is standardised,
# $\hat x = (x - \mu) / \sigma$, as LayerNorm does before its gain and bias, but the backward
# treats $\mu$ and $\sigma$ as constants, forgetting that they depend on $x$ too. A model
# built on it would still train, just worse, and nothing would say why.

# %%
class NaiveStandardize(Function):
    def forward(self, x):
        xp = get_array_module(x)
        mean = x.mean(axis=-1, keepdims=True)
        std = xp.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        self.saved = std
        return (x - mean) / std

    def backward(self, dout):
        return dout / self.saved        # wrong: mean and std depend on x too


report = check_function(lambda t: NaiveStandardize()(t), rng.standard_normal((3, 6)),
                        name="naive standardise")
print(report)
print("the library's layer_norm:")
print(check_function(lambda t: mt.functional.layer_norm(t, np.ones(6), np.zeros(6)),
                     rng.standard_normal((3, 6)), name="layer_norm"))

# %% [markdown]
# ## Checking everything
#
# `minitransformer gradcheck` runs this check on every Function and every Module of the
# package, parameters included, up to the whole Transformer with its loss, and prints one row
# each. Here are the rows of a few primitives:

# %%
for case in CASES[:6]:
    row = run_case(case)
    print(f"{row.name:<6} {row.shapes:<34} max rel error {row.max_rel_error:.1e}  "
          f"{'pass' if row.passed else 'FAIL'}")

# %% [markdown]
# ## Exercises
#
# 1. Fix `NaiveStandardize.backward`. Derive it from
#    $\partial \hat x_i / \partial x_j
#    = \frac{1}{\sigma}(\delta_{ij} - \frac1C - \frac{\hat x_i \hat x_j}{C})$
#    and check it until the relative error is below $10^{-8}$.
# 2. Repeat the `tanh` check in float32 with your own loop (`check_function` always works in
#    float64), with $h = 10^{-3}$. How small can you make the relative error?
# 3. `check_function(..., max_full=0)` checks along random directions instead of every
#    element. How many directions does it take to catch the broken softmax? Why does one
#    usually suffice?
# 4. Run `minitransformer gradcheck --filter attention` and read the rows. Which inputs do
#    the masks remove from the check, and why?
