# %% [markdown]
# # Chapter 5 — Scaled dot-product attention
#
# §3.2.1 of the paper:
#
# > We call our particular attention "Scaled Dot-Product Attention". The input consists of
# > queries and keys of dimension $d_k$, and values of dimension $d_v$. We compute the dot
# > products of the query with all keys, divide each by $\sqrt{d_k}$, and apply a softmax
# > function to obtain the weights on the values.
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\Big(\frac{QK^\top}{\sqrt{d_k}}\Big) V$$
#
# Chapter 4 gave us softmax and its backward; this chapter puts it between two matrix
# products, works the paper's intuition through with numbers, and measures why the
# $\sqrt{d_k}$ is there.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer import viz
from minitransformer.verify import check_function

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"  # the tests run every lesson quickly
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## A worked example
#
# One query, two keys, $d_k = 64$. Suppose the dot products are 112 and 96. Divided by
# $\sqrt{64} = 8$ they become 14 and 12, and the softmax gives weights $e^{14}/(e^{14} + e^{12})
# \approx 0.88$ and $0.12$: the query mostly takes the first value.

# %%
scores = np.array([112.0, 96.0])
scaled = scores / np.sqrt(64)
weights = np.exp(scaled) / np.exp(scaled).sum()
print("scaled scores:", scaled, " weights:", weights)
print("without scaling:", np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum())

# %% [markdown]
# Without the scaling the second weight is $e^{-16} \approx 10^{-7}$: the softmax has
# saturated, and a saturated softmax passes almost no gradient back (its Jacobian
# $\mathrm{diag}(y) - yy^\top$ is nearly zero when $y$ is one-hot).
#
# ## The function, in matrices
#
# With queries Q of shape (T, D), keys K (S, D) and values V (S, D_v):
#
# 1. scores $S = QK^\top / \sqrt{D}$, shape (T, S): one row per query;
# 2. weights $P = \mathrm{softmax}(S)$ along each row;
# 3. output $PV$, shape (T, D_v): each query's weighted average of the values.

# %%
def attention_by_hand(q, k, v):
    scores = q @ k.T / np.sqrt(q.shape[-1])                          # (T, S)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)                   # rows sum to 1
    return weights @ v, weights                                      # (T, Dv), (T, S)


q, k, v = rng.standard_normal((3, 8)), rng.standard_normal((4, 8)), rng.standard_normal((4, 5))
by_hand, weights = attention_by_hand(q, k, v)
out, lib_weights = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v),
                                                  return_weights=True)
print("weights (each row sums to 1):\n", weights)
print("library agrees:", np.allclose(out.numpy(), by_hand), np.allclose(lib_weights.numpy(),
                                                                        weights))

# %% [markdown]
# ## The backward
#
# Walk the three steps back. With $dP$ the gradient reaching the weights and $dS$ the one
# reaching the scores:
#
# | forward | backward |
# | --- | --- |
# | $O = PV$ | $dV = P^\top dO$, $\quad dP = dO\, V^\top$ |
# | $P = \mathrm{softmax}(S)$ | $dS = P \circ (dP - \mathrm{rowsum}(dP \circ P))$ (chapter 4) |
# | $S = QK^\top/\sqrt D$ | $dQ = dS\, K / \sqrt D$, $\quad dK = dS^\top Q / \sqrt D$ |
#
# The library runs exactly this as one fused Function over any leading axes (batch, heads):

# %%
print(check_function(F.scaled_dot_product_attention, rng.standard_normal((2, 3, 4)),
                     rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3)),
                     name="attention"))

# %% [markdown]
# ## On the tape: composed against fused
#
# Written with the small operations of chapter 1, attention leaves five nodes on the tape:
# the transpose of $K$, the product $QK^\top$, the division by $\sqrt{d_k}$ (a constant, in
# grey: it takes no gradient), the softmax and the product with $V$. Each keeps what its own
# backward needs, and backward walks all five. The arrow named `scores` carries the (T, S)
# matrix $S$, the one named `weights` carries $P$.

