# %% [markdown]
# # Chapter 12 — Label smoothing and the loss
#
# §5.4: "During training, we employed label smoothing of value $\epsilon_{ls} = 0.1$. This
# hurts perplexity, as the model learns to be more unsure, but improves accuracy and BLEU
# score."
#
# The loss of a translation model is the cross-entropy between the model's distribution over
# the next token and a target distribution. Without smoothing the target is one-hot; with it,
# a little probability is spread over every other token. This chapter derives the fused loss
# and its remarkably short backward, and shows the effect on how confident a model becomes.

# %%
import os

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.optim import Adam
from minitransformer.verify import check_function

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## The smoothed target
#
# With $V$ classes and smoothing $\epsilon$, the target for true class $y$ is
# $q = (1 - \epsilon)\,\mathrm{onehot}(y) + \epsilon / V$ (PyTorch's definition: the
# $\epsilon$ is spread over all $V$ classes, the true one included). The loss of one token is
# $-\sum_v q_v \log p_v$ with $p = \mathrm{softmax}(z)$ of the logits $z$.

# %%
V, eps, y = 5, 0.1, 2
q = (1 - eps) * np.eye(V)[y] + eps / V
print("smoothed target:", q, " sums to", q.sum())

# %% [markdown]
# ## The backward: softmax minus target
#
# With $\log p_v = z_v - \log \sum_u e^{z_u}$,
#
# $$\frac{\partial}{\partial z_k}\Big(-\sum_v q_v \log p_v\Big)
#   = -q_k + \Big(\sum_v q_v\Big) p_k = p_k - q_k,$$
#
# because $q$ sums to 1. The gradient of the logits is the model's distribution minus the
# target: no Jacobian, no division. The library fuses log-softmax and the loss into one
# Function to use exactly this, averaging over the real (non-padding) tokens.

# %%
logits = rng.standard_normal((1, V))
z = mt.tensor(logits, requires_grad=True)
loss = F.cross_entropy(z, np.array([y]), label_smoothing=eps)
loss.backward()
p = np.exp(logits) / np.exp(logits).sum()
print("loss:", loss.item(), " by hand:", -(q * np.log(p)).sum())
print("gradient:     ", z.grad[0])
print("p - q by hand:", (p - q)[0])
print(check_function(lambda t, target: F.cross_entropy(t, target, 0.1, ignore_index=0),
                     rng.standard_normal((2, 4, 7)), rng.integers(0, 7, (2, 4)),
                     name="cross_entropy"))

# %% [markdown]
# ## The loss has a floor
#
# Without smoothing, the loss goes to 0 as $p_y \to 1$, so the model is pushed to ever larger
# logits. With smoothing the best possible $p$ is $q$ itself, and the loss cannot go below the
# entropy of $q$:

# %%
floor = -(q * np.log(q)).sum()
print(f"minimum loss with ε = {eps}, V = {V}: {floor:.4f}")
for margin in (1.0, 3.0, 6.0, 12.0):
    z = np.zeros(V)
    z[y] = margin
    p = np.exp(z) / np.exp(z).sum()
    print(f"logit margin {margin:>4}: p(true) = {p[y]:.4f}   loss without smoothing "
          f"{-np.log(p[y]):.4f}   with smoothing {-(q * np.log(p)).sum():.4f}")

# %% [markdown]
# Past a margin of about 4 the smoothed loss starts to rise again (its minimum is where
# $p_y = q_y$, a margin of $\log(q_y (V - 1) / (1 - q_y)) = 3.8$ here): the model is
# penalised for being *too* sure.
#
# ## Confidence, measured
#
# Fit free logits to the same 20 targets with and without smoothing and look at the
# probability given to the true class.

# %%
steps = 100 if FAST else 400
targets = rng.integers(0, V, size=20)
for smoothing in (0.0, 0.1):
    z = mt.tensor(np.zeros((20, V)), requires_grad=True)
    optimizer = Adam([z], lr=0.1)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        F.cross_entropy(z, targets, label_smoothing=smoothing).backward()
        optimizer.step()
        if step in (steps // 2, steps):
            p = F.softmax(z).numpy()
            print(f"ε = {smoothing}, after {step:>3} steps: mean p(true) = "
                  f"{p[np.arange(20), targets].mean():.4f}, largest logit gap "
                  f"{np.ptp(z.numpy(), axis=1).max():.1f}")

# %% [markdown]
# Without smoothing the probability keeps creeping towards 1 and the logits keep growing (the
# loss has no minimum to stop at, only a limit as the gap goes to infinity); with
# $\epsilon = 0.1$ it settles at $1 - \epsilon + \epsilon/V = 0.92$. That is the
# "more unsure" of the paper, and why a smoothed model's perplexity is worse: it keeps some
# probability off the right token by design. That its translations are nonetheless better is
# a measurement, not something free logits can show. The paper's is in Table 3: without
# smoothing (row (D)) a development perplexity of 4.67 and 25.3 BLEU, with
# $\epsilon_{ls} = 0.1$ (the row "base") 4.92 and 25.8. Chapter 22 repeats it on the built-in
# task, training the tiny translator twice with everything else equal, one seed each: with
# smoothing its validation perplexity is worse (about 4.0 against 3.6), but its token accuracy
# (about 70% either way) and its BLEU (no higher, by a tenth of a point to two and a half
# lower in the runs made so far) do not show the paper's gain, half a point, which runs that
# small cannot resolve.
#
# ## Exercises
#
# 1. Some implementations (The Annotated Transformer, fairseq) spread $\epsilon$ over the
#    $V - 1$ (or $V - 2$) wrong classes only. Derive the gradient for that choice.
# 2. Why must padding positions be excluded from the average rather than given a zero target?
# 3. With $V = 8000$ and $\epsilon = 0.1$, what is the loss floor? Compare with the validation
#    losses in `bench/results/multi30k.xeon/log.jsonl`.
