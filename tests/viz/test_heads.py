"""The split and merge of heads (viz/heads.py): the steps and shapes read from the tape, and
every panel drawn with all of its numbers."""

import matplotlib
import matplotlib.pyplot as pyplot
import numpy as np
import pytest
from matplotlib.patches import Rectangle
from matplotlib.text import Text

import minitransformer as mt
from minitransformer import viz
from minitransformer.nn import MultiHeadAttention
from minitransformer.viz.heads import head_steps

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot.close("all")


def batch(B=2, T=5, C=16):
    return mt.tensor(np.random.default_rng(0).standard_normal((B, T, C)), dtype="float32")


def test_the_steps_and_shapes_are_those_on_the_tape():
    steps = head_steps(MultiHeadAttention(16, 4), batch())
    assert steps["split"] == [("queries $x W^Q$, Split from K, V", (2, 5, 16)),
                              ("reshape(2, 5, 4, 4)", (2, 5, 4, 4)),
                              ("transpose(0, 2, 1, 3)", (2, 4, 5, 4))]
    assert [shape for _, shape in steps["merge"]] == [(2, 4, 5, 4), (2, 5, 4, 4), (2, 5, 16),
                                                      (2, 5, 16)]
    assert steps["merge"][1][0] == "transpose(0, 2, 1, 3)"
    assert steps["merge"][2][0] == "reshape(2, 5, 16)"


def test_each_panel_draws_the_first_sentence_whole_coloured_by_head():
    figure = viz.draw_heads(MultiHeadAttention(24, 3), batch(B=1, T=4, C=24))
    cells = [p for p in figure.axes[0].patches if isinstance(p, Rectangle)]
    assert len(cells) == 7 * 4 * 24  # seven tensors of T x C numbers
    written = [t.get_text() for t in figure.findobj(Text)]
    assert all(f"head {h}" in written for h in range(3)) and "head 3" not in written
    assert written.count("(1, 4, 3, 8)") == 2 and written.count("(1, 3, 4, 8)") == 2
    assert written.count("(1, 4, 24)") == 3
    # the heads keep their colour from the split to the merge, until W^O mixes them
    colours = {tuple(np.round(c.get_facecolor()[:3], 3)) for c in cells}
    assert len(colours) == 3 + 1
