# %% [markdown]
# # Chapter 4 — Softmax, its backward, and numerical stability
#
# Attention weights are a softmax of scores, and the model's output distribution over the
# vocabulary is a softmax of logits: softmax sits at both ends of the Transformer. This chapter
# derives its backward, shows why the naive formula overflows, and why the log-softmax is
# computed on its own rather than as the log of a softmax.
#
# $$\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$

# %%
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.verify import check_function

rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## The Jacobian, and the backward without it
#
# Differentiating $y_i = e^{x_i} / \sum_j e^{x_j}$ gives
# $\partial y_i / \partial x_k = y_i(\delta_{ik} - y_k)$. A row of $n$ scores has an
# $n \times n$ Jacobian, but backward never builds it:
#
# $$dx_k = \sum_i dout_i \, y_i (\delta_{ik} - y_k) = y_k \Big(dout_k - \sum_i dout_i\, y_i\Big)$$
#
# One elementwise product, one row sum, one more product: $O(n)$ instead of $O(n^2)$, and the
# output $y$ is all it needs to keep.

# %%
x = rng.standard_normal(5)
y = np.exp(x) / np.exp(x).sum()
jacobian = np.diag(y) - np.outer(y, y)
dout = rng.standard_normal(5)
through_jacobian = jacobian.T @ dout
without_jacobian = y * (dout - (dout * y).sum())
print("the two agree:", np.allclose(through_jacobian, without_jacobian))

xt = mt.tensor(x, requires_grad=True)
F.softmax(xt).backward(dout)
print("and the library agrees:", np.allclose(xt.grad, without_jacobian))
print(check_function(F.softmax, rng.standard_normal((3, 6)), name="softmax"))

# %% [markdown]
# ## A gradient that sums to zero
#
# Adding the same constant to every score changes nothing: softmax is shift-invariant. So its
# input gradient is orthogonal to the all-ones direction, $\sum_k dx_k = 0$, whatever `dout`
# is. (This is why chapter 2's checker draws `dout` at random: with `dout = 1` the true
# gradient is exactly zero.)

# %%
print("sum of dx:", without_jacobian.sum())
print("softmax(x + 100) == softmax(x):",
      np.allclose(F.softmax(mt.tensor(x + 100)).numpy(), y))

# %% [markdown]
# ## Overflow, and the max trick
#
# $e^{x}$ overflows float32 above $x \approx 88$. Logits of 100 are not unusual in a
# confident model. The naive formula then computes $\infty / \infty$:

# %%
logits = np.array([100.0, 99.0, 90.0], dtype=np.float32)
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(logits) / np.exp(logits).sum()
print("naive:", naive)

# %% [markdown]
# Shift-invariance is the cure: subtract the row maximum first. The largest exponent is then
# $e^0 = 1$ and nothing overflows. The smallest term keeps its value: $e^{-10}$ is nowhere
# near the bottom of float32's range, and its probability, about $3.3 \times 10^{-5}$, comes
# out in full (printed below in scientific notation, since this chapter's `suppress=True`
# would show it as 0). A term underflows only when its score is far below the maximum: in
# float32, $e^{-87}$ is about the smallest normal number and $e^{-104}$ rounds to exactly 0
# (float64 reaches 0 only near $e^{-745}$). For the softmax itself that is harmless, since
# the probabilities it rounds away are below $10^{-38}$; the next section shows where it is
# not.

# %%
shifted = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
print("shifted:", ", ".join(f"{p:.2e}" for p in shifted))
print("library:", ", ".join(f"{p:.2e}" for p in F.softmax(mt.tensor(logits)).numpy()))
for gap in (10, 87, 104):
    print(f"e^-{gap}: float32 {np.exp(np.float32(-gap)):.2e}, float64 {np.exp(-float(gap)):.2e}")

# %% [markdown]
# ## Log-softmax on its own
#
# The loss needs $\log \mathrm{softmax}(x)$. Taking the log of a softmax that underflowed to 0
# gives $-\infty$, and its gradient is NaN. Written directly,
# $\log \mathrm{softmax}(x)_i = x_i - m - \log \sum_j e^{x_j - m}$ with $m = \max x$, it stays
# finite, and its backward is just as short:
# $dx = dout - \mathrm{softmax}(x) \sum_i dout_i$.

# %%
far = np.array([0.0, -200.0], dtype=np.float32)
with np.errstate(divide="ignore"):
    print("log(softmax):", np.log(F.softmax(mt.tensor(far)).numpy()))
x = mt.tensor(far, requires_grad=True)
with np.errstate(divide="ignore", invalid="ignore"):
    F.log(F.softmax(x)).sum().backward()
print("its gradient:", x.grad)
print("log_softmax: ", F.log_softmax(mt.tensor(far)).numpy())
print(check_function(F.log_softmax, rng.standard_normal((3, 6)) * 10, name="log_softmax"))

# %% [markdown]
# ## Temperature
#
# Scaling the scores by $1/T$ before the softmax sharpens ($T < 1$) or flattens ($T > 1$) the
# distribution. Chapter 5 meets the same effect from the other side: dot products of long
# vectors are large, and a softmax of large scores is nearly one-hot.

# %%
scores = np.array([2.0, 1.0, 0.5])
for temperature in (0.25, 1.0, 4.0):
    weights = F.softmax(mt.tensor(scores / temperature)).numpy()
    print(f"T = {temperature:<5} weights {weights}  largest {weights.max():.3f}")

# %% [markdown]
# ## Exercises
#
# 1. Show that the softmax Jacobian is symmetric and that the all-ones vector is in its null
#    space. Which property of $dx$ from this chapter does that prove?
# 2. Derive the log-softmax backward from the softmax one and the chain rule.
# 3. In float32, for which logit gap does the second probability of a two-way softmax
#    underflow to exactly 0? Check with the library.
# 4. Write a softmax over axis 0 using `transpose` and the library's softmax over the last
#    axis, and gradient-check it against `F.softmax(x, axis=0)`.
