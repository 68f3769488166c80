# %% [markdown]
# # Chapter 16 — Training a translator
#
# Everything comes together: a parallel corpus, a joint subword vocabulary (chapter 15), the
# model (chapter 10), label smoothing (12), Adam with warmup (13), batches by tokens, and
# greedy decoding (17) to see what it learned. The corpus is the built-in task: English and
# Velish, an invented German-like language generated from a seed, so no download is needed.
# Its word order differs from English (the verb goes second, or last in a subordinate clause)
# and its articles, adjectives and verbs agree in gender, number and person, so the model must
# attend to translate. This is what `minitransformer train` does, step by step.

# %%
import os
import shutil
from pathlib import Path

import minitransformer as mt
from minitransformer import viz
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.corpus import load_corpus, prepare
from minitransformer.translation.training import TrainConfig, Trainer
from minitransformer.translation.translator import translate

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
FIGURES = Path("figures")
mt.manual_seed(0)

# %% [markdown]
# ## The corpus

# %%
corpus = load_corpus("builtin")
print(f"{len(corpus.train):,} training pairs, {len(corpus.valid)} validation, "
      f"{len(corpus.test)} test")
for source, target in corpus.train[:3]:
    print(f"  {source}\n  {target}\n")

# %% [markdown]
# ## Tokenizer and data
#
# One BPE model of 1,000 pieces for both languages; every pair becomes two lists of ids.

# %%
tokenizer, data, dropped = prepare(corpus, vocab_size=1000, max_len=100)
source, target = corpus.train[0]
print("pieces:", [tokenizer.id_to_piece(i) for i in tokenizer.encode(target)][:12], "...")
print(f"{len(data.train):,} training pairs as ids ({dropped} dropped: too long or with an "
      "empty side)")

# %% [markdown]
# ## Training
#
# The tiny model (2 + 2 layers, $d_{model} = 32$) with its dropout of 0.1, label smoothing
# 0.1 (chapter 22 measures both against none), the paper's schedule with a 400-step warmup,
# batches of at most 4,000 padded tokens, 500 steps. The trainer validates halfway and at the
# end (loss, and greedy BLEU on 200 validation sentences) and writes its log and checkpoints
# to `runs/lesson16`, emptied first (the trainer appends to an existing log and would average
# in an earlier run's checkpoints). About a minute or a little more on two CPU cores in full
# (45 s on a 2-core Intel Xeon, 61 to 86 s on 2-core AMD EPYC machines); a few seconds in the
# fast mode, which is far too short to learn anything.

# %%
model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
config = TrainConfig(max_steps=10 if FAST else 500, warmup_steps=400,
                     eval_every=10 if FAST else 250, bleu_sentences=8 if FAST else 200,
                     progress=False)
shutil.rmtree(Path("runs") / "lesson16", ignore_errors=True)   # a fresh run every time
trainer = Trainer(model, tokenizer, data, config, Path("runs") / "lesson16")
summary = trainer.fit()
print(f"validation loss {summary['valid_loss']:.3f}, perplexity {summary['valid_ppl']:.1f}, "
      f"BLEU {summary['valid_bleu']:.1f}")

# %% [markdown]
# ## What it learned

# %%
examples = corpus.test[:2 if FAST else 4]
outputs = translate(model, tokenizer, [s for s, _ in examples])
for (source, reference), output in zip(examples, outputs, strict=True):
    print(f"source:     {source}\nreference:  {reference}\ntranslated: {output}\n")

# %%
figure = viz.training_curves(Path("runs") / "lesson16" / "log.jsonl",
                             FIGURES / "16_training.png")

# %% [markdown]
# The same from the command line, with the defaults for the built-in task, a test-set
# evaluation with beam search at the end, and a progress bar:
#
# ```bash
# minitransformer train                      # writes runs/builtin-tiny/
# minitransformer translate --checkpoint runs/builtin-tiny/checkpoints/final.npz \
#     "The old man saw a red ball."
# ```
#
# With Multi30k downloaded (`minitransformer data multi30k --dest data/multi30k`),
# `minitransformer train --data data/multi30k --time-budget 45` trains the `small` model for
# 45 minutes on real German–English captions; `bench/multi30k.py` records such a run.
#
# ## Exercises
#
# 1. Train with `label_smoothing=0.0` (in `TrainConfig`). Compare validation perplexity and
#    BLEU with the smoothed run: which improves, which gets worse?
# 2. Double `max_tokens` and halve `max_steps`, leaving the rest of the configuration as it
#    is. Same number of tokens seen: same result? Which other setting counts steps, and what
#    does halving the run do to it?
# 3. Interrupt a run of `minitransformer train` with Ctrl-C and continue it with `--resume`.
#    Compare its `log.jsonl` with an uninterrupted run.
