# %% [markdown]
# # Chapter 10 — The encoder and decoder stacks
#
# §3.1: "The encoder is composed of a stack of N = 6 identical layers. Each layer has two
# sub-layers. The first is a multi-head self-attention mechanism, and the second is a simple,
# position-wise fully connected feed-forward network. [...] The decoder is also composed of a
# stack of N = 6 identical layers. In addition to the two sub-layers in each encoder layer,
# the decoder inserts a third sub-layer, which performs multi-head attention over the output
# of the encoder stack."
#
# Chapters 5 to 9 built every piece. This chapter assembles them, follows the shapes of one
# batch through the whole model, draws the model as the paper's Figure 1 and the shapes to
# scale, and counts the parameters against Table 3 of the paper.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import viz
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.nn.summary import format_table

FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
mt.manual_seed(0)

# %% [markdown]
# ## One batch through the model
#
# Two German sentences of lengths 5 and 3 (padded with 0), and their English translations
# shifted right by a start token (id 2), as the decoder sees them during training. We follow
# the tensors by hand through the model's parts, in the order of Figure 1.

# %%
config = TransformerConfig.named("tiny", vocab_size=50, p_dropout=0.0)
model = Transformer(config).eval()
src = np.array([[11, 12, 13, 14, 15], [16, 17, 18, 0, 0]])         # (B, S)
tgt_in = np.array([[2, 21, 22, 23], [2, 24, 25, 0]])                # (B, T)

src_mask = model.source_mask(src)
print("source ids      ", src.shape, "-> padding mask", src_mask.shape)
x = model.src_embed(src) * np.sqrt(config.d_model)
print("embedded        ", x.shape, "(B, S, d_model)")
x = model.src_positions(x)
for i, layer in enumerate(model.encoder.layers):
    x = layer(x, src_mask)
    print(f"encoder layer {i}  ", x.shape)
memory = x

y = model.tgt_positions(model.tgt_embed(tgt_in) * np.sqrt(config.d_model))
tgt_mask = model.target_mask(tgt_in)
print("target embedded ", y.shape, "-> causal mask", tgt_mask.shape)
for i, layer in enumerate(model.decoder.layers):
    y = layer(y, memory, tgt_mask, src_mask)
    print(f"decoder layer {i}  ", y.shape, "(attends to memory of shape", memory.shape, ")")
logits = model.project(y)
print("logits          ", logits.shape, "(B, T, vocabulary)")

# %% [markdown]
# Walking by hand gave exactly what the model computes in one call:

# %%
print("same as model(src, tgt_in):", np.allclose(logits.numpy(), model(src, tgt_in).numpy(),
                                                 atol=1e-6))

# %% [markdown]
# ## Figure 1, drawn from the model
#
# Figure 1 of the paper, "The Transformer - model architecture", draws one layer of each
# stack with "N×" beside it. `viz.draw_model` draws it from `model` itself, running our batch
# through it once: every box is a module under the name the model registers
# (`decoder.layers.0.cross_attn`), every shape beside an arrow is one the forward pass
# computed. Each sub-layer sits under its Add & Norm, the residual path going around it
# (§3.1: "LayerNorm(x + Sublayer(x))"); the attention boxes give their masks, padding in the
# encoder and in cross-attention, causal and padding in the decoder's self-attention, and the
# shape of their weights (B, H, T, S); the encoder's output, the memory, feeds the
# cross-attention of every decoder layer; the dashed line joins the two embeddings, which are
# one table, and the final `Linear` is that table again (§3.4). Both layers of this tiny model
# are drawn in full (`layers_in_full=None`); `minitransformer plot model --config base` draws
# the paper's size.

# %%
viz.draw_model(model, (src, tgt_in), layers_in_full=None, path=FIGURES / "10_model.png")
plt.show()

# %% [markdown]
# ## The shapes, to scale
#
# The shapes printed above, drawn: each tensor a block with a row per token and the width of
# its feature axis, a copy behind it for the second sentence. Every layer gives back the
# (B, L, d_model) it took, which is why the layers stack; only the embedding (ids to
# d_model), the feed-forward network inside a layer (d_model to d_ff and back) and the output
# projection (d_model to the vocabulary) change the width. Attention weights are one grid per
# head, with the first sentence's mask in white: the decoder's self-attention is the causal
# triangle, and the cross-attention is the one place where a target length meets a source
# length, a T × S grid.

# %%
viz.draw_stack_shapes(model, (src, tgt_in), path=FIGURES / "10_shapes.png")
plt.show()

# %% [markdown]
# ## The parts and their parameters
#
# Every encoder layer has one attention (four $d_{model} \times d_{model}$ projections with
# biases), one feed-forward network and two LayerNorms; every decoder layer has two attentions,
# one feed-forward network and three LayerNorms. The embedding table is shared by source,
# target and output (§3.4), so it is counted once.

# %%
print(format_table(model))

# %% [markdown]
# ## Against Table 3
#
# The paper's base model has 65M parameters and the big one 213M, with a shared vocabulary of
# about 37,000 BPE tokens. Count ours by formula first:

# %%
def count(N, d, d_ff, vocab):
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d + N * (encoder_layer + decoder_layer)


for name, paper in (("base", 65e6), ("big", 213e6)):
    c = TransformerConfig.named(name, 37000)
    n = count(c.n_layers, c.d_model, c.d_ff, 37000)
    print(f"{name}: {n:,} parameters by formula, {n / paper:.1%} of the paper's "
          f"{paper / 1e6:.0f}M")
print("tiny model, formula", count(2, 32, 64, 50), "== library", model.num_parameters())

# %% [markdown]
# Both come within 3% of the paper; `minitransformer info --config base` builds the model and
# prints its table. The remaining gap depends on the exact vocabulary and on details the paper
# does not state.
#
# ## Exercises
#
# 1. Where would the parameters go if the source and target embeddings were not shared? Set
#    `share_embeddings=False, tie_output=False` and compare the counts.
# 2. What fraction of the base model's parameters is the embedding table? Of the big model's?
# 3. Follow the shapes of a batch through `model.decode` with a cache (chapter 17 uses it): what
#    shape do the self-attention keys have at the fifth step?
