"""Figure 1 drawn from a model (viz/model.py): every layer's sub-layers with their residual
and norm, the masks, the shared table and the output projection, the shapes of the batch."""

import matplotlib
import matplotlib.pyplot as pyplot
import numpy as np
import pytest
from matplotlib.text import Text

from minitransformer import viz
from minitransformer.nn import Transformer, TransformerConfig

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot.close("all")

SRC = np.array([[11, 12, 13, 14, 15], [16, 17, 18, 0, 0]])          # (B, S) = (2, 5)
TGT = np.array([[2, 21, 22, 23], [2, 24, 25, 0]])                   # (B, T) = (2, 4)


def texts(figure):
    return [t.get_text() for t in figure.findobj(Text) if t.get_text()]


@pytest.fixture(scope="module")
def every_layer():
    model = Transformer(TransformerConfig.named("tiny", 50, n_layers=3))
    return texts(viz.draw_model(model, (SRC, TGT), layers_in_full=None))


def test_every_layer_has_its_sub_layers_each_with_residual_and_norm(every_layer):
    for i in range(3):
        for name in ("self_attn", "attn_residual", "feed_forward", "ff_residual"):
            assert f"encoder.layers.{i}.{name}" in every_layer
        for name in ("self_attn", "self_residual", "cross_attn", "cross_residual",
                     "feed_forward", "ff_residual"):
            assert f"decoder.layers.{i}.{name}" in every_layer
        assert f"encoder.layers.{i}" in every_layer and f"decoder.layers.{i}" in every_layer
    assert every_layer.count("Add & Norm") == 3 * 2 + 3 * 3
    assert every_layer.count("Masked Multi-Head Attention") == 3
    assert every_layer.count("Multi-Head Attention") == 3 + 3  # encoder self, cross
    assert every_layer.count("Feed Forward") == 6


def test_masks_weights_and_shapes_are_those_of_the_batch(every_layer):
    assert every_layer.count("mask (2, 1, 1, 5): padding") == 6
    assert every_layer.count("mask (2, 1, 4, 4): causal + padding") == 3
    assert every_layer.count("weights (2, 4, 5, 5)") == 3
    assert every_layer.count("weights (2, 4, 4, 5), keys: memory") == 3
    assert every_layer.count("inner width (2, 5, 64)") == 3
    assert every_layer.count("inner width (2, 4, 64)") == 3
    assert "source ids (2, 5)" in every_layer
    assert "target ids (2, 4), shifted right" in every_layer
    assert "memory (2, 5, 32)" in every_layer
    assert "logits (2, 4, 50)" in every_layer
    assert "output probabilities (2, 4, 50)" in every_layer
    assert every_layer.count("(2, 5, 32)") >= 3 and every_layer.count("(2, 4, 32)") >= 3


def test_the_shared_table_and_the_tied_output_projection(every_layer):
    assert "src_embed" in every_layer and "tgt_embed" in every_layer
    assert "table (50, 32)" in every_layer
    assert "the same table as src_embed (§3.4)" in every_layer and "one table" in every_layer
    assert "weight: tgt_embed.weight, tied (§3.4)" in every_layer


def test_untied_pre_ln_with_learned_positions():
    config = TransformerConfig.named("tiny", 50, src_vocab_size=60, share_embeddings=False,
                                     tie_output=False, pre_norm=True, learned_positions=True)
    drawn = texts(viz.draw_model(config, (2, 5, 4)))
    assert "one table" not in drawn and "table (60, 32)" in drawn and "table (50, 32)" in drawn
    assert "out_proj" in drawn and "weight (50, 32)" in drawn
    assert "encoder.layers.0.attn_residual.norm" in drawn  # the norm before the sub-layer
    assert "Add" in drawn and "Add & Norm" not in drawn
    assert "encoder.final_norm" in drawn and "decoder.final_norm" in drawn
    assert "learned, then embed_dropout (p = 0.1)" in drawn


def test_layers_after_the_first_are_one_box_naming_their_sub_layers():
    drawn = texts(viz.draw_model(TransformerConfig.named("small", 1000), (2, 7, 6)))
    assert "encoder.layers.0.self_attn" in drawn and "encoder.layers.1.self_attn" not in drawn
    assert drawn.count("self_attn → feed_forward") == 2                # encoder layers 1, 2
    assert drawn.count("self_attn → cross_attn → feed_forward") == 2   # decoder layers 1, 2
    assert "decoder.layers.2" in drawn and "memory (2, 7, 256)" in drawn
    assert any("N = 3, d_model = 256, h = 4, d_ff = 1024, V = 1,000" in t for t in drawn)


def test_the_picture_is_written(tmp_path):
    viz.draw_model(TransformerConfig.named("tiny", 50), (1, 3, 2), path=tmp_path / "m.svg")
    assert "<svg" in (tmp_path / "m.svg").read_text()
