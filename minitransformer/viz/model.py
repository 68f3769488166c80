"""The paper's Figure 1, drawn from a model and the shapes of one batch.

The encoder on the left, the decoder on the right, inputs at the bottom, as in the paper.
Every box is a module of the model under the name it registers (``encoder.layers.0.self_attn``)
and every shape beside an arrow is one a forward pass of the batch computed (``trace.py``):
the drawing is made from the code, so it changes when the code does. Each sub-layer sits
under its Add & Norm with the residual path around it (post-LN, §3.1; pre-LN draws the norm
below the sub-layer); attention boxes give their mask and weights, the feed-forward its inner
width; the encoder's output (the memory) runs to every decoder layer's cross-attention; the
shared embedding table (§3.4) is marked where it is used.

    B batch   S source length   T target length   C d_model   H heads   F d_ff   V vocabulary
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..nn.transformer import Transformer
from ._render import pyplot, save_figure
from .trace import Call, record_transformer

WIDTH, GAP, TIGHT, LINE = 2.55, 0.34, 0.14, 0.15  # inches: box width, gaps, one text line
ATTENTION, FEED_FORWARD, NORM, EMBED, POSITIONS, LINEAR, SOFTMAX = (
    "#fcd9b4", "#c9e4f6", "#f4f1b3", "#f7d3dc", "#ffffff", "#dcd3f0", "#d3ecd0")
MONO = "DejaVu Sans Mono"


def draw_model(model: Any, batch: tuple = (2, 7, 6), layers_in_full: int | None = 1,
               path: str | Path | None = None) -> Any:
    """Figure 1 of the paper for ``model`` (a Transformer or a TransformerConfig), with the
    shapes of ``batch``: sizes (B, S, T) or (source ids, target ids).

    The first ``layers_in_full`` layers of each stack are drawn sub-layer by sub-layer, the
    others as one box naming their sub-layers (None: every layer in full). Returns the
    matplotlib figure; writes it to ``path`` if given (.png, .svg, .pdf)."""
    model, call = record_transformer(model, batch)
    plt = pyplot()
    figure = plt.figure()
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set_axis_off()
    source, target = _sides(call)
    left = _Column(axis, 0.75, side=-1)
    right = _Column(axis, 0.75 + WIDTH + 1.1, side=+1)
    embeds = [_draw_embedding(left, model, source, "source"),
              _draw_embedding(right, model, target, "target")]
    if model.tgt_embed is model.src_embed:  # one table for both (§3.4)
        (_, y0, x1, y1), (u0, v0, _, v1) = embeds
        axis.plot([x1, u0], [(y0 + y1) / 2, (v0 + v1) / 2], ls="--", color="#a0506a", lw=1)
        axis.text((x1 + u0) / 2, (y1 + v1) / 2 + 0.04, "one table", ha="center", va="bottom",
                  fontsize=7, color="#a0506a")
    encoder = next(c for c in source if c.kind == "Encoder")
    _draw_stack(left, encoder, layers_in_full, last="memory ")
    decoder = next(c for c in target if c.kind == "Decoder")
    cross = _draw_stack(right, decoder, layers_in_full)
    _draw_output(right, model, target, call.output)
    _draw_memory(axis, left, right, cross)
    c = model.config
    height = max(left.y, right.y) + 0.55
    axis.text(0.1, height - 0.1, f"The Transformer (Figure 1), drawn from minitransformer's "
              f"{type(model).__name__}", fontsize=10, fontweight="bold", va="top")
    axis.text(0.1, height - 0.32, f"N = {c.n_layers}, d_model = {c.d_model}, h = {c.n_heads}, "
              f"d_ff = {c.d_ff}, V = {c.tgt_vocab_size:,}, P_drop = {c.p_dropout:g}, "
              f"{'pre' if c.pre_norm else 'post'}-LN;"
              f" shapes of a batch (B, S, T) = ({call.inputs[0][0]}, {call.inputs[0][1]}, "
              f"{call.inputs[1][1]})", fontsize=7.5, va="top", color="#333333")
    width = right.x + WIDTH + 0.75
    figure.set_size_inches(width, height)
    axis.set_xlim(0, width)
    axis.set_ylim(-0.1, height)
    return save_figure(figure, path)


class _Column:
    """Boxes stacked upward from the bottom at ``x``; residual paths go to ``side``."""

    def __init__(self, axis: Any, x: float, side: int):
        self.axis, self.x, self.side, self.y = axis, x, side, 0.0
        self.centre = x + WIDTH / 2

    def arrow(self, label: str = "", length: float = GAP, label_at: float = 0.5) -> None:
        """An arrow up the middle, ``label`` (a shape) beside it, ``label_at`` of the way up."""
        self.axis.annotate("", (self.centre, self.y + length), (self.centre, self.y),
                           arrowprops=dict(arrowstyle="-|>", color="#444444", lw=0.9,
                                           shrinkA=0, shrinkB=0, mutation_scale=8))
        if label:
            self.axis.text(self.centre + 0.07, self.y + length * label_at, label, fontsize=6.5,
                           family=MONO, color="#555555", va="center")
        self.y += length

    def box(self, title: str, lines: list[str], color: str, width: float = WIDTH,
            dashed: bool = False, named: bool = True) -> tuple[float, float, float, float]:
        """A box of ``title`` over ``lines``, the first the module's name (in the code's font)
        when ``named``; returns its (left, bottom, right, top)."""
        from matplotlib.patches import FancyBboxPatch

        height = 0.1 + 0.02 + LINE * (1 + len(lines))
        x0 = self.centre - width / 2
        self.axis.add_patch(FancyBboxPatch(
            (x0, self.y), width, height, boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=color, edgecolor="#555555", lw=0.8, ls="--" if dashed else "-",
            zorder=2))
        top = self.y + height - 0.06
        self.axis.text(self.centre, top, title, fontsize=8.5, fontweight="bold", ha="center",
                       va="top", zorder=3)
        for i, line in enumerate(lines):
            mono = named and i == 0
            self.axis.text(self.centre, top - LINE * (i + 1) - 0.01, line, ha="center",
                           va="top", fontsize=6.5 if mono else 6.3, zorder=3,
                           family=MONO if mono else None, color="#222222")
        rect = (x0, self.y, x0 + width, self.y + height)
        self.y += height
        return rect

    def residual(self, start: float, into: tuple[float, float, float, float]) -> None:
        """The residual path: from the stream at height ``start``, around the sub-layer, into
        the side of the box ``into`` (the Add)."""
        edge = into[0] if self.side < 0 else into[2]
        outside = edge + self.side * 0.22
        middle = (into[1] + into[3]) / 2
        self.axis.plot([self.centre, outside, outside], [start, start, middle], color="#444444",
                       lw=0.9, zorder=1)
        self.axis.annotate("", (edge, middle), (outside, middle),
                           arrowprops=dict(arrowstyle="-|>", color="#444444", lw=0.9,
                                           shrinkA=0, shrinkB=0, mutation_scale=8))

    def frame(self, bottom: float, top: float, name: str, kind: str) -> None:
        """The grey block of one layer, its name at the top left and its class at the right."""
        from matplotlib.patches import FancyBboxPatch

        pad = 0.3
        self.axis.add_patch(FancyBboxPatch(
            (self.x - pad, bottom), WIDTH + 2 * pad, top - bottom,
            boxstyle="round,pad=0,rounding_size=0.1", facecolor="#f2f2f2",
            edgecolor="#999999", lw=0.8, zorder=0))
        self.axis.text(self.x - pad + 0.07, top - 0.06, name, fontsize=6.5, family=MONO,
                       fontweight="bold", va="top", color="#444444")
        self.axis.text(self.x + WIDTH + pad - 0.07, top - 0.06, kind, fontsize=6.5, ha="right",
                       va="top", color="#666666", style="italic")


def _sides(call: Call) -> tuple[list[Call], list[Call]]:
    """The model's own calls: up to the encoder's (the source side), and after it."""
    at = next(i for i, c in enumerate(call.children) if c.kind == "Encoder") + 1
    return call.children[:at], call.children[at:]


def _draw_embedding(column: _Column, model: Transformer, calls: list[Call],
                    side: str) -> tuple[float, float, float, float]:
    embed = next(c for c in calls if c.kind == "Embedding")
    name = "src_embed" if side == "source" else "tgt_embed"
    table = getattr(model, name).weight
    column.axis.text(column.centre, column.y - 0.02, f"{side} ids {_fmt(embed.inputs[0])}"
                     + ("" if side == "source" else ", shifted right"),
                     ha="center", va="top", fontsize=7, family=MONO)
    column.arrow()
    shared = (["the same table as src_embed (§3.4)"]
              if side == "target" and model.tgt_embed is model.src_embed else [])
    rect = column.box(f"{'Input' if side == 'source' else 'Output'} Embedding · √d_model",
                      [name, f"table {_fmt(table.shape)}", *shared], EMBED)
    column.arrow(_fmt(embed.output))
    positions = next(c for c in calls if c.kind == "PositionalEncoding")
    dropout = [c for c in calls if c.kind == "Dropout"]
    column.box("⊕ Positional Encoding", [
        positions.name, f"{'learned' if positions.module.learned else 'sinusoidal'}, then "
        + (f"{dropout[0].name} (p = {dropout[0].module.p:g})" if dropout else "no dropout")],
        POSITIONS)
    column.arrow(_fmt(positions.output))
    return rect


def _draw_stack(column: _Column, stack: Call, layers_in_full: int | None,
                last: str = "") -> Any:
    """The layers of one stack; returns the boxes that read the memory (the decoder's).
    ``last`` names the stack's output on its arrow."""
    readers = []
    layers = [c for c in stack.children if c.kind.endswith("Layer")]
    final = next((c for c in stack.children if c.kind == "LayerNorm"), None)
    for i, layer in enumerate(layers):
        label = (last if layer is layers[-1] and final is None else "") + _fmt(layer.output)
        if layers_in_full is None or i < layers_in_full:
            bottom = column.y - 0.12  # the block begins where the arrow into it ends
            for residual in layer.children:
                readers += _draw_sublayer(column, residual)
                if residual is not layer.children[-1]:
                    column.arrow(_fmt(residual.output))
            column.frame(bottom, column.y + 0.26, layer.name, layer.kind)
            column.arrow(label, 0.26 + GAP, label_at=(0.26 + GAP / 2) / (0.26 + GAP))
            continue
        names = [c.name.rsplit(".", 1)[-1] for r in layer.children for c in r.children
                 if c.kind in ("MultiHeadAttention", "PositionwiseFeedForward")]
        rect = column.box(layer.kind, [layer.name, " → ".join(names),
                                       "each with its residual and LayerNorm"], "#f2f2f2",
                          dashed=True)
        if layer.kind == "DecoderLayer":
            readers.append(rect)
        column.arrow(label)
    if final is not None:
        column.box("LayerNorm", [final.name, "pre-LN: the stack's last norm"], NORM)
        column.arrow(last + _fmt(final.output))
    return readers if stack.kind == "Decoder" else None


def _draw_sublayer(column: _Column, residual: Call) -> list:
    """One sub-layer with its residual connection and LayerNorm (post-LN: norm after the add;
    pre-LN: norm before the sub-layer). Returns the box if it reads the memory."""
    inner = next(c for c in residual.children if c.kind not in ("Dropout", "LayerNorm"))
    norm = next(c for c in residual.children if c.kind == "LayerNorm")
    dropout = next((c for c in residual.children if c.kind == "Dropout"), None)
    start = column.y - 0.07  # the residual leaves the stream just below the sub-layer
    pre_norm = residual.module.pre_norm
    if pre_norm:
        column.box("LayerNorm", [norm.name], NORM)
        column.arrow(length=TIGHT)
    if inner.kind == "MultiHeadAttention":
        mask = inner.masks[0] if inner.masks else None
        title = ("Masked Multi-Head Attention" if mask is not None and mask.causal
                 else "Multi-Head Attention")
        what = ("no mask" if mask is None else
                f"mask {_fmt(mask.shape)}: {'causal + padding' if mask.causal else 'padding'}")
        lines = [inner.name, what, f"weights {_fmt(inner.weights)}"
                 f"{'' if inner.same_inputs else ', keys: memory'}"]
        rect = column.box(title, lines, ATTENTION)
    else:
        hidden = inner.feed_forward_width()
        lines = [inner.name] + ([f"inner width {_fmt(hidden)}"] if hidden else [])
        rect = column.box("Feed Forward", lines, FEED_FORWARD)
    column.arrow(length=TIGHT)
    add = column.box("Add" if pre_norm else "Add & Norm", [
        residual.name + (f" (dropout p = {dropout.module.p:g})" if dropout and
                         len(residual.name) < 28 else "")], NORM)
    column.residual(start, add)
    return [rect] if inner.kind == "MultiHeadAttention" and not inner.same_inputs else []


def _draw_output(column: _Column, model: Transformer, calls: list[Call],
                 logits: tuple[int, ...]) -> None:
    projection = next((c for c in calls if c.kind == "Linear"), None)
    if projection is None:  # tied: the target embedding's table, transposed (§3.4)
        column.box("Linear", ["project()", "weight: tgt_embed.weight, tied (§3.4)"], LINEAR)
    else:
        column.box("Linear", [projection.name, f"weight {_fmt(projection.module.weight.shape)}"],
                   LINEAR)
    column.arrow(f"logits {_fmt(logits)}")
    column.box("Softmax", ["in the loss and in decoding"], SOFTMAX, named=False)
    column.arrow()
    column.axis.text(column.centre, column.y + 0.03, f"output probabilities {_fmt(logits)}",
                     ha="center", va="bottom", fontsize=7, family=MONO)
    column.y += 0.2


def _draw_memory(axis: Any, left: _Column, right: _Column, readers: list) -> None:
    """The encoder's output to every cross-attention: out of the encoder's top, along a
    line between the columns, into the side of each box that reads it."""
    bus = (left.x + WIDTH + right.x) / 2 + 0.05
    top = left.y
    ys = [(r[1] + r[3]) / 2 for r in readers]
    axis.plot([left.centre, left.centre, bus], [top, top + 0.12, top + 0.12], color="#444444",
              lw=0.9)
    axis.plot([bus, bus], [min([top + 0.12, *ys]), max([top + 0.12, *ys])], color="#444444",
              lw=0.9)
    for y, reader in zip(ys, readers, strict=True):
        axis.annotate("", (reader[0], y), (bus, y),
                      arrowprops=dict(arrowstyle="-|>", color="#444444", lw=0.9, shrinkA=0,
                                      shrinkB=0, mutation_scale=8))
    left.y = top + 0.12


def _fmt(shape: Any) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")" if shape is not None else "?"
