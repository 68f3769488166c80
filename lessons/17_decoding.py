# %% [markdown]
# # Chapter 17 — Greedy search, beam search, and the key/value cache
#
# A trained model gives, at each step, a distribution over the next token. Turning that into
# a sentence is a search problem. §6.1: "We used beam search with a beam size of 4 and length
# penalty $\alpha = 0.6$ [...] We set the maximum output length during inference to input
# length + 50, but terminate early when possible."
#
# This chapter compares greedy decoding with beam search, shows what the length penalty does,
# and measures what the key/value cache buys.

# %%
import os
import time

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import beam_search, gnmt_length_penalty, greedy_decode

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"
mt.manual_seed(0)
rng = np.random.default_rng(0)
BOS, EOS = 2, 3

# %% [markdown]
# A model trained for a few seconds on chapter 14's reversal task gives distributions that are
# good but not certain, which is where search matters.

# %%
VOCAB = 13
model = Transformer(TransformerConfig.named("tiny", VOCAB, p_dropout=0.0))
optimizer = Adam(model.parameters(), lr=1e-3)
for _ in range(200 if FAST else 600):
    length = int(rng.integers(4, 9))
    source = rng.integers(4, VOCAB, size=(32, length))
    target = source[:, ::-1]
    optimizer.zero_grad()
    F.cross_entropy(model(source, np.concatenate([np.full((32, 1), BOS), target], 1)),
                    np.concatenate([target, np.full((32, 1), EOS)], 1)).backward()
    optimizer.step()
model.eval()
src = rng.integers(4, VOCAB, size=(8, 7))
limit = 12


def log_prob(source, output, limit=limit):
    """log P(output | source) under the model by the full (uncached) decoder, with the end
    token when the output finished before the length limit."""
    target = [BOS, *output, EOS] if len(output) < limit else [BOS, *output]
    with mt.no_grad():
        logits = model(source[None], np.array([target[:-1]]))
        logp = F.log_softmax(logits).numpy()[0]
    return float(sum(logp[t, token] for t, token in enumerate(target[1:])))


# %% [markdown]
# ## Greedy decoding
#
# Take the most probable token at every step. It is fast and often good, but a locally best
# choice can lead into a poor sentence.
#
# ## Beam search
#
# Keep the $k$ best partial sentences at each step; extend each by every token; keep the $k$
# best of the $k \cdot V$ candidates (the library takes the $2k$ best, so that $k$ remain
# when some of them end the sentence: those become finished hypotheses). Finished
# hypotheses are compared by
# $\log P(Y) / lp(Y)$ with the length penalty of Wu et al. (2016),
# $lp(Y) = ((5 + |Y|)/6)^\alpha$, where $|Y|$ counts the end token: without it, shorter
# sentences are favoured, since every token multiplies in a probability below 1.

# %%
greedy = greedy_decode(model, src, BOS, EOS, max_len=limit)
beam = beam_search(model, src, BOS, EOS, beam_size=4, length_penalty=0.0, max_len=limit)
for i in range(len(src)):
    print(f"sentence {i}: greedy log P = {log_prob(src[i], greedy[i]):7.3f} "
          f"({len(greedy[i])} tokens)   beam-4 log P = {log_prob(src[i], beam[i]):7.3f} "
          f"({len(beam[i])} tokens)")

# %% [markdown]
# Where the two differ, beam search has found the more probable sentence: it keeps
# alternatives that start less probable and end more probable. (Beam search is not exact
# either; a beam of 4 can miss the best sentence too.)
#
# ## The length penalty
#
# $\alpha = 0$ ranks by raw $\log P$ and favours short outputs; a larger $\alpha$ divides long
# hypotheses' (more negative) scores by more, and so can lengthen the outputs. It can only
# matter when the model is unsure where to stop. Trained for the full mode's 600 steps, the
# model is sure on the sources of length 7 above: it has seen every length from 4 to 8, beam
# search ends each of them after exactly 7 tokens (greedy decoding, above, may stop one a
# token early, a less probable sentence), and all four values of $\alpha$ give the same output
# lengths. The fast mode's model, trained for 200 steps, is unsure everywhere, and there
# $\alpha$ already lengthens some outputs of length-7 sources (run the chapter with
# `MINITRANSFORMER_FAST=1` to see). Sources of length 11, longer than anything it was trained
# on, are another matter even for the trained model: there it stops too early, and the
# penalty pushes back, the mean length growing at $\alpha = 1.5$ and 3, at 3 one output
# reaching the source's length.

# %%
long_src = rng.integers(4, VOCAB, size=(8, 11))         # longer than any training sequence
outputs = {}
for name, source in (("length 7 ", src), ("length 11", long_src)):
    for alpha in (0.0, 0.6, 1.5, 3.0):
        outputs[name, alpha] = beam_search(model, source, BOS, EOS, beam_size=4,
                                           length_penalty=alpha, max_len=source.shape[1] + 5)
        lengths = [len(o) for o in outputs[name, alpha]]
        print(f"{name}, α = {alpha}: output lengths {lengths}, mean {np.mean(lengths):.2f}")

# %% [markdown]
# Where the outputs for $\alpha = 0$ and $\alpha = 3$ differ, the two hypotheses swap places
# in the ranking: the shorter one has the higher $\log P$, the longer one the higher
# $\log P / lp$ once $\alpha$ is large enough. (A larger $\alpha$ can only ever switch to a
# longer hypothesis: a longer one that already had the higher $\log P$ would have won at
# $\alpha = 0$ too.) Neither is the source reversed, by the way: a model this small has not
# learned to reverse lengths it never saw.

