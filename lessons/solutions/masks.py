"""Solution: the padding mask and the causal mask.

§3.2.3: "We need to prevent leftward information flow in the decoder to preserve the
auto-regressive property. We implement this inside of scaled dot-product attention by masking
out (setting to −∞) all values in the input of the softmax which correspond to illegal
connections." A mask here is boolean and True where attention is allowed, broadcast over the
scores (B, H, T_q, T_k): query i (a row) may attend to key j (a column) where mask[..., i, j].

* The padding mask hides the padding keys of each sentence from every query and every head:
  (B, 1, 1, S), True at real tokens. A padding query attends as usual; its output is never read.
* The causal mask lets position i see positions j <= i, itself included: the lower triangle
  with its diagonal, (T, T). The decoder's self-attention uses both, combined with &:
  padding_mask(tgt, pad_id) & causal_mask(T) is (B, 1, T, T).

Check it:  minitransformer check-exercise masks lessons/solutions/masks.py
"""

import numpy as np


def padding_mask(ids, pad_id):
    """ids (B, S) integers -> (B, 1, 1, S) bool: True at the real tokens."""
    return (ids != pad_id)[:, None, None, :]                            # (B, 1, 1, S)


def causal_mask(T):
    """(T, T) bool: True at [i, j] where j <= i."""
    position = np.arange(T)                                             # (T,)
    return position[None, :] <= position[:, None]                       # (T, T)
