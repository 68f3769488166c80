# %% [markdown]
# # Chapter 3 — Linear layers, ReLU and the position-wise feed-forward network
#
# Chapter 2 gave us a way to trust a backward. Now we build the simplest layer of the
# Transformer and check it. §3.3 of the paper:
#
# > In addition to attention sub-layers, each of the layers in our encoder and decoder
# > contains a fully connected feed-forward network, which is applied to each position
# > separately and identically. This consists of two linear transformations with a ReLU
# > activation in between.
#
# $$\mathrm{FFN}(x) = \max(0, x W_1 + b_1) W_2 + b_2$$
#
# > Another way of describing this is as two convolutions with kernel size 1.
#
# We write a linear layer's backward by hand, check it, assemble the FFN, and verify the
# paper's remark about convolutions numerically.

# %%
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import PositionwiseFeedForward
from minitransformer.verify import check_function, check_module

mt.manual_seed(0)
rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## A linear layer, forward and backward
#
# With $x$ of shape (N, C_in), a weight $W$ of shape (C_out, C_in) (PyTorch's layout, which
# makes tying an embedding matrix to the output layer a matter of using the same array) and a
# bias $b$ of shape (C_out,): $y = x W^\top + b$. Each $y_{nj} = \sum_i x_{ni} W_{ji} + b_j$,
# so
#
# $$dx = dout\, W, \qquad dW = dout^\top x, \qquad db = \textstyle\sum_n dout_n.$$
#
# The bias gradient sums over rows because the same $b$ was added to every row.

# %%
def linear_forward(x, W, b):
    return x @ W.T + b


def linear_backward(dout, x, W):
    return dout @ W, dout.T @ x, dout.sum(axis=0)


x, W, b = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal(5)
dout = rng.standard_normal((4, 5))
dx, dW, db = linear_backward(dout, x, W)

xt, Wt, bt = (mt.tensor(a, requires_grad=True) for a in (x, W, b))
F.linear(xt, Wt, bt).backward(dout)
print("dx matches the library:", np.allclose(dx, xt.grad))
print("dW matches the library:", np.allclose(dW, Wt.grad))
print("db matches the library:", np.allclose(db, bt.grad))
print(check_function(F.linear, x, W, b, name="linear"))

# %% [markdown]
# ## ReLU
#
# $\max(0, a)$ passes the gradient where the input was positive and blocks it elsewhere:
# $da = dout \circ [a > 0]$. At exactly 0 the function has no derivative; we take 0 there,
# and gradient checks keep their inputs away from 0, where finite differences would straddle
# the kink.

# %%
a = mt.tensor([-2.0, -0.5, 0.5, 2.0], requires_grad=True)
F.relu(a).backward(np.array([1.0, 1.0, 1.0, 1.0]))
print("relu gradient:", a.grad)

# %% [markdown]
# ## The position-wise feed-forward network
#
# The Transformer's FFN expands each position from $d_{model}$ to $d_{ff}$ (2048 in the base
# model, four times wider) and back. "Position-wise" means the same weights act on every
# position independently: a (B, T, C) input is just B·T rows for the linear layers.

# %%
d_model, d_ff = 8, 32
ffn = PositionwiseFeedForward(d_model, d_ff)
tokens = mt.tensor(rng.standard_normal((2, 5, d_model)), dtype="float32")  # (B, T, C)
out = ffn(tokens)
print("input", tokens.shape, "-> output", out.shape)
print("parameters:", ffn.num_parameters(), "=", 2 * d_model * d_ff + d_ff + d_model)

# Position-wise: moving a position around moves its output, nothing else changes.
swapped = mt.tensor(tokens.numpy()[:, ::-1].copy())
print("same function at every position:",
      np.allclose(ffn(swapped).numpy()[:, ::-1], out.numpy(), atol=1e-6))

# %% [markdown]
# ## Two convolutions with kernel size 1
#
# A 1-D convolution with kernel size $k$ computes, at each position $t$, a linear function of
# positions $t, \dots, t+k-1$. With $k = 1$ it sees one position: it is a linear layer applied
# at every position. Let us write the convolution out with explicit loops, as a convolution
# is usually described, and compare.

# %%
def conv1d_kernel1(x, W, b):
    """x (T, C_in), kernel W (C_out, C_in, 1): y[t, o] = Σ_i W[o, i, 0] x[t, i] + b[o]."""
    T, _ = x.shape
    y = np.zeros((T, W.shape[0]))
    for t in range(T):
        for o in range(W.shape[0]):
            y[t, o] = sum(W[o, i, 0] * x[t, i] for i in range(W.shape[1])) + b[o]
    return y


W1, b1 = ffn.w_1.weight.numpy(), ffn.w_1.bias.numpy()
W2, b2 = ffn.w_2.weight.numpy(), ffn.w_2.bias.numpy()
sentence = tokens.numpy()[0].astype(np.float64)                   # (T, C)
hidden = np.maximum(conv1d_kernel1(sentence, W1[:, :, None], b1), 0)
by_convolution = conv1d_kernel1(hidden, W2[:, :, None], b2)
print("FFN == conv(k=1) -> ReLU -> conv(k=1):",
      np.allclose(by_convolution, out.numpy()[0], atol=1e-5))

# %% [markdown]
# ## Checking the whole module
#
# `check_module` treats the parameters as inputs too: all four of $W_1, b_1, W_2, b_2$ and the
# input get their gradients compared with finite differences.

# %%
print(check_module(PositionwiseFeedForward(4, 6), rng.standard_normal((2, 3, 4))))

# %% [markdown]
# ## Exercises
#
# 1. Derive $dW = dout^\top x$ from $y_{nj} = \sum_i x_{ni} W_{ji}$ by writing
#    $\partial L / \partial W_{ji}$ as a sum over $n$.
# 2. For an input of shape (B, T, C), `linear` reshapes it to (B·T, C). What would go wrong in
#    the backward of $W$ if it forgot to sum over both B and T?
# 3. Count the FFN's multiply-adds per token for the base model ($d_{model} = 512$,
#    $d_{ff} = 2048$) and compare with the attention projections ($4 d_{model}^2$).
# 4. Replace ReLU with tanh in a copy of the FFN and gradient-check it.
