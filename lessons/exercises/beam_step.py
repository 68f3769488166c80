"""Exercise: write one step of beam search, for one sentence.

§6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6". Beam search keeps
the K most probable prefixes (the beam, "alive" hypotheses) and at every step extends each by
every token of the vocabulary, then keeps the best. A hypothesis that ends in EOS is finished;
its score is its log-probability divided by GNMT's length penalty (Wu et al., 2016):

    lp(Y) = ((5 + |Y|) / 6)^α          score(Y) = log P(Y | X) / lp(Y)

with |Y| counting the EOS. Without it, search prefers short outputs, since every token adds a
negative log-probability.

Write ``beam_step(alive_scores, log_probs, eos_id, t, alpha)``:

    alive_scores (K,)    log P of each alive prefix; −inf for a beam that holds no prefix
                         (at the first step only beam 0 holds one: [BOS])
    log_probs (K, V)     log P(token | prefix of beam k): the model's log-softmax, one row a beam
    eos_id               the end-of-sentence token
    t                    the length of a hypothesis after this step, its EOS included (1 at the
                         first step)
    alpha                the length penalty's α

It returns ``((beams, tokens, scores), finished)``:

    beams, tokens, scores   three arrays of K entries, best first: the new beam. Entry j says
                            which alive beam it extends (0 to K−1), the token appended to it,
                            and its log P (no length penalty)
    finished                a list of (beam, score) pairs, best first, one per hypothesis that
                            finishes at this step: the beam its prefix comes from and its score
                            log P / lp(t)

The rules, as the library's ``beam_search`` (translation/decode.py) has them:

1. a candidate is a beam k and a token v; its score is the prefix's log P plus the token's;
2. rank all K·V candidates and take the 2K best;
3. those among the K best that end in EOS (with a finite score) are finished; an EOS
   candidate ranked below the K best is dropped;
4. the K best of the 2K that do not end in EOS are the new beam.

Hints:

* Flatten the (K, V) candidate scores to one row; ``np.argsort(-scores, kind="stable")`` ranks
  them. For a flat index i, which beam and which token is it?
* Why 2K and not K: how many of the 2K best can end in EOS at most? (One per beam.)
* The length penalty ranks hypotheses of different lengths. Alive ones all have length t: do
  they need it? The next step adds to their scores.

Check your answer:
    minitransformer check-exercise beam_step lessons/exercises/beam_step.py
It runs your step on scores where EOS lands among the K best, just below them, and at the top
of several beams, then runs a whole search built from your step on a tiny Transformer and
compares its translations and scores with the library's beam_search.
"""

import numpy as np  # noqa: F401 - for argsort


def length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α."""
    raise NotImplementedError("write the length penalty: ((5 + length) / 6) ** alpha")


def beam_step(alive_scores, log_probs, eos_id, t, alpha):
    """One step for one sentence: the new beam and the hypotheses that finish at this step."""
    # 1. every candidate's score                      (K·V,)
    # 2. the 2K best, best first: their beams, tokens and scores
    # 3. finished: among the K best, those ending in EOS, scored log P / lp(t)
    # 4. the new beam: the K best of the others
    raise NotImplementedError("write the step: return ((beams, tokens, scores), finished)")