# %%
pairs = [(i, a, b) for i, (a, b) in enumerate(zip(outputs["length 11", 0.0],
                                                   outputs["length 11", 3.0], strict=True))
         if a != b]
if pairs:
    i, at_0, at_3 = pairs[0]
    print(f"sentence {i}, source {long_src[i]}, its reversal {long_src[i][::-1]}")
    for hypothesis in (at_0, at_3):
        logp = log_prob(long_src[i], hypothesis, limit=long_src.shape[1] + 5)
        n = len(hypothesis) + (len(hypothesis) < long_src.shape[1] + 5)  # |Y| counts the end token
        scores = "  ".join(
            f"α = {alpha}: {logp / gnmt_length_penalty(n, alpha):6.3f}"
            for alpha in (0.0, 0.6, 1.5, 3.0))
        print(f"{len(hypothesis):>2} tokens {hypothesis}: log P / lp  {scores}")
else:
    print("α = 0 and α = 3 chose the same outputs for all eight sources")

# %% [markdown]
# ## What else the beam found: n-best lists
#
# A search of beam size $k$ ends with up to $k$ hypotheses for each sentence, finished ones
# and, if fewer than $k$ finished by the length limit, ones cut there; the one returned is
# only the best of them. `n_best` returns the list, best first: each hypothesis with its
# $\log P$, its score $\log P / lp(|Y|)$ (what the search ranked by), and the log-probability
# of each token, the end token included where there is one, given the tokens before it.
# The list below is for the first length-11 source at $\alpha = 0.6$.

# %%
[hypotheses] = beam_search(model, long_src[:1], BOS, EOS, beam_size=4, length_penalty=0.6,
                           max_len=long_src.shape[1] + 5, n_best=4)
for rank, h in enumerate(hypotheses):
    print(f"{rank}. {h.tokens}  log P {h.log_prob:7.3f}  score {h.score:7.3f}"
          f"{'' if h.finished else '  (cut at the limit)'}")
print("the first is beam_search's answer:", hypotheses[0].tokens == outputs["length 11", 0.6][0])
best = hypotheses[0]
print("its tokens' log-probabilities:", np.round(best.token_log_probs, 3))
print(f"their sum {sum(best.token_log_probs):.4f}; log P by the full decoder "
      f"{log_prob(long_src[0], best.tokens, limit=long_src.shape[1] + 5):.4f}")

# %% [markdown]
# The list is in the order of the search: the finished hypotheses by their scores, then any cut
# at the limit (marked so; in the full mode all four end before it). The per-token
# log-probabilities show where the model hesitated (the most negative ones), and they add up to
# the $\log P$ that the full, uncached decoder gives the same output: the cache and the
# bookkeeping of the search change nothing in them. From the command line,
# `minitransformer translate --n-best 4` prints such a list for text, with the scores, and
# `--json` everything above, with the pieces of the text (the formats are in `docs/cli.md`).

# %% [markdown]
# ## The key/value cache
#
# The decoder is auto-regressive: step $t$ needs the keys and values of positions $1..t$ in
# every self-attention layer. Recomputing the whole prefix at every step costs $O(t)$ positions
# of work per step, $O(n^2)$ for a sentence. The cache keeps each layer's keys and values and
# computes only the newest position: $O(1)$ positions per step, $O(n)$ in all. (The attention
# itself still reads all $t$ cached keys; that part is what stays quadratic.)

# %%
def greedy_without_cache(source, steps):
    with mt.no_grad():
        src_mask = model.source_mask(source)
        memory = model.encode(source, src_mask)
        tokens = np.full((len(source), 1), BOS)
        for _ in range(steps):
            logits = model.decode(tokens, memory, src_mask)              # the whole prefix
            tokens = np.concatenate([tokens, logits.numpy()[:, -1:].argmax(-1)], axis=1)
    return tokens[:, 1:]


def greedy_with_cache(source, steps):
    with mt.no_grad():
        src_mask = model.source_mask(source)
        memory = model.encode(source, src_mask)
        cache = model.new_cache()
        tokens, out = np.full((len(source), 1), BOS), []
        for _ in range(steps):
            logits = model.decode(tokens, memory, src_mask, cache)      # the newest position
            tokens = logits.numpy()[:, -1:].argmax(-1)
            out.append(tokens)
    return np.concatenate(out, axis=1)


batch = rng.integers(4, VOCAB, size=(16, 10))
print("same tokens with and without the cache:",
      np.array_equal(greedy_with_cache(batch, 20), greedy_without_cache(batch, 20)))
for steps in ((10, 25) if FAST else (10, 25, 50, 100)):
    timings = {"recompute": float("inf"), "cache": float("inf")}
    for _ in range(3):  # the best of three: fair under machine noise
        for name, run in (("recompute", greedy_without_cache), ("cache", greedy_with_cache)):
            start = time.perf_counter()
            run(batch, steps)
            timings[name] = min(timings[name], time.perf_counter() - start)
    print(f"{steps:>3} steps: recompute {timings['recompute']:.3f} s, cache "
          f"{timings['cache']:.3f} s, speed-up {timings['recompute'] / timings['cache']:.1f}x")

# %% [markdown]
# The speed-up grows with the output length, as the $O(n^2)$ against $O(n)$ argument says.
# (Each time is the best of three, but on a machine busy with other work a row can still
# come out of order: these are small computations, and waiting for a free core can
# outweigh them.)
#
# ## Exercises
#
# 1. Find a source for which greedy decoding's first token differs from beam search's best
#    hypothesis's first token. What does that say about greedy search?
# 2. Beam search with `beam_size=1` is greedy decoding: check it.
# 3. In `greedy_without_cache`, the encoder's memory is computed once. What would it cost to
#    recompute it every step too?
