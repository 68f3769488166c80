# %% [markdown]
# # Chapter 22 — Dropout and regularisation
#
# §5.4 of the paper, "Regularization":
#
# > **Residual Dropout** We apply dropout to the output of each sub-layer, before it is added
# > to the sub-layer input and normalized. In addition, we apply dropout to the sums of the
# > embeddings and the positional encodings in both the encoder and decoder stacks. For the
# > base model, we use a rate of $P_{drop} = 0.1$.
# >
# > **Label Smoothing** During training, we employed label smoothing of value
# > $\epsilon_{ls} = 0.1$. This hurts perplexity, as the model learns to be more unsure, but
# > improves accuracy and BLEU score.
#
# Chapter 12 built the label-smoothed loss; chapter 16 trained a translator with both
# regularisers switched on. This chapter builds dropout (the inverted kind, whose expected
# output is its input), derives and checks its backward, shows where the library applies it
# and how training and evaluation modes differ, and then measures both regularisers on short
# training runs of the built-in task: dropout against none, smoothing against none.

# %%
import inspect
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.data.batching import TokenBatcher, batches_in_order
from minitransformer.nn import Dropout, Residual, Transformer, TransformerConfig
from minitransformer.optim import Adam, noam_rate
from minitransformer.translation.corpus import load_corpus, prepare
from minitransformer.translation.decode import greedy_decode
from minitransformer.translation.scoring import corpus_bleu
from minitransformer.translation.translator import translate
from minitransformer.verify import check_function

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"  # the tests run every lesson quickly
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
mt.manual_seed(0)
rng = np.random.default_rng(0)
np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## Dropout, inverted
#
# Dropout (Srivastava et al., 2014) sets each entry of its input to zero with probability
# $p$, afresh at every training step, so that no unit can rely on any other being there. The
# original paper kept the survivors as they were and multiplied the weights by $1 - p$ at
# test time; the form every library uses now, *inverted* dropout, scales the survivors up by
# $1/(1-p)$ during training instead, and leaves evaluation alone:
#
# $$m_i \sim \mathrm{Bernoulli}(1 - p), \qquad y = \frac{x \circ m}{1 - p}, \qquad
#   \mathbb{E}[y_i] = \frac{x_i \, \mathbb{E}[m_i]}{1 - p} = x_i .$$
#
# By hand, on one vector, with $p = 0.5$ so that the zeros are easy to see:

# %%
p = 0.5
x = rng.standard_normal(8)
keep = rng.random(8) >= p                       # each entry kept with probability 1 - p
print("x:        ", x)
print("mask:     ", keep.astype(int))
print("x·m/(1-p):", x * keep / (1 - p))

# %% [markdown]
# ## The expectation, measured
#
# Apply the library's `F.dropout` to the same vector many times and average: with the
# $1/(1-p)$ the average tends to $x$ itself, without it to $(1-p)\,x$, which is why the
# original form had to rescale at test time. The fraction of zeros is $p$.

# %%
draws = 2_000 if FAST else 20_000
x = rng.standard_normal(8)
for p in (0.1, 0.5):
    y = F.dropout(mt.tensor(np.tile(x, (draws, 1))), p).numpy()      # (draws, 8)
    unscaled = y * (1 - p)                                            # x ∘ m alone
    error = np.abs(x).max() * np.sqrt(p / ((1 - p) * draws))      # at the largest |x|
    print(f"p = {p}: fraction zeroed {np.mean(y == 0):.4f};  largest |mean(y) - x| "
          f"{np.abs(y.mean(axis=0) - x).max():.3f} (one standard error at the largest |x|: "
          f"{error:.3f});  largest |mean(x·m) - (1-p)x| "
          f"{np.abs(unscaled.mean(axis=0) - (1 - p) * x).max():.3f};  |x| up to "
          f"{np.abs(x).max():.2f}")

