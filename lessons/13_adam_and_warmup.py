# %% [markdown]
# # Chapter 13 — Adam with β₂ = 0.98 and the warmup schedule
#
# §5.3: "We used the Adam optimizer with $\beta_1 = 0.9$, $\beta_2 = 0.98$ and
# $\epsilon = 10^{-9}$. We varied the learning rate over the course of training, according to
# the formula
#
# $$lrate = d_{model}^{-0.5} \cdot \min(step\_num^{-0.5},\ step\_num \cdot
# warmup\_steps^{-1.5})$$
#
# This corresponds to increasing the learning rate linearly for the first $warmup\_steps$
# training steps, and decreasing it thereafter proportionally to the inverse square root of
# the step number. We used $warmup\_steps = 4000$."
#
# This chapter writes one Adam step by hand against the library's, plots the schedule, and
# shows what $\beta_2 = 0.98$ (instead of the usual 0.999) changes.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Parameter
from minitransformer.optim import Adam, noam_rate

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
rng = np.random.default_rng(0)
np.set_printoptions(precision=5, suppress=True)

# %% [markdown]
# ## One Adam step
#
# Adam keeps, per parameter, running averages of the gradient ($m$) and of its square ($v$),
# corrects their bias towards 0 in the first steps, and moves each parameter by
# $lr \cdot \hat m / (\sqrt{\hat v} + \epsilon)$: a step of at most about $lr$ in the
# direction of the recent gradients, whatever their scale (less where they disagree in sign).
#
# $$m \leftarrow \beta_1 m + (1-\beta_1) g, \quad v \leftarrow \beta_2 v + (1-\beta_2) g^2,
# \quad \theta \leftarrow \theta - lr\,\frac{m/(1-\beta_1^t)}{\sqrt{v/(1-\beta_2^t)} + \epsilon}$$

# %%
theta = rng.standard_normal(4)
gradients = [rng.standard_normal(4) for _ in range(3)]
param = Parameter(theta.copy())
optimizer = Adam([param], lr=0.01, betas=(0.9, 0.98), eps=1e-9)
m, v, by_hand = np.zeros(4), np.zeros(4), theta.copy()
for t, g in enumerate(gradients, start=1):
    m = 0.9 * m + 0.1 * g
    v = 0.98 * v + 0.02 * g * g
    by_hand -= 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.98 ** t)) + 1e-9)
    param.grad = g.copy()
    optimizer.step()
print("by hand:", by_hand)
print("library:", param.numpy())
print("mean movement per step (at most about lr):", np.abs(by_hand - theta) / 3)

# %% [markdown]
# ## The order of a step: backward, then step
#
# The step writes the new values into the parameter's own array, in place: the optimizer's
# references stay valid and no memory is copied. But a recorded graph may have saved that
# same array for its backward ($\partial L / \partial x = \delta\, W$ needs the $W$ the forward
# used). So a training step is: forward, `backward()`, `step()`. Stepping before the backward
# would give the gradient at weights the forward never saw. The step raises the parameter's
# version count (`_version`), and the engine compares it with the count the forward saw:

# %%
weight = Parameter(rng.standard_normal((2, 3)))
optimizer = Adam([weight], lr=0.01)
x = mt.tensor(rng.standard_normal((4, 3)), dtype="float64", requires_grad=True)
loss = F.linear(x, weight).sum()
weight.grad = np.ones((2, 3))      # a gradient from an earlier step
optimizer.step()                   # too early: loss's graph saved weight's array
print("weight version:", weight._version)
try:
    loss.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## The schedule
#
# Linear warmup to a peak at step $warmup$, then decay as $1/\sqrt{step}$. The peak is
# $d_{model}^{-0.5} \cdot warmup^{-0.5}$: about $7 \times 10^{-4}$ for the base model, larger
# for narrower models. The library's trainer multiplies it by a factor (`--lr-scale`).

# %%
steps = np.arange(1, 30001 if not FAST else 10001)
figure, axis = plt.subplots(figsize=(8, 3.6))
for d_model, warmup in ((512, 4000), (512, 8000), (256, 4000), (1024, 4000)):
    rates = [noam_rate(int(s), d_model, warmup) for s in steps]
    axis.plot(steps, rates, label=f"d_model {d_model}, warmup {warmup}")
    print(f"d_model {d_model:>4}, warmup {warmup}: peak {max(rates):.2e} at step "
          f"{steps[int(np.argmax(rates))]}")
axis.set_xlabel("step")
axis.set_ylabel("learning rate")
axis.set_title("lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)")
axis.legend()
figure.tight_layout()
figure.savefig(FIGURES / "13_schedule.png", dpi=120)
plt.show()

# %% [markdown]
# ## Why warm up
#
# In the first steps Adam's $v$ is an average over very few gradients, so the normalised step
# $\hat m / \sqrt{\hat v}$ is about ±1 for every coordinate however noisy the gradient is:
# the first updates are as large as any, in random directions. With post-LN, large early
# updates are what destabilises training, as Xiong et al. (2020) argue (chapter 9). A small
# learning rate while $v$ settles avoids them.
#
# ## Why β₂ = 0.98
#
# $v$ averages the squared gradient over roughly $1/(1-\beta_2)$ steps: 1000 steps with 0.999,
# 50 with 0.98. When the gradient scale changes (it does, early in training), a short memory
# adapts in time. Here the gradient's scale drops tenfold at step 200 of 600 (at step 100
# of 300 in the fast mode):

# %%
n = 600 if not FAST else 300
scale = np.where(np.arange(1, n + 1) < n // 3, 1.0, 0.1)
for beta2 in (0.999, 0.98):
    v, sizes = 0.0, []
    for t in range(1, n + 1):
        g = scale[t - 1] * rng.standard_normal()
        v = beta2 * v + (1 - beta2) * g * g
        sizes.append(abs(g) / np.sqrt(v / (1 - beta2 ** t)))
    drop = n // 3
    windows = [(drop, drop + 50), (drop + 100, drop + 150), (n - 50, n)]
    print(f"β₂ = {beta2}: mean |normalised step| in steps "
          + ", ".join(f"{a}-{b}: {np.mean(sizes[a:b]):.2f}" for a, b in windows))

# %% [markdown]
# Right after the drop both make steps about 10× too small, since $v$ still remembers the
# large gradients, 100 times larger in square. To forget them $\beta_2^t \cdot 100$ must fall
# below 1: $t \approx 230$ steps with $\beta_2 = 0.98$, and the steps are back to normal by
# the end; $t \approx 4600$ with 0.999, and they are still far too small. (The fast mode
# stops 200 steps after the drop, before those 230: its last window shows $\beta_2 = 0.98$
# on the way back, at about half the normal size, and 0.999 hardly moved.)
#
# ## Exercises
#
# 1. Show that the schedule's two branches meet at $step = warmup$.
# 2. Rewrite Adam's bias correction as a correction of the step size only (the library does,
#    in `optim.py`): why is that equivalent?
# 3. Chapter 14 warms its learning rate up to $10^{-3}$ over 100 steps. Train its reversal task
#    at a constant $10^{-3}$ from the first step instead. What happens in the first 100 steps,
#    and by step 1000?
