"""Decoding without the key/value cache (``use_cache=False``) gives what the cache gives.

The uncached path recomputes every prefix from scratch; it exists for benchmarks
(bench/compare_torch.py), so it must return exactly the cached path's tokens. A tiny random
model in float64 keeps the two paths' rounding differences far below any gap between logits.
"""

import numpy as np
import pytest

import minitransformer
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation.decode import beam_search, greedy_decode

PAD, BOS = 0, 1
SOURCES = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0], [5, 5, 5, 5, 0]])  # padded batch


def make_model(vocab_size=11, emit_padding=False):
    """The tiny model in float64; with ``emit_padding`` its output row of the padding id is
    1.5 × that of id 8, so that greedy and beam search generate padding ids."""
    with minitransformer.default_dtype("float64"):
        minitransformer.manual_seed(0)
        model = Transformer(TransformerConfig.named("tiny", vocab_size, p_dropout=0.0))
    if emit_padding:
        table = model.src_embed.weight.data                              # (V, C), tied
        table[PAD] = 1.5 * table[8]
    return model


@pytest.mark.parametrize("emit_padding", [False, True])
@pytest.mark.parametrize("eos_id", [2, 5, 8])
def test_greedy_without_cache_is_greedy_with_cache(device, eos_id, emit_padding):
    model = make_model(emit_padding=emit_padding)
    for max_len in (None, 0, 1, 12):
        cached = greedy_decode(model, SOURCES, BOS, eos_id, max_len=max_len)
        assert greedy_decode(model, SOURCES, BOS, eos_id, max_len=max_len,
                             use_cache=False) == cached


@pytest.mark.parametrize("emit_padding", [False, True])
@pytest.mark.parametrize("eos_id", [2, 5, 8])
def test_beam_without_cache_is_beam_with_cache(device, eos_id, emit_padding):
    model = make_model(emit_padding=emit_padding)
    for beam_size, max_len in ((1, 12), (4, None), (4, 3), (3, 12)):
        hyps, scores = beam_search(model, SOURCES, BOS, eos_id, beam_size, max_len=max_len,
                                   return_scores=True)
        hyps_uncached, scores_uncached = beam_search(
            model, SOURCES, BOS, eos_id, beam_size, max_len=max_len, return_scores=True,
            use_cache=False)
        assert hyps_uncached == hyps
        assert scores_uncached == pytest.approx(scores, abs=1e-9)


def test_generated_padding_is_a_token_not_padding():
    """The case where the uncached path must not mask as ``decode`` does for training: the
    model emits the padding id, and the next steps must still attend to that position."""
    model = make_model(emit_padding=True)
    hyps = greedy_decode(model, SOURCES, BOS, 5, max_len=12, use_cache=False)
    assert any(PAD in hyp for hyp in hyps)
    assert hyps == greedy_decode(model, SOURCES, BOS, 5, max_len=12)


@pytest.mark.parametrize("use_cache", [True, False])
def test_each_step_feeds_the_newest_token_or_the_whole_prefix(use_cache):
    model = make_model()
    fed = []
    decode = model.decode
    model.decode = lambda ids, *args: fed.append(np.shape(ids)[1]) or decode(ids, *args)
    hyps = greedy_decode(model, SOURCES, BOS, -1, max_len=6, use_cache=use_cache)
    assert [len(h) for h in hyps] == [6, 6, 6]  # eos_id -1 never comes: all six steps run
    assert fed == ([1] * 6 if use_cache else [1, 2, 3, 4, 5, 6])
    fed.clear()
    beam_search(model, SOURCES, BOS, -1, beam_size=2, max_len=4, use_cache=use_cache)
    assert fed == ([1] * 4 if use_cache else [1, 2, 3, 4])
