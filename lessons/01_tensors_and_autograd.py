# %% [markdown]
# # Chapter 1 — Tensors and the autograd tape
#
# Training a Transformer means computing, for tens of millions of numbers, how the loss would
# change if each of them moved a little: the gradient. Nobody writes that out for the whole
# model at once. Instead, every operation knows two things: how to compute its output
# (**forward**) and, given how the loss depends on its output, how the loss depends on its
# inputs (**backward**). Chain them in reverse and you have the gradient of anything built
# from them. This is reverse-mode automatic differentiation, and this chapter takes it apart.
#
# You will see:
#
# 1. a `Tensor`, which holds an array and remembers how it was made;
# 2. the tape: the graph of `Function` nodes that `backward()` walks in reverse, drawn;
# 3. one backward worked out by hand, then compared with the library and with finite
#    differences.
#
# Run this file top to bottom with `python lessons/01_tensors_and_autograd.py`, or open it as
# a notebook (Jupyter and VS Code read the `# %%` cells).

# %%
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer import viz

FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
mt.manual_seed(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## Tensors
#
# A tensor wraps an array: NumPy on the CPU, CuPy on a GPU. Python numbers become float32,
# the precision models are trained in. Asking for `requires_grad=True` marks a tensor as
# something we want the gradient of: a *leaf* of the graph, like a weight.

# %%
x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
w = mt.tensor([0.5, -0.3, 0.2], requires_grad=True)
print(x)
print("shape", x.shape, "dtype", x.dtype, "device", x.device)

# %% [markdown]
# ## The tape
#
# Every operation on tensors creates a node, a `Function`, and the result remembers it as its
# `creator`. The nodes form a graph that ends at the leaves. Here is
# $y = \sum_i \tanh(x_i w_i)$:

# %%
product = x * w
activation = product.tanh()
y = activation.sum()
print("y =", y.item())
print("y was made by", y.creator.name, "from a tensor made by",
      activation.creator.name, "from a tensor made by", product.creator.name)

# %% [markdown]
# `viz.draw_tape` draws that graph, as micrograd's `draw_dot` does for numbers. Each orange
# oval is a `Function` node with the shape of what it returned; each arrow is a tensor, from
# the node that made it to the node that used it; the blue boxes are the leaves, the inputs
# that want a gradient, and the yellow box is $y$, a single number of shape `()`. With
# `values=True` each tensor of a few numbers shows them: $x \circ w$, its tanh, their sum.

# %%
tape = viz.draw_tape(y, names={"x": x, "w": w, "y": y}, values=True,
                     path=FIGURES / "01_tape.png")
tape

# %% [markdown]
# ## Backward, by hand
#
# Walk the graph from the output back. The gradient of $y$ with respect to itself is 1. Each
# node turns the gradient of its output, `dout`, into gradients of its inputs:
#
# | forward | backward |
# | --- | --- |
# | $y = \sum_i a_i$ | $\partial y / \partial a_i = 1$ |
# | $a = \tanh(p)$ | $dp = da \cdot (1 - a^2)$ |
# | $p = x \circ w$ | $dx = dp \circ w$, $\quad dw = dp \circ x$ |
#
# With plain NumPy, walking the table bottom-up:

# %%
x_np, w_np = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.3, 0.2])
p_np = x_np * w_np
a_np = np.tanh(p_np)
da = np.ones_like(a_np)             # y = sum(a)     ->  da = 1
dp = da * (1 - a_np ** 2)           # a = tanh(p)    ->  dp = da (1 - a²)
dx_by_hand = dp * w_np              # p = x w        ->  dx = dp w
dw_by_hand = dp * x_np              #                    dw = dp x
print("dx by hand:", dx_by_hand)
print("dw by hand:", dw_by_hand)

# %% [markdown]
# ## Backward, by the library
#
# `y.backward()` does the same walk: it orders the nodes so that each comes before the nodes
# that made its inputs, calls each node's hand-written `backward`, and adds the results into
# the `.grad` of the leaves.

# %%
y.backward(retain_graph=True)  # keep the graph, to draw it with its gradients below
print("x.grad:", x.grad)
print("w.grad:", w.grad)
assert np.allclose(x.grad, dx_by_hand, atol=1e-6) and np.allclose(w.grad, dw_by_hand, atol=1e-6)

# %% [markdown]
# The same tape after backward, with the gradient each leaf received: `x.grad` and `w.grad`
# are the `dx` and `dw` worked out by hand above, and each has the shape of its tensor, as
# every gradient must. (Backward normally frees the graph as it goes, see below;
# `retain_graph=True` kept it for this picture.)

# %%
tape = viz.draw_tape(y, names={"x": x, "w": w, "y": y}, values=True, grads=True,
                     path=FIGURES / "01_tape_gradients.png")
tape

# %% [markdown]
# ## Checking against finite differences
#
# A derivative is a limit: $\frac{\partial y}{\partial x_i} \approx
# \frac{y(x + h e_i) - y(x - h e_i)}{2h}$ for a small $h$. The *central* difference has a
# truncation error of order $h^2$, plus a rounding error that grows as $h$ shrinks (chapter 2
# weighs the two), so in float64 with $h = 10^{-6}$ it agrees with a correct gradient to
# about ten digits. It needs two evaluations of $y$ per input number: far too slow to train
# with, perfect to check with.

# %%
def y_of(x_values):
    return np.tanh(x_values * w_np).sum()


h = 1e-6
numeric = np.array([(y_of(x_np + h * e) - y_of(x_np - h * e)) / (2 * h) for e in np.eye(3)])
print("finite differences:", numeric)
print("largest difference from dx by hand:", np.abs(numeric - dx_by_hand).max())

# %% [markdown]
# ## A tensor used twice
#
# When a tensor feeds two operations, the loss depends on it through both paths, and its
# gradient is the sum of the two. The engine adds them up for you: for $y = z \cdot z + z$,
# $dy/dz = 2z + 1$.

# %%
z = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
(z * z + z).sum().backward()
print("dy/dz:", z.grad, "expected", 2 * np.array([1.0, 2.0, 3.0]) + 1)

# %% [markdown]
# ## What backward keeps, and what it frees
#
# To run backward, a node needs some values from its forward (multiplication needs both
# factors, tanh its output). It keeps them on `saved` and the engine frees them as soon as the
# node's backward has run: memory goes back as the walk proceeds. Inside `mt.no_grad()` no
# graph is recorded at all, which is how evaluation and decoding save their memory.

# %%
a = mt.tensor([1.0, 2.0], requires_grad=True)
b = a * a
node = b.creator
print("saved before backward:", node.saved is not None)
b.sum().backward()
print("saved after backward: ", node.saved is not None)
with mt.no_grad():
    c = a * a
print("a graph under no_grad?", c.creator is not None)

# %% [markdown]
# ## Exercises
#
# 1. Work out by hand the gradient of $y = \sum_i x_i^2 w_i$ with respect to $x$ and $w$, then
#    check it with `backward()` and with central differences.
# 2. Change $h$ in the finite-difference cell to $10^{-2}$, $10^{-4}$, $10^{-8}$ and
#    $10^{-12}$. Explain why the error first shrinks, then grows again.
# 3. Call `y.backward()` twice on a new graph. Read the error, then make it work with
#    `retain_graph=True`. What happens to `x.grad` on the second call, and why?
# 4. Build a chain of 10,000 multiplications by 1.0 and call backward. Why would a recursive
#    graph walk fail here?
