# %% [markdown]
# # Chapter 18 — Evaluation with sacreBLEU: signatures, and why tokenization changes the number
#
# The paper reports "28.4 BLEU" on English-German (§6.1 and Table 2, the big model on WMT
# 2014). A BLEU score is a number about n-gram
# overlap between system output and a reference, but *which* n-grams depends on how the text
# was split into words, whether case counts, and how zero counts are smoothed. Post (2018)
# showed that such choices move scores by more than a point, more than many published
# improvements. sacreBLEU fixes the choices and prints them as a **signature**, so a number
# can be reproduced. minitransformer always scores detokenized, cased output with sacreBLEU's
# defaults and reports the signature.

# %%
import sacrebleu

from minitransformer.data.tokenizer import Tokenizer
from minitransformer.translation.scoring import corpus_bleu, corpus_chrf, evaluate_translations

hypotheses = ["A man in a blue shirt is standing on a ladder.",
              "two dogs play in the snow.",
              "A girl, wearing a hat, is running on the beach."]
references = ["A man in a blue shirt is standing on a ladder cleaning windows.",
              "Two dogs are playing in the snow.",
              "A little girl in a hat runs on the beach."]

# %% [markdown]
# ## BLEU in one paragraph
#
# For n = 1..4, count the hypothesis n-grams that also occur in the reference (each reference
# n-gram can be matched only as often as it occurs): the *modified precision* $p_n$. BLEU is
# their geometric mean times a brevity penalty that stops a system from scoring by saying
# little: $BLEU = BP \cdot \exp(\frac14 \sum_n \log p_n)$, with
# $BP = \min(1, e^{1 - r/c})$ for reference length $r$ and hypothesis length $c$. Scores are
# computed over the whole test set (corpus-level), not averaged over sentences.

# %%
bleu = corpus_bleu(hypotheses, references)
print(bleu)
print("signature:", bleu.signature)
print(corpus_chrf(hypotheses, references))

# %% [markdown]
# The signature says: one reference per sentence, mixed case kept, the `13a` tokenizer (the
# one of the WMT `mteval-v13a.pl` script), exponential smoothing, sacreBLEU's version.
#
# ## The same output, different numbers
#
# Change one choice at a time:

# %%
def score(**options):
    return sacrebleu.metrics.BLEU(**options).corpus_score(hypotheses, [references]).score


print(f"13a, cased (the default)         {score():6.2f}")
print(f"13a, lowercased                  {score(lowercase=True):6.2f}")
print(f"no tokenization                  {score(tokenize='none'):6.2f}")
print(f"international tokenization       {score(tokenize='intl'):6.2f}")
print(f"character-level ('char')         {score(tokenize='char'):6.2f}")

# %% [markdown]
# With `tokenize='none'`, the hypothesis's "ladder." and "hat," are single words that no
# longer match the reference's "ladder" and "hat": the score drops. Lowercasing forgives the
# "two" that should be "Two" and raises it. None of these is wrong; each is a different
# number. Without the signature, two papers' BLEU scores cannot be compared.
#
# ## Tokenized output is a trap
#
# A model trained on subwords (chapter 15) must be scored on *detokenized* text, as a reader
# would see it, against the untouched reference. Scored as pieces, every subword counts as a
# word: the n-grams, and so the number, change (here it drops; on other text it rises), and
# it can be compared with nothing.

# %%
tokenizer = Tokenizer.train((hypotheses + references) * 10, vocab_size=70)


def as_pieces(sentences):
    return [" ".join(tokenizer.id_to_piece(i) for i in tokenizer.encode(s)) for s in sentences]


print("a hypothesis as pieces:", as_pieces(hypotheses)[2])
on_pieces = sacrebleu.metrics.BLEU(tokenize="none").corpus_score(
    as_pieces(hypotheses), [as_pieces(references)]).score
print(f"detokenized text: {score():.2f}   subword pieces: {on_pieces:.2f}")

# %% [markdown]
# ## What the library reports
#
# `minitransformer evaluate` and the trainer use `evaluate_translations`, which returns both
# scores with their signatures, ready for a JSON log:

# %%
result = evaluate_translations(hypotheses, references)
print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in result.items()})

# %% [markdown]
# ## Exercises
#
# 1. Compute $p_1 \dots p_4$ and the brevity penalty of the first sentence by hand and check
#    them with `sacrebleu.metrics.BLEU().corpus_score(...).precisions`.
# 2. Why is the average of sentence BLEU scores not the corpus BLEU?
# 3. chrF scores character n-grams. Which of the changes above move chrF much less, and why?
