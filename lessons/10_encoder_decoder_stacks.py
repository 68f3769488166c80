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
# batch through the whole model, and counts the parameters against Table 3 of the paper.

# %%
import numpy as np

import minitransformer as mt
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.nn.summary import format_table

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
