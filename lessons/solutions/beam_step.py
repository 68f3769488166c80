"""Solution: one step of beam search, for one sentence.

§6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6". Beam search keeps
the K most probable prefixes (the beam) and, at every step, extends each by every token of the
vocabulary. Of those K·V candidates:

1. a candidate's score is the log-probability of the whole hypothesis, the prefix's and the
   new token's added:  score(k, v) = alive_scores[k] + log_probs[k, v];
2. the 2K best of all K·V are enough: at most K of them end in EOS (one per beam), so at least
   K do not, and those fill the next beam;
3. the candidates among the K best that end in EOS are finished hypotheses. They are ranked by
   log P divided by GNMT's length penalty (Wu et al., 2016), lp(Y) = ((5 + |Y|) / 6)^α, where
   |Y| = t counts the EOS; without it, search prefers short outputs, since every token adds a
   negative log-probability. An EOS candidate ranked below the K best is dropped: it would not
   have been in the beam (fairseq does the same);
4. the K best candidates that do not end in EOS are the new beam, with their plain log P: the
   penalty only ranks finished hypotheses of different lengths; alive ones all have length t.

The library's ``beam_search`` does this for all sentences at once (translation/decode.py);
the grader builds a whole search from this step and compares it with ``beam_search``.

Check it:  minitransformer check-exercise beam_step lessons/solutions/beam_step.py
"""

import numpy as np


def length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α."""
    return ((5 + length) / 6) ** alpha


def beam_step(alive_scores, log_probs, eos_id, t, alpha):
    """One step for one sentence: the new beam and the hypotheses that finish at this step."""
    K, V = log_probs.shape
    # 1. every candidate's score: log P(prefix) + log P(token | prefix)
    scores = (alive_scores[:, None] + log_probs).reshape(-1)             # (K·V,)
    # 2. the 2K best, best first; flat index i = beam·V + token
    best = np.argsort(-scores, kind="stable")[:min(2 * K, K * V)]        # (2K,)
    beams, tokens, cand = best // V, best % V, scores[best]              # (2K,) each
    is_eos = tokens == eos_id
    # 3. among the K best, those ending in EOS finish, ranked by log P / lp(t)
    lp = length_penalty(t, alpha)
    finished = [(int(beams[i]), float(cand[i] / lp)) for i in range(K)
                if is_eos[i] and np.isfinite(cand[i])]
    # 4. the K best of the others are the new beam
    keep = np.flatnonzero(~is_eos)[:K]                                   # (K,)
    return (beams[keep], tokens[keep], cand[keep]), finished