# %% [markdown]
# The scaled average misses $x$ by about $|x|\sqrt{p/((1-p)\,n)}$ for $n$ draws, the standard
# error of a mean of $n$ draws of $x_i m_i/(1-p)$ (printed for the largest $|x|$; the largest
# miss of 8 entries can reach about twice it), and the unscaled one misses $(1-p)\,x$ by
# $1-p$ times that, $|x|\sqrt{p(1-p)/n}$ (at $p = 0.5$, half): that is all the difference left.
# (On the CPU the library draws its mask as 16-bit integers, so $p$ is rounded to a multiple of
# $1/65536$ and the scale is computed from the rounded $p$: the expectation stays exact.)
#
# ## The backward: the same mask
#
# $y_i = x_i m_i / (1-p)$ is linear in $x$ once the mask is drawn, so
#
# $$\frac{\partial L}{\partial x_i} = \frac{\partial L}{\partial y_i} \cdot \frac{m_i}{1-p}:$$
#
# the backward reuses the forward's mask, which is what the Function keeps for it. A dropped
# entry passes no gradient; a kept one passes it scaled by $1/(1-p)$.

# %%
p = 0.5
x = mt.tensor(rng.standard_normal((2, 6)), requires_grad=True)
y = F.dropout(x, p)
dout = rng.standard_normal((2, 6))
y.backward(dout)
mask = y.numpy() != 0
print("mask (1 = kept):\n", mask.astype(int))
print("x.grad:\n", x.grad)
print("x.grad == dout · mask / (1 - p):", np.allclose(x.grad, dout * mask / (1 - p)))

# %% [markdown]
# ### A gradient check needs a fixed mask
#
# Chapter 2's check compares the backward with finite differences
# $(L(x + h) - L(x - h)) / 2h$, which take two more forward passes per entry. If each pass
# draws its own mask, $L(x+h)$ and $L(x-h)$ differ by far more than $h$, and the check fails
# although the backward is right. Reseed the generator inside the function, so that every
# pass draws the same mask, and it passes:

# %%
def dropout_new_mask(t):
    return F.dropout(t, 0.3)


def dropout_fixed_mask(t):
    mt.manual_seed(1)                          # every call draws the same mask
    return F.dropout(t, 0.3)


x = rng.standard_normal((3, 5))
print(check_function(dropout_new_mask, x, name="dropout, a new mask per call"))
print(check_function(dropout_fixed_mask, x, name="dropout, a fixed mask"))

# %% [markdown]
# ## Where the library applies it
#
# Exactly where §5.4 says. Every sub-layer sits inside a `Residual` (chapter 9), which drops
# the sub-layer's output before adding it to the input and normalising (post-LN, the paper's
# order; pre-LN keeps the same dropout):

# %%
print(inspect.getsource(Residual.forward))

# %% [markdown]
# In training, the post-LN branch hands its three steps to one Function,
# `F.dropout_add_layer_norm`, which runs them together on blocks of rows while they sit in the
# processor's cache memory, for fewer passes over main memory (`docs/performance.md`). In NumPy
# it computes the same numbers, bit for bit, as dropout, the sum and the layer norm one after
# the other, from the same seed:

# %%
compiled_before = mt.get_compiled_kernels()
mt.set_compiled_kernels(False)  # NumPy's code, the reference path
x, h = (mt.tensor(rng.standard_normal((2, 3, 8)).astype("float32")) for _ in range(2))
gain, bias = mt.ones(8), mt.zeros(8)
mt.manual_seed(7)
fused = F.dropout_add_layer_norm(x, h, gain, bias, p=0.1)
mt.manual_seed(7)
three_steps = F.layer_norm(x + F.dropout(h, 0.1), gain, bias)
print("the same numbers:", np.array_equal(fused.data, three_steps.data))

