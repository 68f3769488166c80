# %% [markdown]
# # Chapter 14 — Training on a toy task, and the attention it learns
#
# Every part is built and checked. Before real language, a task whose right answer we know,
# so we can see whether the model found it: **reversal**. The source is a random sequence of
# tokens, the target the same sequence backwards. No word-by-word rule solves it: output
# position $i$ must look at input position $n - 1 - i$, so the model must learn to attend.
# (The Annotated Transformer uses copying the same way; reversal is harder to fake, since a
# copy can lean on position alone.)

# %%
import os
import time
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer import viz
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import greedy_decode

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
mt.manual_seed(0)
rng = np.random.default_rng(0)
PAD, BOS, EOS, VOCAB = 0, 1, 2, 13                        # tokens 3..12 are the "words"

# %% [markdown]
# ## Data
#
# Each batch holds sequences of one random length between 4 and 8. The decoder input is the
# target shifted right behind a start token; the output to predict is the target followed by
# an end token.

# %%
def batch(generator, n):
    length = int(generator.integers(4, 9))
    src = generator.integers(3, VOCAB, size=(n, length))
    tgt = src[:, ::-1]
    tgt_in = np.concatenate([np.full((n, 1), BOS), tgt], axis=1)
    tgt_out = np.concatenate([tgt, np.full((n, 1), EOS)], axis=1)
    return src, tgt_in, tgt_out


src, tgt_in, tgt_out = batch(rng, 2)
print("source         ", src[0])
print("decoder input  ", tgt_in[0])
print("decoder target ", tgt_out[0])

# %% [markdown]
# ## Training
#
# The tiny configuration (2 + 2 layers, $d_{model} = 32$, 4 heads), no dropout, Adam with a
# short warmup. 2,000 steps of 32 freshly drawn sequences, 64,000 sequences in all (300 steps
# in the fast mode): tens of seconds on two cores; the cell prints the time on yours.

# %%
model = Transformer(TransformerConfig.named("tiny", VOCAB, p_dropout=0.0))
optimizer = Adam(model.parameters(), lr=1e-3)
steps = 300 if FAST else 2000
start = time.perf_counter()
for step in range(1, steps + 1):
    optimizer.lr = 1e-3 * min(1.0, step / 100)
    optimizer.zero_grad()
    src, tgt_in, tgt_out = batch(rng, 32)
    loss = F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD)
    loss.backward()
    optimizer.step()
    if step % (steps // 5) == 0:
        print(f"step {step:>5}  loss {loss.item():.4f}")
print(f"{steps * 32:,} sequences in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## Does it reverse unseen sequences?

# %%
test = np.random.default_rng(123)
src, _, _ = batch(test, 100)
outputs = greedy_decode(model, src, BOS, EOS)
exact = np.mean([out == list(s[::-1]) for out, s in zip(outputs, src, strict=True)])
print(f"exactly reversed: {exact:.0%} of 100 unseen sequences")
print("example:", src[0], "->", outputs[0])

# %% [markdown]
# ## The attention it learned
#
# Switch on `record_weights` in the decoder's cross-attention (the layer that looks at the
# source), run one sentence through, and draw each head: rows are output positions, columns
# source positions. A model that reverses should show an anti-diagonal.

# %%
example = np.array([[3, 4, 5, 6, 7, 8, 9]])
decoder_in = np.concatenate([[[BOS]], example[:, ::-1]], axis=1)
cross = model.decoder.layers[-1].cross_attn
cross.record_weights = True
with mt.no_grad():
    model.eval()(example, decoder_in)
cross.record_weights = False
weights = cross.weights.numpy()[0]                       # (H, T, S)
figure = viz.attention_heads(
    weights, queries=["<s>", *map(str, example[0, ::-1])], keys=list(map(str, example[0])),
    title="Decoder cross-attention, last layer: output (rows) looks at source (columns)",
    path=FIGURES / "14_reversal_attention.png")
strongest = weights.mean(axis=0)[:-1].argmax(axis=1)     # per output position
print("source position each output attends to most (heads averaged):", strongest)
print("a perfect reversal reads from:                                ",
      np.arange(example.shape[1])[::-1])

# %% [markdown]
# The output at step $i$ predicts token $i$ of the reversal, so it should read source position
# $n - 1 - i$. (In the fast mode the model is barely trained and the pattern is blurred; run
# the full lesson to see it sharpen.) Different heads may split the work: some attend to the
# next token to emit, some to its neighbours.
#
# ## Exercises
#
# 1. Train on copying instead of reversal. What does the attention look like, and why is it
#    easier?
# 2. Remove the positional encoding (replace `model.src_positions` by a module whose
#    `forward(x, start)` returns `x`). Can the model still reverse? Can it copy?
# 3. Look at the encoder's self-attention (`model.encoder.layers[0].self_attn`) for the same
#    sentence. Does it matter for this task?
