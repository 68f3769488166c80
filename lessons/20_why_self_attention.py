# %% [markdown]
# # Chapter 20 — Why self-attention: cost, sequential steps and path length, measured
#
# §4 of the paper compares self-attention with recurrent and convolutional layers on three
# counts (Table 1), for a sequence of length $n$ and width $d$:
#
# | layer | complexity per layer | sequential operations | maximum path length |
# | --- | --- | --- | --- |
# | self-attention | $O(n^2 \cdot d)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(n \cdot d^2)$ | $O(n)$ | $O(n)$ |
# | convolutional (kernel $k$) | $O(k \cdot n \cdot d^2)$ | $O(1)$ | $O(\log_k n)$ |
#
# This chapter builds the three layers with the same framework, so the comparison is fair, and
# times them as $n$ grows. The time of the recurrent layer is dominated by its $n$ sequential
# steps; the others are a handful of big matrix products.

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Linear, Module, MultiHeadAttention

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
mt.manual_seed(0)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Three layers, one framework

# %%
class Recurrent(Module):
    """h_t = tanh(x_t W + h_{t-1} U + b): n steps, each waiting for the previous one."""

    def __init__(self, d):
        super().__init__()
        self.input, self.hidden = Linear(d, d), Linear(d, d, bias=False)

    def forward(self, x):                                     # (B, n, d)
        B, n, d = x.shape
        # all x_t W + b at once, cut into n slices (B, 1, d) up front: indexing inputs[:, t]
        # inside the loop would give each step's backward a whole (B, n, d) gradient
        inputs = F.split(self.input(x), n, axis=1)
        h = mt.zeros(B, d)
        states = []
        for t in range(n):                                    # the sequential part
            h = F.tanh(inputs[t].reshape(B, d) + self.hidden(h))   # (B, d)
            states.append(h)
        return F.stack(states, axis=1)                        # (B, n, d)


class Convolution(Module):
    """A 1-D convolution of kernel 3: each position sees itself and its two neighbours."""

    def __init__(self, d, k=3):
        super().__init__()
        self.k, self.mix = k, Linear(k * d, d)

    def forward(self, x):                                     # (B, n, d)
        B, n, d = x.shape
        padded = F.concat([mt.zeros(B, self.k // 2, d), x, mt.zeros(B, self.k // 2, d)],
                          axis=1)                             # (B, n + k - 1, d)
        windows = F.concat([padded[:, i:i + n] for i in range(self.k)], axis=2)  # (B, n, k·d)
        return self.mix(windows)                              # (B, n, d)


class SelfAttention(Module):
    def __init__(self, d, heads=4):
        super().__init__()
        self.attention = MultiHeadAttention(d, heads)

    def forward(self, x):
        return self.attention(x, x, x)


# %% [markdown]
# ## Time against length
#
# Forward and backward of one layer, batch 8, width $d = 64$, best of a few runs. Times this
# small are fragile: on a machine busy with other work, waiting for a free core can outweigh
# the work itself and reorder the three layers, so run this cell on a quiet machine.

# %%
d = 64
lengths = [8, 16, 32, 64] if FAST else [8, 16, 32, 64, 128, 256, 512]
layers = {"self-attention": SelfAttention(d), "recurrent": Recurrent(d),
          "convolution (k=3)": Convolution(d)}
times = {name: [] for name in layers}
for n in lengths:
    x = mt.tensor(rng.standard_normal((8, n, d)), dtype="float32", requires_grad=True)
    for name, layer in layers.items():
        best = float("inf")
        for _ in range(2 if FAST else 3):
            start = time.perf_counter()
            layer(x).sum().backward()
            best = min(best, time.perf_counter() - start)
        times[name].append(best)
    print(f"n = {n:>4}: " + "   ".join(f"{name} {1000 * times[name][-1]:7.1f} ms"
                                       for name in layers))

# %%
figure, axis = plt.subplots(figsize=(7, 4))
for name in layers:
    axis.loglog(lengths, times[name], "o-", label=name)
axis.set_xlabel("sequence length n")
axis.set_ylabel("forward + backward, seconds")
axis.set_title(f"One layer, batch 8, d = {d}")
axis.legend()
figure.tight_layout()
figure.savefig(FIGURES / "20_layer_cost.png", dpi=120)
plt.show()

# %% [markdown]
# At translation lengths (tens of tokens) the recurrent layer is the slowest: it pays for its
# $n$ sequential steps, each too small to keep the processor busy. The convolution, one matrix
# product over windows, is the cheapest, but sees only its neighbours (below). Self-attention
# sits between, and its $n^2$ term makes it grow fastest once $n$ is large (compare the last
# rows): the paper notes it beats recurrence "when the sequence length n is smaller than the
# representation dimensionality d, which is most often the case" for sentences. Read the
# table above for where the lines cross on this machine, if they do within these lengths: the
# fixed cost of each of the recurrent layer's $n$ small steps can keep it the slower one well
# past $n = d$.
#
# ## Path length
#
# How many layers must a signal cross to get from position 0 to position $n-1$? For attention,
# one: every position sees every other. For the recurrent layer, $n$ steps. For a stack of
# kernel-3 convolutions, $n - 1$ layers, since each widens the view by one position on either
# side (Table 1's $O(\log_k n)$ is for dilated convolutions; contiguous kernels need
# $O(n/k)$). Shown with gradients: does the output at the last position depend on the first
# input, after one layer?

# %%
n = 16
x = mt.tensor(rng.standard_normal((1, n, d)), dtype="float32", requires_grad=True)
for name, layer in layers.items():
    x.zero_grad()
    layer(x)[:, -1].sum().backward()
    reach = np.abs(x.grad[0]).sum(axis=1) > 0
    print(f"{name:<18}: last output depends on positions {np.flatnonzero(reach).min()}.."
          f"{np.flatnonzero(reach).max()} of 0..{n - 1}")

# %% [markdown]
# A one-layer convolution sees only its neighbours; the recurrent layer sees everything, but
# through $n$ multiplications by $U$ (whose gradients shrink or explode); attention sees
# everything directly.
#
# ## Exercises
#
# 1. Count the multiply-adds of each layer for $n = 50$, $d = 512$ and compare with Table 1.
# 2. Make the width $d = 256$ and time the layers at several lengths. Is self-attention with
#    its projections ever faster than the convolution? At what length does the attention core
#    alone (`F.scaled_dot_product_attention(x, x, x)`, what Table 1's row counts) become slower
#    than the convolution on your machine?
# 3. Restricted self-attention (Table 1, last row) lets each position see only $r$ neighbours.
#    Build it with a band mask (chapter 6) and measure the path length again.
