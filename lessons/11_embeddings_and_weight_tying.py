# %% [markdown]
# # Chapter 11 — Embeddings, weight tying and the √d_model factor
#
# §3.4: "Similarly to other sequence transduction models, we use learned embeddings to convert
# the input tokens and output tokens to vectors of dimension $d_{model}$. We also use the usual
# learned linear transformation and softmax function to convert the decoder output to
# predicted next-token probabilities. In our model, we share the same weight matrix between the
# two embedding layers and the pre-softmax linear transformation [...]. In the embedding
# layers, we multiply those weights by $\sqrt{d_{model}}$."
#
# Three ideas in one paragraph: a lookup that is a matrix product, one matrix used three
# times, and a scale factor. This chapter takes them one at a time.

# %%
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig, sinusoidal_table
from minitransformer.verify import check_function

mt.manual_seed(0)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## A lookup is a product with one-hot rows
#
# Token id $t$ selects row $t$ of the table $E$ (V × C). Written as algebra, that is
# $\mathrm{onehot}(t)\,E$, so the gradient of the table is
# $dE = \mathrm{onehot}(ids)^\top dout$: each row collects the gradients of the positions that
# used it, and a token used three times gets the sum of three. The library never builds the
# one-hot matrix; it scatter-adds the rows of `dout` into a zero table.

# %%
table = rng.standard_normal((6, 4))
ids = np.array([[1, 3, 1], [0, 1, 5]])
onehot = np.eye(6)[ids]                                   # (B, T, V)
print("lookup == one-hot product:", np.allclose(onehot @ table, table[ids]))

E = mt.tensor(table, requires_grad=True)
dout = rng.standard_normal((2, 3, 4))
F.embedding(ids, E).backward(dout)
expected = np.einsum("btv,btc->vc", onehot, dout)
print("scatter-add == onehotᵀ dout:", np.allclose(E.grad, expected))
print("row 1, used three times, gets the sum of three:",
      np.allclose(E.grad[1], dout[0, 0] + dout[0, 2] + dout[1, 1]),
      " row 2, never used:", E.grad[2])
print(check_function(lambda w, i: F.embedding(i, w), table, ids, name="embedding"))

# %% [markdown]
# ## Padding embeds to nothing
#
# With a padding id, padding positions become the zero vector whatever the table holds, so the
# padding row is never read and its true gradient is zero.

# %%
E.zero_grad()
F.embedding(ids, E, padding_idx=0).backward(dout)
print("padding row gradient:", E.grad[0], " output at a padding position:",
      F.embedding(ids, E, padding_idx=0).numpy()[1, 0])

# %% [markdown]
# ## One matrix, three uses
#
# With a vocabulary shared by both languages (a joint BPE model, chapter 15), the source
# embedding, the target embedding and the output projection can be one matrix: the logit of
# token $v$ is the dot product of the decoder state with $v$'s embedding. Tying saves
# $2 V d_{model}$ parameters, which at $V = 37000$ and $d_{model} = 512$ is 38M, more than half
# the base model.

# %%
tied = Transformer(TransformerConfig.named("base", 37000))
untied = Transformer(TransformerConfig.named("base", 37000, share_embeddings=False,
                                             tie_output=False))
print(f"tied:   {tied.num_parameters():>12,} parameters")
print(f"untied: {untied.num_parameters():>12,} parameters")
print("one Parameter object:", tied.src_embed.weight is tied.tgt_embed.weight)
del tied, untied

# %% [markdown]
# Its gradient is the sum of the gradients of its three uses: the engine adds them as for any
# tensor used more than once (chapter 1).
#
# ## Why multiply by √d_model
#
# The table is initialised with entries of variance $1/d_{model}$ (so that the tied output
# logits start at unit scale), which makes an embedding vector's norm about 1. A positional
# encoding row has norm $\sqrt{d_{model}/2}$: its $d/2$ sines and cosines satisfy
# $\sin^2 + \cos^2 = 1$. Without a factor the position would drown the word.

# %%
d_model = 512
model = Transformer(TransformerConfig.named("tiny", 1000, d_model=d_model, n_heads=8))
word = model.src_embed.weight.numpy()[42]
position = sinusoidal_table(10, d_model)[3]
print(f"‖embedding‖ = {np.linalg.norm(word):.2f}   ‖embedding‖·√d_model = "
      f"{np.linalg.norm(word) * np.sqrt(d_model):.2f}   ‖PE row‖ = "
      f"{np.linalg.norm(position):.2f}")

# %% [markdown]
# After scaling, the word and the position have comparable norms, and neither swamps the
# other in their sum.
#
# ## Exercises
#
# 1. Derive $dE$ for the *output* use of the tied matrix, $logits = h E^\top$, and check that
#    the library's gradient of a tied model is the sum of the three uses.
# 2. Initialise the table with variance 1 instead of $1/d_{model}$. What are the scales of the
#    embeddings and of the initial logits now? Which part of §3.4 would you change?
# 3. Why can't an English–Chinese model share its embedding tables the way an English–German
#    one does?
