# %% [markdown]
# # Chapter 6 — Masks: padding and causality
#
# Chapter 5's attention lets every query look at every key. Two situations forbid that.
#
# * **Padding.** Sentences in a batch have different lengths and are padded to one width.
#   Nothing should attend to a padding position: it is not part of the sentence.
# * **Causality.** §3.1: "We also modify the self-attention sub-layer in the decoder stack to
#   prevent positions from attending to subsequent positions. This masking, combined with fact
#   that the output embeddings are offset by one position, ensures that the predictions for
#   position $i$ can depend only on the known outputs at positions less than $i$."
#
# §3.2.3 implements causality "by masking out (setting to $-\infty$) all values in the input
# of the softmax which correspond to illegal connections", and padding is masked the same way.
# This chapter builds both masks, checks that masked keys get exactly zero weight, and runs a
# causality test on a whole decoder.

# %%
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig

mt.manual_seed(0)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## The convention
#
# A mask in minitransformer is boolean and says where attention is *allowed*: `True` means
# "this query may look at this key", as in PyTorch's `F.scaled_dot_product_attention` (its
# `nn.MultiheadAttention` takes the opposite: True = masked out). It broadcasts to the scores,
# shape (..., T queries, S keys).
#
# ## Padding
#
# Two source sentences of lengths 4 and 2, padded with id 0 to width 4. The padding mask has
# shape (B, 1, 1, S): the same for every head and every query.

# %%
PAD = 0
src = np.array([[5, 6, 7, 8],
                [9, 4, 0, 0]])
padding = (src != PAD)[:, None, None, :]                 # (B, 1, 1, S)
print("padding mask of sentence 2:", padding[1, 0, 0])

B, H, T, S, D = 2, 1, 3, 4, 8
q, k, v = (rng.standard_normal((B, H, n, D)) for n in (T, S, S))
out, weights = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v),
                                              padding, return_weights=True)
print("weights of sentence 2 (queries x keys):\n", weights.numpy()[1, 0])

# %% [markdown]
# The masked keys get weight exactly 0, not merely small: the score is replaced by $-\infty$
# and $e^{-\infty} = 0$. So whatever the padding positions hold cannot leak into the output:

# %%
v_changed = v.copy()
v_changed[1, :, 2:] = 1e6                                # garbage in the padding positions
out_changed = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v_changed),
                                             padding)
print("output unchanged:", np.array_equal(out.numpy(), out_changed.numpy()))

# %% [markdown]
# ## Causality
#
# In the decoder, position $i$ may see positions $0..i$: a lower-triangular mask.

# %%
causal = F.causal_mask(5).numpy()
print(causal.astype(int))

# %% [markdown]
# The decoder combines the two: a key is allowed if it is a real token *and* not in the
# future, (B, 1, 1, T) & (T, T) -> (B, 1, T, T).

# %%
tgt = np.array([[2, 11, 12, 13, 3],
                [2, 14, 3, 0, 0]])
model = Transformer(TransformerConfig.named("tiny", 20, p_dropout=0.0)).eval()
print(model.target_mask(tgt)[1, 0].astype(int))

# %% [markdown]
# ## A causality test, live
#
# The definition, as an experiment: change the target token at position $j$, and the
# decoder's outputs at every position $i < j$ must not move at all, while positions
# $i \ge j$ may.

# %%
src = np.array([[5, 6, 7, 8, 9]])
tgt = np.array([[2, 11, 12, 13, 14, 15]])
before = model(src, tgt).numpy()
for j in range(1, tgt.shape[1]):
    changed = tgt.copy()
    changed[0, j] = 17
    after = model(src, changed).numpy()
    moved = np.abs(after - before).max(axis=-1)[0]      # largest change at each position
    earlier_still = np.all(moved[:j] == 0)
    print(f"change position {j}: positions < {j} unchanged: {earlier_still}; "
          f"change per position {moved.round(3)}")
    assert earlier_still

# %% [markdown]
# ## What if every key is masked?
#
# A query whose keys are all masked (an all-padding row, which batches do produce) would get
# $0/0$ from a naive softmax. The library defines it to give zero weights and a zero output,
# with a zero gradient, so one odd row can never turn a whole batch into NaN.

# %%
none_allowed = np.zeros((1, 1, 1, S), dtype=bool)
q1 = mt.tensor(rng.standard_normal((1, 1, 1, D)), requires_grad=True)
k1 = mt.tensor(rng.standard_normal((1, 1, S, D)), requires_grad=True)
out1 = F.scaled_dot_product_attention(q1, k1, mt.tensor(rng.standard_normal((1, 1, S, D))),
                                      none_allowed)
out1.sum().backward()
print("output:", out1.numpy().ravel()[:4], " largest |gradient| of q and k:",
      max(np.abs(q1.grad).max(), np.abs(k1.grad).max()))

# %% [markdown]
# ## Exercises
#
# 1. Remove the causal part of the decoder's mask (build the model's mask yourself and pass
#    it to `model.decoder`) and rerun the causality test. Which positions move now?
# 2. Padding at the *start* of a sentence (left padding) is used by some systems. Does the
#    padding mask still work? Does the causal mask still make sense?
# 3. Masking by adding a large negative number (−1e9) instead of −∞ is common. Find a case in
#    float32 where it does not give exactly zero weight.
