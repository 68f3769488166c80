"""The shapes through the stacks (viz/shapes.py): one block per tensor with the batch's
shapes, and the attention grids with the mask of the first sentence."""

import matplotlib
import matplotlib.pyplot as pyplot
import numpy as np
import pytest
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from minitransformer import viz
from minitransformer.nn import Transformer, TransformerConfig

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot.close("all")


def test_every_tensor_of_the_stacks_with_its_shape():
    figure = viz.draw_stack_shapes(TransformerConfig.named("tiny", 50, n_layers=3), (2, 5, 4))
    written = [t.get_text() for t in figure.findobj(Text)]
    for label, shape in [("source ids", "(2, 5)"), ("src_embed", "(2, 5, 32)"),
                         ("src_positions", "(2, 5, 32)"), ("encoder.layers.2", "(2, 5, 32)"),
                         ("target ids", "(2, 4)"), ("tgt_embed", "(2, 4, 32)"),
                         ("decoder.layers.2", "(2, 4, 32)"), ("project()", "(2, 4, 50)")]:
        assert label in written and shape in written, label
    assert written.count("(2, 4, 5, 5)") == 1      # encoder self-attention, (B, H, S, S)
    assert written.count("(2, 4, 4, 4)") == 1      # decoder self-attention, (B, H, T, T)
    assert written.count("(2, 4, 4, 5)") == 1      # cross-attention: T queries, S keys
    assert "(2, 5, 64)" in written and "(2, 4, 64)" in written   # the feed-forward's d_ff
    assert {"encoder.layers.0", "decoder.layers.0", "memory", "logits"} <= set(written)


def test_the_attention_grids_show_the_first_sentences_masks():
    model = Transformer(TransformerConfig.named("tiny", 50))
    src = np.array([[11, 12, 13, 0, 0], [16, 17, 18, 19, 20]])     # the first sentence padded
    tgt = np.array([[2, 21, 22, 23], [2, 24, 25, 0]])
    figure = viz.draw_stack_shapes(model, (src, tgt))
    white = [p for p in figure.axes[0].patches if isinstance(p, Rectangle)
             and p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    H, S, T, padded = 4, 5, 4, 2
    encoder, cross = H * S * padded, H * T * padded     # padded keys: white columns
    causal = H * T * (T - 1) // 2                       # keys after the query: a triangle
    assert len(white) == encoder + cross + causal


def test_a_vocabulary_wider_than_drawn_is_marked_cut(tmp_path):
    figure = viz.draw_stack_shapes(TransformerConfig.named("tiny", 5000), (1, 3, 3),
                                   path=tmp_path / "s.png")
    assert "≈" in [t.get_text() for t in figure.findobj(Text)]
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
