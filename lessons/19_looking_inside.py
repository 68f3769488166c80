# %% [markdown]
# # Chapter 19 — Looking inside: attention heatmaps of a translation
#
# The paper's appendix draws attention weights of a trained model and finds heads that follow
# long-distance dependencies and heads that resolve pronouns. This chapter does the same for
# the translator of chapter 16: it translates one sentence, then draws the three kinds of
# attention for it:
#
# * **encoder self-attention**: source words looking at source words;
# * **decoder self-attention**: each output word looking at the words already written (the
#   causal mask of chapter 6 makes the upper triangle empty);
# * **cross-attention**: each output word looking at the source, the alignment between the
#   two languages.

# %%
import os
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer import viz
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import load_checkpoint, restore_model
from minitransformer.translation.corpus import load_corpus, prepare
from minitransformer.translation.training import TrainConfig, Trainer
from minitransformer.translation.translator import translate

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
mt.manual_seed(0)

# %% [markdown]
# ## A trained translator
#
# Chapter 16's run is reused if it is there; otherwise a short one is trained now.

# %%
checkpoint_path = Path("runs") / "lesson16" / "checkpoints" / "last.npz"
if checkpoint_path.exists():
    checkpoint = load_checkpoint(checkpoint_path)
    model, tokenizer = restore_model(checkpoint), Tokenizer.from_bytes(checkpoint.tokenizer_bytes)
else:
    tokenizer, data, _ = prepare(load_corpus("builtin"), vocab_size=1000, max_len=100)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
    config = TrainConfig(max_steps=10 if FAST else 400, warmup_steps=400, eval_every=400,
                         bleu_sentences=0, progress=False)
    Trainer(model, tokenizer, data, config, Path("runs") / "lesson19").fit()
model.eval()
print(f"the translator: {sum(p.data.size for p in model.parameters()):,} parameters, "
      f"a vocabulary of {tokenizer.vocab_size:,} pieces")

# %% [markdown]
# ## One sentence, every attention recorded
#
# Translate, then run the model once more with the translation as decoder input (teacher
# forcing), with `record_weights` switched on in every attention layer.

# %%
sentence = "The old farmer saw that the young girls were singing in the garden."
translation = translate(model, tokenizer, [sentence])[0]
print("source:     ", sentence)
print("translation:", translation)

src_ids = tokenizer.encode(sentence)
out_ids = tokenizer.encode(translation)[: 10 if FAST else 30]  # a readable picture
attentions = [layer.self_attn for layer in model.encoder.layers]
attentions += [m for layer in model.decoder.layers for m in (layer.self_attn, layer.cross_attn)]
for attention in attentions:
    attention.record_weights = True
with mt.no_grad():
    model(np.array([src_ids]), np.array([[tokenizer.bos_id, *out_ids]]))
for attention in attentions:
    attention.record_weights = False

source_tokens = [tokenizer.id_to_piece(i) for i in src_ids]
output_tokens = ["<s>"] + [tokenizer.id_to_piece(i) for i in out_ids]

# %% [markdown]
# ## The pictures

# %%
last_encoder = model.encoder.layers[-1].self_attn.weights.numpy()[0]
viz.attention_heads(last_encoder, source_tokens, source_tokens,
                    title="Encoder self-attention, last layer",
                    path=FIGURES / "19_encoder_self.png")
last_decoder = model.decoder.layers[-1]
viz.attention_heads(last_decoder.self_attn.weights.numpy()[0], output_tokens, output_tokens,
                    title="Decoder self-attention, last layer (causal)",
                    path=FIGURES / "19_decoder_self.png")
cross = last_decoder.cross_attn.weights.numpy()[0]
figure = viz.attention_heads(cross, output_tokens, source_tokens,
                             title="Cross-attention, last layer: output (rows) reads source "
                                   "(columns)",
                             path=FIGURES / "19_cross.png")

# %% [markdown]
# ## Reading the alignment
#
# Averaging the cross-attention heads and taking, for each output piece, the source piece it
# attends to most gives a rough word alignment. A piece is produced by the step *before* it:
# row k of the picture is the decoder reading piece k (row 0 reads `<s>`) to predict piece
# k + 1, so piece k + 1 is paired with row k. Some pairs are a word and its translation
# (in the output above `bor` and `farmer`, `ke` and `that`, `jun` and `young`, `kukin` and
# `garden`); in the subordinate clause, after `ke`, where
# Velish orders the words differently (its verb goes to the end), the alignment jumps back and
# forth across the source.

# %%
alignment = cross.mean(axis=0).argmax(axis=1)   # (output length + 1,) one source position a row
for output, position in zip(output_tokens[1:], alignment[:-1], strict=True):
    print(f"{output:>12} <- {source_tokens[position]}")

# %% [markdown]
# (After the fast mode's few steps of training the pictures are noise; run the full lesson, or
# `minitransformer train` first, for a model worth looking at.)
#
# ## Exercises
#
# 1. Is there a head in the encoder that attends mostly to the previous token, or one that
#    attends to the next? Count, over many sentences, how often each head's strongest weight
#    falls on a neighbour.
# 2. Take validation sentences with a subordinate clause (", ke ..."), feed the decoder the
#    reference translation as the chapter does with the model's, and read the last layer's
#    cross-attention at the row that predicts the clause-final Velish verb. Which source word
#    does it read most? Why read the reference rather than the model's translation?
# 3. Compute the entropy of each head's weights, averaged over positions. Which heads are
#    sharp, which diffuse?
