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
from minitransformer.nn import PositionalEncoding, sinusoidal_table

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
# ## Learned positions
#
# Table 3, row (E) replaced the sinusoids with learned position embeddings and got "nearly
# identical results". The sinusoids have one advantage the paper points out: they may let the
# model extrapolate to sequences longer than any seen in training, while a learned table has
# no row for them. The library offers both; the learned one is a parameter like any other.

# %%
learned = PositionalEncoding(d_model, max_len=length, learned=True)
fixed = PositionalEncoding(d_model, max_len=length)
print("learned parameters:", learned.num_parameters(), " sinusoidal parameters:",
      fixed.num_parameters())
try:
    fixed(mt.tensor(np.zeros((1, length + 1, d_model)), dtype="float32"))
except ValueError as error:
    print("too long:", error)

# %% [markdown]
# ## Exercises
#
# 1. Compute $PE_p \cdot PE_{p+k}$ for $k$ from −50 to 50 and plot it. Is it symmetric in
#    $k$? Does it decrease monotonically?
# 2. Fit $M_k$ by least squares from the table (without the formula) using positions 0..L for
#    growing L. Why is the fit poorly conditioned for small L? (Hint: the slowest sinusoids.)
# 3. The embeddings are multiplied by $\sqrt{d_{model}}$ before the positions are added
#    (chapter 11). Compare the norms of a scaled embedding and of a positional row.
