# %% [markdown]
# # Chapter 9 — Layer normalization and residual connections
#
# §3.1: "We employ a residual connection around each of the two sub-layers, followed by layer
# normalization. That is, the output of each sub-layer is $\mathrm{LayerNorm}(x +
# \mathrm{Sublayer}(x))$." The residual gives every layer a path that does nothing, so a deep
# stack starts close to the identity; the normalization keeps the scale of the activations in
# check. This chapter derives LayerNorm's backward, then compares the paper's arrangement
# (post-LN) with the later pre-LN one, $x + \mathrm{Sublayer}(\mathrm{LayerNorm}(x))$, by the
# size of the gradients that reach each layer of a deep encoder.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Encoder
from minitransformer.verify import check_function

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## LayerNorm, forward
#
# Over the $C = d_{model}$ features of one token:
#
# $$\mu = \tfrac1C \textstyle\sum_i x_i, \quad \sigma^2 = \tfrac1C \sum_i (x_i - \mu)^2, \quad
# \hat x = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}, \quad y = g \circ \hat x + b$$
#
# Every token is normalized on its own, unlike batch normalization, so it works the same for
# one sentence or a thousand, in training and in decoding.

# %%
x = rng.standard_normal((2, 6)) * 5 + 3
y = F.layer_norm(mt.tensor(x), np.ones(6), np.zeros(6)).numpy()
print("row means:", y.mean(axis=1), " row variances:", y.var(axis=1))

# %% [markdown]
# ## LayerNorm, backward
#
# With $g_i = dout_i \cdot gain_i$ the gradient reaching $\hat x$, and
# $\partial \hat x_i / \partial x_j = r(\delta_{ij} - \frac1C - \frac{\hat x_i \hat x_j}{C})$
# where $r = 1/\sqrt{\sigma^2 + \epsilon}$:
#
# $$dx = r\,\big(g - \mathrm{mean}(g) - \hat x \circ \mathrm{mean}(g \circ \hat x)\big), \qquad
#   dgain = \textstyle\sum dout \circ \hat x, \qquad dbias = \sum dout$$
#
# The two means remove from $g$ its component along the constant vector and along $\hat x$:
# the directions in which $x$ can move without changing $\hat x$ (a shift and a scaling).

# %%
print(check_function(F.layer_norm, rng.standard_normal((3, 8)),
                     1 + 0.1 * rng.standard_normal(8), 0.1 * rng.standard_normal(8),
                     name="layer_norm"))

# %% [markdown]
# ## Post-LN and pre-LN through depth
#
# Build two deep encoders, identical except for where the normalization sits, send the same
# batch through, backpropagate a loss and measure the gradient norm of each layer's first
# feed-forward matrix. Xiong et al. (2020) showed that in post-LN the gradients of the layers
# near the output are the largest at initialisation, and argued that this is why the paper
# needs its learning-rate warmup. Here is what this encoder shows:

# %%
n_layers, d_model = (6, 32) if FAST else (12, 64)
batch = mt.tensor(rng.standard_normal((8, 10, d_model)), dtype="float32")
target = mt.tensor(rng.standard_normal((8, 10, d_model)), dtype="float32")
norms = {}
for pre_norm in (False, True):
    mt.manual_seed(0)
    encoder = Encoder(n_layers, d_model, n_heads=4, d_ff=4 * d_model, p_dropout=0.0,
                      pre_norm=pre_norm)
    loss = ((encoder(batch) - target) ** 2).mean()
    loss.backward()
    norms[pre_norm] = [float(np.linalg.norm(layer.feed_forward.w_1.weight.grad))
                       for layer in encoder.layers]
    print(("pre-LN " if pre_norm else "post-LN"), "gradient norm per layer:",
          np.round(norms[pre_norm], 4))

# %%
figure, axis = plt.subplots(figsize=(7, 3.6))
layers = np.arange(1, n_layers + 1)
axis.semilogy(layers, norms[False], "o-", label="post-LN (the paper)")
axis.semilogy(layers, norms[True], "o-", label="pre-LN")
axis.set_xlabel("layer (1 = nearest the input)")
axis.set_ylabel("‖∂loss/∂W₁‖ of the layer's FFN")
axis.set_title(f"Gradients through a {n_layers}-layer encoder at initialisation")
axis.legend()
figure.tight_layout()
figure.savefig(FIGURES / "09_gradient_norms.png", dpi=120)
plt.show()

# %% [markdown]
# In post-LN the gradients grow towards the output, as Xiong et al. describe, though not layer
# by layer at this small size: there are dips on the way, and the growth from first to last is
# modest (the ratio is printed below; the fast mode's 6 layers show less of it than the full
# mode's 12). In pre-LN they run the other way at this size: every layer adds its output to a
# residual stream whose norm grows with depth (nearly everywhere: printed below), and the layers
# later in the stack change that stream relatively less. The stream's norm, token by token,
# after each layer of the same pre-LN encoder:

# %%
mt.manual_seed(0)                                   # the pre-LN encoder measured above
encoder = Encoder(n_layers, d_model, n_heads=4, d_ff=4 * d_model, p_dropout=0.0,
                  pre_norm=True)
x, stream = batch, []
with mt.no_grad():
    for layer in encoder.layers:
        x = layer(x)                                # (B, T, C), before the final LayerNorm
        stream.append(float(np.linalg.norm(x.numpy(), axis=-1).mean()))
print("pre-LN: mean norm of a token's vector after each layer:", np.round(stream, 1))

# %% [markdown]
# The ratio of the last layer's gradient to the first's says how uneven the updates of one
# learning rate are across the stack:

# %%
for pre_norm, name in ((False, "post-LN"), (True, "pre-LN")):
    print(f"{name}: last / first layer gradient norm = "
          f"{norms[pre_norm][-1] / norms[pre_norm][0]:.2f}")

# %% [markdown]
# ## Exercises
#
# 1. Remove the residual connections (use the sub-layer output alone) in a copy of the encoder
#    layer and measure the gradient norms again. What happens to the first layers?
# 2. Why must LayerNorm's backward keep the $\hat x \circ \mathrm{mean}(g \circ \hat x)$ term?
#    Drop it and find the input for which the gradient check fails most.
# 3. With post-LN, train the tiny model on the reversal task of chapter 14 with and without
#    warmup. Then do the same with pre-LN.
