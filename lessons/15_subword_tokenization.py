# %% [markdown]
# # Chapter 15 — Subword tokenization with SentencePiece
#
# §5.1: "Sentences were encoded using byte-pair encoding, which has a shared source-target
# vocabulary of about 37000 tokens." A model predicts one token at a time from a fixed
# vocabulary. Whole words make the vocabulary huge and still leave rare words unknown;
# characters make sequences long. Byte-pair encoding (BPE) sits between: start from characters
# and repeatedly merge the most frequent adjacent pair into a new token, until the vocabulary
# has the size you asked for. Frequent words end up as one token, rare ones as a few pieces.
#
# minitransformer uses SentencePiece (a well-kept library, not the point of this course) and
# trains one model jointly on both languages, so the two share a vocabulary and the three
# embedding matrices can be one (chapter 11).

# %%
import time
from collections import Counter

from minitransformer.data.tokenizer import Tokenizer

# %% [markdown]
# ## BPE by hand, a few merges
#
# On a tiny corpus, count adjacent symbol pairs and merge the most frequent one, three times.

# %%
corpus = ["low", "lower", "lowest", "newer", "wider", "new", "newest"] * 3
words = [list(w) + ["</w>"] for w in corpus]


def merge_pair(word, a, b):
    """Replace every adjacent (a, b) in ``word`` by the single symbol a + b."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b):
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


for merge in range(3):
    pairs = Counter(p for w in words for p in zip(w, w[1:], strict=False))
    (a, b), count = pairs.most_common(1)[0]
    words = [merge_pair(w, a, b) for w in words]
    print(f"merge {merge + 1}: {a!r} + {b!r} (seen {count} times) -> 'lower' is {words[1]}")

# %% [markdown]
# ## A real tokenizer
#
# Training SentencePiece on two hundred sentences of two languages takes a moment (the
# cell prints how long). Ids 0–3 are reserved: padding, unknown, begin and end of sentence.

# %%
english = ["The dog sees the cat.", "The old man saw a red ball.", "Two young men are walking.",
           "A woman is reading a newspaper in the park.", "The children are playing outside."]
german = ["Der Hund sieht die Katze.", "Der alte Mann sah einen roten Ball.",
          "Zwei junge Männer gehen spazieren.", "Eine Frau liest im Park eine Zeitung.",
          "Die Kinder spielen draußen."]
start = time.perf_counter()
tokenizer = Tokenizer.train((english + german) * 20, vocab_size=150)
print(f"trained on {len(english + german) * 20} sentences in "
      f"{time.perf_counter() - start:.2f} s")
print("vocabulary size:", tokenizer.vocab_size, " special ids:", tokenizer.pad_id,
      tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id)
for sentence in ("Der alte Hund liest.", "The newspaper dogs are reading outside."):
    ids = tokenizer.encode(sentence)
    pieces = [tokenizer.id_to_piece(i) for i in ids]
    print(f"{sentence!r}\n  -> {pieces}\n  -> {ids}\n  -> {tokenizer.decode(ids)!r}")

# %% [markdown]
# The `▁` marks the start of a word, so decoding is exact: concatenate, and turn `▁` back into
# spaces. A word the corpus never had ("dogs") still encodes, as smaller pieces; only a
# character never seen becomes the unknown id 1.

# %%
print("unseen character:", tokenizer.encode("日"), "->", repr(tokenizer.decode(
    tokenizer.encode("日"))))

# %% [markdown]
# ## Why the size matters
#
# A larger vocabulary gives shorter sequences (attention costs grow with the square of the
# length) but a bigger embedding matrix and rarer tokens, each seen less often in training.

# %%
text = english + german
for size in (60, 100, 150):
    t = Tokenizer.train(text * 20, vocab_size=size)
    tokens = sum(len(t.encode(s)) for s in text)
    words = sum(len(s.split()) for s in text)
    print(f"vocabulary {size:>3}: {tokens / words:.2f} tokens per word")

# %% [markdown]
# ## Exercises
#
# 1. Finish the hand-written BPE: keep merging the most frequent pair until no pair occurs
#    twice. How many merges does that take on the chapter's corpus, what is the final
#    vocabulary, and why does it stop there? Count the pairs over the distinct words instead:
#    where does it stop now? Compare with SentencePiece on the same words.
# 2. Train separate English and German tokenizers. Which tokens do they share? Why does
#    sharing help the tied embeddings?
# 3. Multi30k uses 8,000 pieces (bench/multi30k.py). Estimate the tokens per word for its
#    German and English sides with `minitransformer.data.read_parallel`.
