"""Exercise: write the padding mask and the causal mask.

§3.2.3: "We need to prevent leftward information flow in the decoder to preserve the
auto-regressive property. We implement this inside of scaled dot-product attention by masking
out (setting to −∞) all values in the input of the softmax which correspond to illegal
connections." Padding is hidden the same way: a batch pads its shorter sentences to one width
with ``pad_id``, and no real token may attend to that padding.

The library's convention: a mask is a boolean NumPy array, True where attention is allowed,
broadcast against the attention scores (B, H, T_q, T_k); query i (a row of the scores) may
attend to key j (a column) where mask[..., i, j] is True.

Write:

* ``padding_mask(ids, pad_id)``: ids (B, S) integers -> (B, 1, 1, S) bool, True at the real
  tokens. The encoder's self-attention and the decoder's cross-attention use it.
* ``causal_mask(T)``: (T, T) bool, True where position i may see position j: the decoder's
  self-attention, combined with the target's padding as
  ``padding_mask(tgt, pad_id) & causal_mask(T)[None, None]``, (B, 1, T, T).

Hints:

* Draw the (T, T) mask for T = 4 on paper: rows are the queries, columns the keys. Which
  entries may be True for position 2? Its own included?
* The padding mask broadcasts over the heads and over the queries: one row per sentence, for
  every query. Which axis holds the keys?
* A mask is boolean: a comparison (``<=``, ``!=``) gives one; ``np.ones(...)`` gives floats
  unless told otherwise.
* PyTorch's attn_mask uses True for "masked"; here True means "may attend".

Check your answer:
    minitransformer check-exercise masks lessons/exercises/masks.py
After the shapes and dtypes, it puts your masks into a tiny Transformer: the decoder must stay
causal (changing the target from position j on leaves every output before j as it was), a
sentence must give the same outputs alone and padded, and the model must give the library's
outputs.
"""

import numpy as np  # noqa: F401 - for arange, tril, ...


def padding_mask(ids, pad_id):
    """ids (B, S) integers -> (B, 1, 1, S) bool: True at the real tokens."""
    raise NotImplementedError("write the padding mask: (B, 1, 1, S) bool, True at the real "
                              "tokens")


def causal_mask(T):
    """(T, T) bool: True where query i may attend to key j."""
    raise NotImplementedError("write the causal mask: (T, T) bool, True where query i may "
                              "attend to key j")
