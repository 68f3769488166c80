# %% [markdown]
# # Chapter 8 — Positional encoding
#
# Attention is blind to order: permute the keys and values together and every query gets the
# same output. §3.5: "Since our model contains no recurrence and no convolution, in order for
# the model to make use of the order of the sequence, we must inject some information about
# the relative or absolute position of the tokens." The paper adds to each embedding
#
# $$PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d_{model}}), \qquad
#   PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d_{model}})$$
#
# This chapter shows attention's blindness, draws the table, and checks the paper's reason
# for choosing it: "for any fixed offset $k$, $PE_{pos+k}$ can be represented as a linear
# function of $PE_{pos}$".

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer import viz
from minitransformer.nn import PositionalEncoding, Transformer, TransformerConfig, sinusoidal_table
from minitransformer.optim import Adam

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## Attention ignores order
#
# Shuffle the positions of keys and values the same way: the output does not change. Without
# positions, "dog bites man" and "man bites dog" look the same to an attention layer.

# %%
q, k, v = rng.standard_normal((1, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
order = rng.permutation(6)
before = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v)).numpy()
after = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k[order]),
                                       mt.tensor(v[order])).numpy()
print("same output after shuffling the keys:", np.allclose(before, after))

# %% [markdown]
# ## The table
#
# Each pair of columns $(2i, 2i+1)$ is a sinusoid of wavelength $2\pi \cdot 10000^{2i/d}$:
# from $2\pi$ for the first pair up towards $10000 \cdot 2\pi$ (the paper's bound; the last
# pair, $2i = d - 2$, has $10000^{62/64} \cdot 2\pi \approx 7500 \cdot 2\pi$ at $d = 64$). Fast
# columns tell nearby positions apart, slow ones far positions.

# %%
d_model, length = 64, 100
with mt.default_dtype("float64"):  # float64 for the exact checks below
    table = sinusoidal_table(length, d_model)
viz.positional_encoding(d_model, length, path=FIGURES / "08_positional_encoding.png")
plt.show()

# %% [markdown]
# In the picture the positions run along and the 64 dimensions up, blue for +1 and red for
# −1. The bottom rows are the fastest pair, with a wavelength of $2\pi \approx 6.3$ positions:
# their colours flip every three positions or so, a checkerboard. Each pair up is slower, its
# wavelength $10000^{2/64} \approx 1.33$ times the one below, and the waves fan out to the
# right. From dimension 30 up a quarter of a wavelength is longer than the 100 positions
# drawn: there the sines of the even rows have risen only part of the way from 0 (white)
# towards 1, and the cosines of the odd rows are still near 1 (dark blue), so the interleaved
# layout shows as horizontal stripes, alternately pale and dark. At position 0, the left edge,
# every sine is 0 and every cosine 1, so that column alternates white and dark blue from the
# bottom to the top.
#
# ## A fixed linear map from position to position + k
#
# For one pair with frequency $\omega$, $(\sin \omega(p+k), \cos \omega(p+k))$ is
# $(\sin \omega p, \cos \omega p)$ rotated by the angle $\omega k$:
#
# $$\begin{pmatrix} \sin\omega(p+k) \\ \cos\omega(p+k) \end{pmatrix} =
# \begin{pmatrix} \cos\omega k & \sin\omega k \\ -\sin\omega k & \cos\omega k \end{pmatrix}
# \begin{pmatrix} \sin\omega p \\ \cos\omega p \end{pmatrix}$$
#
# The rotation depends on $k$ only, not on $p$. Stack one rotation per pair into a
# block-diagonal matrix $M_k$, and $PE_{p+k} = M_k PE_p$ for every $p$.

# %%
def shift_matrix(k, d_model):
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        omega = 1.0 / 10000 ** (2 * i / d_model)
        c, s = np.cos(omega * k), np.sin(omega * k)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return M