# %% [markdown]
# With the `fast` extra installed (`pip install "minitransformer[fast]"`, which brings Numba),
# the CPU runs this Function as one compiled loop per row instead (`functional/_compiled.py`):
# the same formulas and the same dropout mask, with the row's sums taken in another order, so
# equal up to float32 rounding (an ulp of the largest entries: the spacing of neighbouring
# float32 numbers, $2^{-23} \approx 1.2 \times 10^{-7}$ between 1 and 2) rather than bit for bit:

# %%
try:
    mt.set_compiled_kernels(True)
except ImportError as missing:
    print(missing)
else:
    mt.manual_seed(7)
    compiled = F.dropout_add_layer_norm(x, h, gain, bias, p=0.1)
    print("largest difference:", float(np.abs(compiled.data - fused.data).max()),
          "| largest entry:", float(np.abs(fused.data).max()))
mt.set_compiled_kernels(compiled_before)

# %% [markdown]
# and the sums of the embeddings and the positional encodings go through one more `Dropout`
# before the first layer of each stack (`nn/transformer.py`):

# %%
print(inspect.getsource(Transformer._embed))

# %% [markdown]
# Counted in the tiny model: two residuals in each encoder layer, three in each decoder layer,
# and one embedding dropout, shared by the two stacks (the same module, called for the source
# and for the target). Attention weights are not dropped: the paper does not mention it,
# though The Annotated Transformer does, and tensor2tensor has it as an option.

# %%
model = Transformer(TransformerConfig.named("tiny", 50))
dropouts = [name for name, module in model.named_modules() if isinstance(module, Dropout)]
print(f"{len(dropouts)} Dropout modules, p = {model.embed_dropout.p}:")
for name in dropouts:
    print("  ", name)

# %% [markdown]
# ## Training mode and evaluation mode
#
# Dropout belongs to training. A translation, a validation loss or a BLEU score is computed
# with every entry kept. For each dropout layer on its own that is, thanks to the inverted
# scaling, the expected value of its training output; for the whole network it only
# approximates the average over the masks, since the ReLUs, softmaxes and LayerNorms between
# the dropout layers are not linear. Each module has a `training` attribute; `model.train()`
# and `model.eval()` set it on every module of the model. In training mode two passes over the
# same batch give different outputs; in evaluation mode they are identical, and equal to those
# of the same weights with $P_{drop} = 0$:

# %%
src, tgt = rng.integers(4, 50, (2, 7)), rng.integers(4, 50, (2, 6))
model.train()
first, second = model(src, tgt).numpy(), model(src, tgt).numpy()
print(f"training mode:   two passes differ by up to {np.abs(first - second).max():.3f}")
model.eval()
first, second = model(src, tgt).numpy(), model(src, tgt).numpy()
print("evaluation mode: two passes identical:", np.array_equal(first, second))
no_dropout = Transformer(TransformerConfig.named("tiny", 50, p_dropout=0.0)).eval()
no_dropout.load_state_dict(model.state_dict())
print("                 equal to the same weights with P_drop = 0:",
      np.array_equal(first, no_dropout(src, tgt).numpy()))

# %% [markdown]
# The decoding functions (`greedy_decode`, `beam_search`, and `translate` through them) put
# the model in evaluation mode while they run and restore its mode afterwards; a loop of your
# own must call `model.eval()` itself:

# %%
model.train()
greedy_decode(model, src, bos_id=1, eos_id=2, max_len=5)
print("after greedy_decode, still in training mode:", model.training)

# %% [markdown]
#
# ## The effect of dropout, measured
#
# Regularisation matters when a model can learn its training data by heart. To see that in a
# short run, train the tiny model (2 + 2 layers, $d_{model} = 32$) on the first 1,000 pairs
# of the built-in task for 500 steps of about 1,000 tokens, some 25 passes over them, once
# with $P_{drop} = 0.1$ and once with $P_{drop} = 0$. Everything else is the same: the
# initial weights, the batches, label smoothing 0.1, Adam with the paper's schedule and a
# 100-step warmup. Every 100 steps both runs are measured, in evaluation mode, by the
# negative log-likelihood per token (the unsmoothed loss, whose exponential is the
# perplexity) on 500 of their training pairs and on the 500 validation pairs. (The fast mode
# trains for 100 steps and measures every 50.)

