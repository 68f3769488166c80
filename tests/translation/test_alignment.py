"""Alignments from the cross-attention: the teacher-forced pass gives the weights each token
was generated with, and pieces become words at SentencePiece's word marks."""

import numpy as np
import pytest

import minitransformer
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation.alignment import (
    check_layer,
    cross_attention,
    hard_alignment,
    pharaoh,
    to_words,
    word_indices,
)

BOS, EOS = 1, 2


def make_model():
    minitransformer.manual_seed(3)
    model = Transformer(TransformerConfig.named("tiny", 17, p_dropout=0.1))
    model.train()
    return model


def test_the_weights_are_those_the_tokens_were_generated_with():
    """Greedy decoding with the cache, one token at a time, records the cross-attention of
    each step: the teacher-forced pass over the output gives the same rows."""
    model = make_model()
    sources = [[5, 6, 7, 8], [9, 10]]
    layer = model.decoder.layers[-1].cross_attn
    pad = model.config.pad_id
    src = np.array([[*s, *[pad] * (4 - len(s))] for s in sources])
    model.eval()
    layer.record_weights = True
    with minitransformer.no_grad():
        src_ids = model._ids(src, "source")
        mask = model.source_mask(src_ids)
        memory = model.encode(src_ids, mask)
        cache = model.new_cache()
        tokens, rows, outputs = np.full((2, 1), BOS), [], [[], []]
        for _ in range(6):
            logits = model.decode(tokens, memory, mask, cache)
            rows.append(layer.weights.numpy()[:, :, 0])                  # (2, H, S)
            tokens = logits.numpy()[:, -1:].argmax(-1)
            for b in range(2):
                outputs[b].append(int(tokens[b, 0]))
    layer.record_weights = False
    model.train()
    during = np.stack(rows, axis=2)                                      # (2, H, 6, S)
    after = cross_attention(model, sources, outputs, BOS)
    for b, weights in enumerate(after):
        assert weights.shape == (4, 6, len(sources[b]))
        np.testing.assert_allclose(weights, during[b, :, :, :len(sources[b])], atol=1e-5)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert model.training and layer.weights is None and not layer.record_weights


def test_outputs_of_different_lengths_and_an_empty_one():
    model = make_model()
    weights = cross_attention(model, [[5, 6, 7], [8]], [[3, 4, EOS], [EOS]], BOS, layer=0)
    assert [w.shape for w in weights] == [(4, 3, 3), (4, 1, 1)]
    [alone] = cross_attention(model, [[5, 6, 7]], [[3, 4, EOS]], BOS, layer=0)
    np.testing.assert_allclose(weights[0], alone, atol=1e-6)  # padding changes nothing
    assert cross_attention(model, [], [], BOS) == []


def test_hard_alignment_takes_the_largest_mean_over_heads_and_leaves_eos_out():
    weights = np.array([[[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]],
                        [[0.1, 0.9], [0.4, 0.6], [0.9, 0.1]]])            # (H=2, T=3, S=2)
    # means: [0.4, 0.6], [0.3, 0.7], [0.7, 0.3] (the last row is EOS's)
    assert hard_alignment(weights, 2) == [(1, 0), (1, 1)]
    assert hard_alignment(weights, 3) == [(1, 0), (1, 1), (0, 2)]
    assert hard_alignment(np.zeros((2, 3, 0)), 2) == []


def test_pieces_become_words_at_the_word_marks():
    assert word_indices(["▁The", "▁sn", "akes", ".", "▁", "a"]) == [0, 1, 1, 1, 2, 2]
    assert word_indices(["akes", "▁x"]) == [0, 1]  # a first piece without a mark: word 0
    source = ["▁The", "▁sn", "akes", "."]
    output = ["▁Ta", "▁ser", "pen", "."]
    pairs = [(0, 0), (1, 1), (2, 2), (1, 3)]
    assert to_words(pairs, source, output) == [(0, 0), (1, 1)]
    assert pharaoh(to_words(pairs, source, output)) == "0-0 1-1"
    assert pharaoh([]) == ""


@pytest.mark.parametrize("layer", [2, -3, 1.0, True, "1"])
def test_a_layer_the_model_does_not_have_is_refused(layer):
    with pytest.raises(ValueError, match=r"the model has no decoder layer .*; it has 2 \(0 to "
                                         r"1, or -1 for the last\)"):
        check_layer(make_model(), layer)
    assert [check_layer(make_model(), i) for i in (0, 1, -1, -2)] == [0, 1, 1, 0]
