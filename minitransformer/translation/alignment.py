"""Alignments: for each output token, the source token its cross-attention weighs most.

As fairseq's ``--print-alignment``: the weights of one decoder layer's cross-attention (the
last by default), averaged over the heads, in the row of the position that generated the token
(row j has the prefix BOS y_1 .. y_j-1 as input and predicts y_j); the source token with the
largest average weight is the token's alignment. The weights come from one teacher-forced pass
over the output, the pass `plot attention` draws, so the picture and the pairs agree.

Attention weights are not a word alignment in general: these pairs say where the layer
looked, which in a trained translator is often, not always, the word being translated.

    N outputs   H heads   T output positions   S source positions
"""

from __future__ import annotations

import numpy as np

from .. import backend
from ..autograd.grad_mode import no_grad
from ..nn.transformer import Transformer

WORD_START = "▁"  # SentencePiece's mark of a piece that begins a word


def check_layer(model: Transformer, layer: int) -> int:
    """``layer`` as an index of the decoder's layers (-1 the last), or a ValueError that says
    which exist."""
    n = len(model.decoder.layers)
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer) or not -n <= layer < n:
        raise ValueError(f"the model has no decoder layer {layer!r}; it has {n} (0 to {n - 1}, "
                         "or -1 for the last).")
    return int(layer) % n


def cross_attention(model: Transformer, sources: list[list[int]], outputs: list[list[int]],
                    bos_id: int, layer: int = -1) -> list[np.ndarray]:
    """The cross-attention weights of decoder layer ``layer`` for each (source, output) pair:
    one array (H, T, S) per pair, row j being the position that generated output token j
    (``outputs`` hold the tokens generated, EOS included when there was one)."""
    if not outputs:
        return []
    attention = model.decoder.layers[check_layer(model, layer)].cross_attn
    pad = model.config.pad_id
    S = max(len(src) for src in sources)
    T = max(1, max(len(out) for out in outputs))
    src = np.array([[*s, *[pad] * (S - len(s))] for s in sources])                  # (N, S)
    # inputs BOS y_1 .. y_T-1; what pads a shorter row lies after its own positions, which a
    # causal mask keeps from them (a fresh cache decodes with a causal mask alone, as search)
    prefixes = np.array([[bos_id, *out[:-1], *[bos_id] * (T - max(1, len(out)))]
                         for out in outputs])                                        # (N, T)
    modes = [(module, module.training) for module in model.modules()]
    recording = attention.record_weights
    model.eval()
    attention.record_weights = True
    try:
        with no_grad():
            src_ids = model._ids(src, "source")
            src_mask = model.source_mask(src_ids)
            memory = model.encode(src_ids, src_mask)
            model.decode(prefixes, memory, src_mask, model.new_cache())
        weights = backend.to_numpy(attention.weights.data)                          # (N, H, T, S)
    finally:
        attention.record_weights, attention.weights = recording, None
        for module, training in modes:
            object.__setattr__(module, "training", training)
    return [weights[n, :, :len(out), :len(s)]
            for n, (s, out) in enumerate(zip(sources, outputs, strict=True))]


def hard_alignment(weights: np.ndarray, n_tokens: int) -> list[tuple[int, int]]:
    """(source, output) index pairs from one pair's weights (H, T, S): for each of the first
    ``n_tokens`` output positions (EOS left out), the source position of the largest weight
    averaged over the heads."""
    if weights.shape[-1] == 0:
        return []
    best = weights[:, :n_tokens].mean(axis=0).argmax(axis=-1)                       # (n_tokens,)
    return [(int(i), j) for j, i in enumerate(best.tolist())]


def word_indices(pieces: list[str]) -> list[int]:
    """The word each piece belongs to: a new word begins at every piece marked with ▁."""
    words, word = [], -1
    for piece in pieces:
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        words.append(word)
    return words


def to_words(pairs: list[tuple[int, int]], source_pieces: list[str],
             output_pieces: list[str]) -> list[tuple[int, int]]:
    """Piece pairs as word pairs: each piece replaced by its word, duplicates merged, sorted
    by output word and then source word."""
    src_words, out_words = word_indices(source_pieces), word_indices(output_pieces)
    return sorted({(src_words[i], out_words[j]) for i, j in pairs}, key=lambda p: (p[1], p[0]))


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """Pairs as the "i-j" text of fast_align and fairseq (source i, output j), space-separated."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


__all__ = ["cross_attention", "hard_alignment", "pharaoh", "to_words", "word_indices"]