# %%
corpus = load_corpus("builtin")
tokenizer, data, _ = prepare(corpus, vocab_size=1000, max_len=100)


def evaluate(model, pairs):
    """(negative log-likelihood per token, accuracy of the most probable token) on pairs;
    the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    nll = correct = tokens = 0
    with mt.no_grad():
        for batch in batches_in_order(pairs, 4000):
            logits = model(batch.src, batch.tgt_in)                      # (B, T, V)
            nll += F.cross_entropy(logits, batch.tgt_out, ignore_index=0).item() \
                * batch.n_tgt_tokens
            real = batch.tgt_out != 0
            correct += int((logits.numpy().argmax(-1) == batch.tgt_out)[real].sum())
            tokens += batch.n_tgt_tokens
    model.train(was_training)
    return nll / tokens, correct / tokens


# %%
def train(pairs, p_dropout, label_smoothing, steps, max_tokens, warmup, every=None):
    """The tiny model trained on pairs; with ``every``, its training and validation NLL
    every that many steps."""
    mt.manual_seed(0)                                   # the same initial weights every run
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size,
                                                p_dropout=p_dropout)).train()
    optimizer = Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    batcher = TokenBatcher(pairs, max_tokens, shuffle=True, seed=0)   # the same batches
    history, step, epoch = [], 0, 0
    while step < steps:
        batcher.set_epoch(epoch)
        for batch in batcher:
            if step == steps:
                break
            optimizer.zero_grad()
            F.cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, label_smoothing,
                            ignore_index=0).backward()
            step += 1
            optimizer.lr = noam_rate(step, model.config.d_model, warmup)
            optimizer.step()
            if every and step % every == 0:
                history.append((step, evaluate(model, pairs[:500])[0],
                                evaluate(model, data.valid)[0]))
        epoch += 1
    return model.eval(), history


# %%
subset = data.train[:1000]
steps, every = (100, 50) if FAST else (500, 100)
curves = {}
for p_drop in (0.0, 0.1):
    _, curves[p_drop] = train(subset, p_drop, 0.1, steps, max_tokens=1000, warmup=100,
                              every=every)
    print(f"P_drop = {p_drop}:  " + "  ".join(
        f"step {s}: train {a:.2f} valid {b:.2f}" for s, a, b in curves[p_drop]))

# %%
figure, axis = plt.subplots(figsize=(7, 4))
for p_drop, colour in ((0.0, "tab:red"), (0.1, "tab:blue")):
    step_axis = [s for s, _, _ in curves[p_drop]]
    axis.plot(step_axis, [a for _, a, _ in curves[p_drop]], "o--", color=colour,
              label=f"P_drop = {p_drop}, training pairs")
    axis.plot(step_axis, [b for _, _, b in curves[p_drop]], "o-", color=colour,
              label=f"P_drop = {p_drop}, validation pairs")
axis.set_xlabel("step")
axis.set_ylabel("negative log-likelihood per token")
axis.set_title("The tiny model on 1,000 pairs of the built-in task")
axis.legend()
figure.tight_layout()
figure.savefig(FIGURES / "22_dropout.png", dpi=120)
plt.show()

# %% [markdown]
# In the full mode's 500 steps the validation curves cross between steps 200 and 300. Without
# dropout the loss on the training pairs keeps falling, to about 1.4 nats a token (nats: the
# unit of a loss in natural logarithms), while the validation loss turns around near step 300
# (about 3.0) and climbs again (3.15 at step 500): the model has begun to learn its 1,000 pairs
# by heart. With $P_{drop} = 0.1$ the training loss falls more slowly (to about 2.1) and the
# validation loss keeps falling, to about 2.7, below the other run's best. That is the direction
# of the paper's Table 3, row (D), on WMT English–German with the base model: $P_{drop} = 0$
# gives a development perplexity of 5.77 and 24.6 BLEU, against 4.92 and 25.8 at 0.1 (the
# table's row "base", whose values row (D) varies). The fast mode stops at step 100, before the
# validation curves cross: there dropout only makes both losses a little higher, and says
# nothing yet about overfitting.
#
# ## The effect of label smoothing, measured
#
# The paper's claim has two halves, "hurts perplexity" and "improves accuracy and BLEU
# score". To measure them the model must be good enough for BLEU to mean something, and
# not overfitting, since smoothing (a pull towards the uniform distribution) also
# regularises, which could help perplexity on held-out data for another reason. So: all
# 20,000 training pairs, 400 steps of about 3,000 tokens (about three passes),
# $P_{drop} = 0.1$, a 200-step warmup, once with $\epsilon_{ls} = 0.1$ and once with
# $\epsilon_{ls} = 0$. Each is then measured on the validation pairs by perplexity, by the
# accuracy of its most probable next token (teacher-forced) and by the BLEU of its greedy
# translations of the first 200 validation sentences (chapter 18).

# %%
steps, max_tokens, n_bleu = (30, 1000, 10) if FAST else (400, 3000, 200)
sources = [s for s, _ in corpus.valid[:n_bleu]]
references = [t for _, t in corpus.valid[:n_bleu]]
for eps in (0.0, 0.1):
    model, _ = train(data.train, 0.1, eps, steps, max_tokens, warmup=200)
    nll, accuracy = evaluate(model, data.valid)
    bleu = corpus_bleu(translate(model, tokenizer, sources), references).score
    print(f"ε_ls = {eps}: validation perplexity {np.exp(nll):.3f}, token accuracy "
          f"{accuracy:.1%}, BLEU {bleu:.1f}")

# %% [markdown]
# In the full mode the first half shows plainly. The smoothed model's perplexity is worse, by
# about an eighth (4.04 against 3.59): it puts less probability on the right token, as the paper
# says, because it was taught to keep some for the others. The second half does not show in this
# run: the smoothed model's most probable token is right no more often (within about half a
# percentage point), and its translations score no higher (lower by between a tenth of a BLEU
# point and two and a half in the runs made so far, on two kinds of machine). The paper's own
# gain is small, Table 3, row (D): $\epsilon_{ls} = 0$ gives a development perplexity of 4.67
# and 25.3 BLEU, against the row "base"'s 4.92 and 25.8 with 0.1, half a BLEU point. One seed
# each, scored on 200 sentences, is too small a measurement to settle a gain of that size either
# way: read this run as confirming the first half and as leaving the second open. (The numbers
# also move with the machine and the number of threads, which change the order of floating-point
# sums: chapter 23 follows such a difference through training.) The fast mode trains for 30
# steps, far too few for BLEU to leave zero: its numbers show only that the code runs.
#
# ## Exercises
#
# 1. Srivastava et al.'s original dropout keeps $x \circ m$ in training and multiplies by
#    $1 - p$ in evaluation. Write it as a Function with its backward, gradient-check it with a
#    fixed mask, and show that it computes the same function as inverted dropout up to a
#    constant factor in training. Why do libraries prefer the inverted form?
# 2. Rerun the dropout comparison with $P_{drop} = 0.3$, the paper's rate for its big model.
#    Does the validation loss improve further, or does the model now underfit?
# 3. Forget `model.eval()`: compute the validation loss of a trained model in training mode
#    and compare. Why is it higher?
# 4. The Annotated Transformer also drops the attention weights. Add dropout after the softmax
#    in a copy of chapter 5's attention and gradient-check it with a fixed mask. After
#    dropout the rows of the attention weights no longer sum to 1 (only in expectation). Does
#    that matter?
# 5. Repeat the label-smoothing comparison on the 1,000-pair subset of the dropout runs, where
#    the model overfits. Does smoothing still hurt the validation perplexity? Why might it
#    not?