for k in (1, 5, 17):
    M = shift_matrix(k, d_model)
    predicted = table[: length - k] @ M.T                     # M_k PE_p for every p at once
    print(f"k = {k:<3} largest error of PE[p+k] = M_k PE[p] over all p: "
          f"{np.abs(predicted - table[k:]).max():.1e}")

# %% [markdown]
# A linear map is something one attention projection can learn, which is why the authors
# hoped the model could "easily learn to attend by relative positions".
#
# ## Dot products fall off with distance
#
# $PE_p \cdot PE_{p+k} = \sum_i \cos(\omega_i k)$ depends on $k$ alone, and it is largest at
# $k = 0$: positions close together look alike.

# %%
similarity = table @ table[50]
print("PE[50] · PE[50 + k] for k = -4..4:", similarity[46:55].round(1))

# %% [markdown]
# ## Two layouts, one encoding
#
# The paper interleaves: sine in the even dimensions, cosine in the odd ones. Many
# implementations put all the sines in the first half of the vector and all the cosines in
# the second (tensor2tensor's `get_timing_signal_1d` among them, which also spaces its
# frequencies a little differently). With the paper's frequencies that is the same table with
# its columns in another order: column $j$ of the halves layout is column $\pi(j)$ of the
# paper's, with $\pi = (0, 2, 4, \dots, d-2, 1, 3, \dots, d-1)$, the same for every position.