# %%
Q, K, V = (mt.tensor(a, dtype="float32", requires_grad=True) for a in (q, k, v))
scores = Q @ K.T / np.sqrt(Q.shape[-1])                              # (T, S)
weights = F.softmax(scores)                                         # (T, S)
composed = weights @ V                                              # (T, Dv)
tape = viz.draw_tape(composed, names={"Q": Q, "K": K, "V": V, "scores": scores,
                                      "weights": weights},
                     path=FIGURES / "05_tape_composed.png")
tape

# %% [markdown]
# The library's attention is one Function: one node, one backward (the table above), which
# keeps only what that backward reads: $Q$, $K$, $V$, the weights $P$ and the output. Same
# numbers, fewer and larger steps: that is what the fused Functions of this project are for.

# %%
fused = F.scaled_dot_product_attention(Q, K, V)
print("same output:", np.allclose(fused.numpy(), composed.numpy(), atol=1e-6))
tape = viz.draw_tape(fused, names={"Q": Q, "K": K, "V": V},
                     path=FIGURES / "05_tape_fused.png")
tape

# %% [markdown]
# ## Why $\sqrt{d_k}$: measured
#
# The paper's footnote: if the components of $q$ and $k$ are independent with mean 0 and
# variance 1, then $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ has mean 0 and variance $d_k$. The
# scores grow like $\sqrt{d_k}$, and the softmax saturates. Let us measure both, with and
# without the scaling, for growing $d_k$.

# %%
dims = [4, 16, 64, 256] if FAST else [4, 8, 16, 32, 64, 128, 256, 512, 1024]
n_samples = 200 if FAST else 2000
variance, variance_scaled, top_weight, top_weight_scaled = [], [], [], []
for d in dims:
    qs = rng.standard_normal((n_samples, d))
    ks = rng.standard_normal((n_samples, 10, d))             # 10 keys per query
    raw = np.einsum("nd,nkd->nk", qs, ks)                    # (n, 10)
    for values, out_var, out_top, scale in ((raw, variance, top_weight, 1.0),
                                            (raw, variance_scaled, top_weight_scaled,
                                             np.sqrt(d))):
        s = values / scale
        out_var.append(s.var())
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out_top.append((p / p.sum(axis=1, keepdims=True)).max(axis=1).mean())
for d, a, b, c, e in zip(dims, variance, variance_scaled, top_weight, top_weight_scaled,
                         strict=True):
    print(f"d_k={d:<5} variance {a:8.1f} -> scaled {b:4.2f}   "
          f"largest weight {c:.3f} -> scaled {e:.3f}")

# %%
figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
left.loglog(dims, variance, "o-", label="q·k")
left.loglog(dims, variance_scaled, "o-", label="q·k / √d_k")
left.set_xlabel("d_k")
left.set_ylabel("variance of the scores")
left.legend()
right.semilogx(dims, top_weight, "o-", label="softmax(q·k)")
right.semilogx(dims, top_weight_scaled, "o-", label="softmax(q·k / √d_k)")
right.axhline(0.1, color="gray", lw=0.8, ls=":", label="uniform over 10 keys")
right.set_xlabel("d_k")
right.set_ylabel("mean largest weight (10 keys)")
right.set_ylim(0, 1.05)
right.legend()
figure.suptitle("Without scaling, scores grow with d_k and the softmax saturates")
figure.tight_layout()
figure.savefig(FIGURES / "05_scaling.png", dpi=120)
plt.show()

# %% [markdown]
# Without the scaling the variance grows linearly with $d_k$ and the largest of ten weights
# heads for 1: each query attends to one key, and the gradient through the other weights
# vanishes. With it, the variance stays at 1 and the weights stay spread at every width. The
# picture is saved as `figures/05_scaling.png`.
#
# ## Exercises
#
# 1. Redo the worked example with $d_k = 512$ and dot products of 316.8 and 271.5
#    ($\sqrt{512} \approx 22.6$). What are the weights with and without scaling?
# 2. Gradient-check attention with scores scaled by $1/d_k$ instead of $1/\sqrt{d_k}$ (write
#    it with `matmul` and `softmax`). Is the gradient right? Is the model better off?
# 3. Time the library's attention for T = S = 64, 128, 256, 512 with D = 64. How does the time
#    grow with the length, and which step dominates?
