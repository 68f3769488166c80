"""Sentences in, sentences out: tokenize, batch by length, decode, detokenize.

Used by training (validation BLEU), ``minitransformer translate`` and ``evaluate``. Empty lines
translate to empty lines; characters the tokenizer has never seen become its unknown token
rather than an error; sources longer than the model's positional table are cut to fit.
"""

from __future__ import annotations

import sys
from typing import Any

from .decode import beam_search, greedy_decode


def translate(model: Any, tokenizer: Any, sentences: list[str], beam_size: int = 1,
              length_penalty: float = 0.6, batch_size: int = 64) -> list[str]:
    """Translations of ``sentences``, in order: greedy when ``beam_size`` is 1, else beam
    search (§6.1: beam 4, length penalty 0.6, at most source length + 50 tokens)."""
    max_len = model.config.max_len
    encoded = []
    for sentence in sentences:
        ids = tokenizer.encode(sentence.strip())
        if len(ids) > max_len - 1:
            print(f"warning: a source of {len(ids)} tokens was cut to {max_len - 1}, the "
                  "model's longest input.", file=sys.stderr)
            ids = ids[: max_len - 1]
        encoded.append(ids)
    outputs = [""] * len(sentences)
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    pad = model.config.pad_id
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        src = [[*encoded[i], *[pad] * (width - len(encoded[i]))] for i in rows]
        # each sentence's limit is its own length + 50, whatever its batch (decode.py)
        if beam_size == 1:
            ids = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id)
        else:
            ids = beam_search(model, src, tokenizer.bos_id, tokenizer.eos_id, beam_size,
                              length_penalty)
        for i, out in zip(rows, ids, strict=True):
            outputs[i] = tokenizer.decode(out)
    return outputs