# %%
frequencies = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)        # (C/2,)
angles = np.arange(length)[:, None] * frequencies                         # (L, C/2)
halves = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)         # (L, C)
perm = np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
print("π =", perm[:4], "...", perm[d_model // 2:d_model // 2 + 4], "...")
print("halves layout == paper's table with its columns permuted by π:",
      np.allclose(halves, table[:, perm], atol=1e-12))

# %% [markdown]
# The model cannot tell the two apart. Every weight that reads the $d_{model}$ features of the
# residual stream (the embedding table, $W^Q, W^K, W^V$, the first feed-forward matrix) and
# every one that writes them ($W^O$, the second feed-forward matrix and their biases, and the
# LayerNorm gains and biases) can have that axis permuted by the same $\pi$: the permuted
# model computes, with the halves layout, exactly what the original computes with the
# paper's, only with its features stored in another order. Attention, LayerNorm and the
# elementwise Adam update do not care about that order. So train the tiny model twice on
# chapter 14's reversal task, once as the paper has it and once with the halves layout and
# the same initial weights permuted, on the same batches:

# %%
class HalvesPositionalEncoding(PositionalEncoding):
    """The sinusoids with all sines first, then all cosines."""

    def table(self, device, dtype):
        columns = np.concatenate([np.arange(0, self.d_model, 2), np.arange(1, self.d_model, 2)])
        return super().table(device, dtype)[:, columns]


def permute_features(model, perm):
    """Permute the d_model axis of every parameter that reads or writes the residual stream."""
    for name, param in model.named_parameters():
        if name.endswith(("embed.weight", "w_q.weight", "w_k.weight", "w_v.weight",
                          "w_1.weight")):
            param.data[...] = param.data[:, perm]    # reads the features: its columns
        elif name.endswith(("w_o.weight", "w_o.bias", "w_2.weight", "w_2.bias", ".gain",
                            "norm.bias")):
            param.data[...] = param.data[perm]       # writes them: its rows


VOCAB, BOS, EOS = 13, 1, 2
config = TransformerConfig.named("tiny", VOCAB, p_dropout=0.0)
losses = {}
for layout in ("interleaved (the paper)", "halves, weights permuted"):
    mt.manual_seed(0)                                  # the same initial weights
    batches = np.random.default_rng(0)                 # the same batches
    model = Transformer(config)
    if layout.startswith("halves"):
        model.src_positions = HalvesPositionalEncoding(config.d_model, config.max_len)
        model.tgt_positions = HalvesPositionalEncoding(config.d_model, config.max_len)
        permute_features(model, np.concatenate([np.arange(0, config.d_model, 2),
                                                np.arange(1, config.d_model, 2)]))
    optimizer = Adam(model.parameters(), lr=1e-3)
    losses[layout] = []
    for _ in range(20 if FAST else 100):
        src = batches.integers(3, VOCAB, size=(32, int(batches.integers(4, 9))))
        tgt = src[:, ::-1]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(src, np.concatenate([np.full((32, 1), BOS), tgt], 1)),
                               np.concatenate([tgt, np.full((32, 1), EOS)], 1))
        loss.backward()
        optimizer.step()
        losses[layout].append(loss.item())
steps = len(losses["interleaved (the paper)"])
for layout, values in losses.items():
    print(f"{layout:<25} loss at steps 1, {steps // 2}, {steps}: "
          + "  ".join(f"{values[i]:.6f}" for i in (0, steps // 2 - 1, steps - 1)))
print("largest difference over all steps:",
      f"{max(abs(a - b) for a, b in zip(*losses.values(), strict=True)):.1e}")

# %% [markdown]
# The same loss at step 1, to every printed digit; after that the two runs drift apart a little
# (the largest difference is printed), since the products sum the features in another order and
# Adam's updates carry those float32 roundings on from step to step, but they train alike.
# Without permuting the initial weights the halves layout would train as well, but from what
# amounts to a different random start. Which layout to use is a matter of convention; what
# matters is the set of frequencies.
#
# ## Learned positions, and positions beyond the table
#
# Table 3, row (E) replaced the sinusoids with learned position embeddings and got "nearly
# identical results". §3.5 gives the reason to prefer the sinusoids all the same: "it may
# allow the model to extrapolate to sequence lengths longer than the ones encountered during
# training." The formula gives a row for any position; a learned table has exactly the rows
# it was made with, `max_len` of them, and only those that training reached are trained.

# %%
learned = PositionalEncoding(d_model, max_len=length, learned=True)
fixed = PositionalEncoding(d_model, max_len=length)
print("learned parameters:", learned.num_parameters(), "a table of", learned.weight.shape,
      " sinusoidal parameters:", fixed.num_parameters())

# %% [markdown]
# The library's sinusoidal module also keeps a table of `max_len` rows, but only as a cache
# computed once: the rows are the formula's, and a module with a larger `max_len` has the
# same first rows and more after them, each equal to the formula at its position. Asked for
# more positions than its table has, a module refuses rather than read past it; the remedy is
# a larger `max_len` (1024 in the model's configuration), which for the sinusoids changes
# nothing else.

# %%
def added_positions(module, n):
    """What the module adds to a sequence of n positions."""
    with mt.default_dtype("float64"):
        return module(mt.tensor(np.zeros((1, n, d_model)))).numpy()[0]     # (n, C)


longer = PositionalEncoding(d_model, max_len=4 * length)
rows = added_positions(longer, 4 * length)
print(f"max_len={4 * length}: first {length} rows == the max_len={length} module's:",
      np.allclose(rows[:length], added_positions(fixed, length)))
far = 3 * length + 7                                   # far beyond the first module's rows
by_formula = np.zeros(d_model)
by_formula[0::2] = np.sin(far * frequencies)
by_formula[1::2] = np.cos(far * frequencies)
print(f"row {far} == the formula at position {far}:", np.allclose(rows[far], by_formula))
try:
    fixed(mt.tensor(np.zeros((1, length + 1, d_model)), dtype="float32"))
except ValueError as error:
    print("the max_len=100 module, asked for 101 positions:", error)

# %% [markdown]
# ## Exercises
#
# 1. With a table of 101 positions, compute $PE_{50} \cdot PE_{50+k}$ for $k$ from −50 to 50
#    and plot it. Is it symmetric in $k$? Does it decrease monotonically?
# 2. Fit $M_k$ by least squares from the table (without the formula) using positions 0..L for
#    growing L. Why is the fit poorly conditioned for small L? (Hint: the slowest sinusoids.)
# 3. The embeddings are multiplied by $\sqrt{d_{model}}$ before the positions are added
#    (chapter 11). Compare the norms of a scaled embedding and of a positional row.
