"""The shapes of one batch through the stacks, drawn to scale.

Each tensor the forward pass made is a block: one row per token (height: the length S or T),
its width the size of the feature axis (d_model, d_ff or the vocabulary; widths beyond 4·d_model
are cut, marked ≈), and a copy behind it for each further sentence of the batch. Attention
weights are drawn as one (T, S) grid per head with the first sentence's mask: white cells are
keys a query may not see (the decoder's causal triangle, padding). The blocks come from a
recorded forward pass (``trace.py``), so what is drawn is what the model computed: every
layer keeps (B, L, d_model), the feed-forward widens to d_ff and back, the embedding and
the output projection alone change the width, and the two lengths meet only in the decoder's
cross-attention, a T × S grid.

    B batch   S source length   T target length   C d_model   H heads   F d_ff   V vocabulary
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ._render import pyplot, save_figure
from .trace import Call, Mask, record_transformer

EMBED, STREAM, INNER, WEIGHTS, IDS, LOGITS = (
    "#f2b8c6", "#9cc9e8", "#7fb3d5", "#f5a65b", "#cccccc", "#b9a6e0")
DEPTH = 0.05  # inches between a sentence and the next one behind it
MONO = "DejaVu Sans Mono"


def draw_stack_shapes(model: Any, batch: tuple = (2, 7, 6), path: str | Path | None = None
                      ) -> Any:
    """The tensors of ``batch`` (sizes (B, S, T), or (source ids, target ids)) through
    ``model`` (a Transformer or a TransformerConfig), to scale: the source side above, the
    target side below. Returns the matplotlib figure; writes it to ``path`` if given."""
    model, call = record_transformer(model, batch)
    source, target = _rows(call)
    B, S = call.inputs[0]
    T = call.inputs[1][1]
    C = model.config.d_model
    row = min(0.16, 1.4 / max(S, T))           # inches a token
    unit = 0.55 / C                            # inches a feature
    plt = pyplot()
    figure = plt.figure()
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set_axis_off()
    H = model.config.n_heads
    tallest = max(S, T) * row + (max(min(B, 8), min(H, 8)) - 1) * DEPTH
    heights, width, places = {}, 0.0, {}
    y = 0.55
    for title, items in (("target side: the decoder", target), ("source side: the encoder",
                                                                 source)):
        x = 0.35
        frame = None
        for item in items:
            if item["group"] and frame is None:
                frame = (item["group"], x - 0.12)
            right = _glyph(axis, x, y, item, row, unit, C)
            places[item["name"]] = (x, right)
            label_x = (x + right) / 2
            axis.text(label_x, y - 0.07, _fmt(item["shape"]), ha="center", va="top",
                      fontsize=6.5, family=MONO)
            axis.text(label_x, y - 0.24, item["role"], ha="center", va="top", fontsize=6,
                      color="#555555")
            axis.text(label_x, y + tallest + 0.05, item["label"], ha="center", va="bottom",
                      fontsize=6.5, family=MONO)
            width_here = max(right - x, 0.062 * max(len(item["label"]), len(item["role"])))
            next_x = x + width_here + 0.3
            if frame is not None and (item is items[-1] or items[items.index(item) + 1]["group"]
                                      != frame[0]):
                _frame(axis, frame[1], x + width_here + 0.12, y, tallest, frame[0])
                frame = None
                next_x += 0.15
            x = next_x
        axis.text(0.35, y + tallest + 0.42, title, fontsize=9, fontweight="bold")
        heights[title] = y
        width = max(width, x)
        y += tallest + 1.2
    _memory(axis, places, source, target, heights, tallest)
    c = model.config
    axis.text(0.35, y - 0.2, f"Shapes through the stacks: B = {B}, S = {S}, T = {T}, "
              f"d_model = {C}, h = {c.n_heads}, d_ff = {c.d_ff}, V = {c.tgt_vocab_size:,}",
              fontsize=10, fontweight="bold")
    axis.text(0.35, y - 0.42, "One block per tensor: a row per token, the feature axis to scale "
              "(≈: cut), a copy behind for each further sentence. Attention weights: a (T, S) "
              "grid per head, the first sentence's mask in white.", fontsize=7.5,
              color="#333333")
    figure.set_size_inches(width, y)
    axis.set_xlim(0, width)
    axis.set_ylim(0, y)
    return save_figure(figure, path)


def _rows(call: Call) -> tuple[list[dict], list[dict]]:
    """What each row draws, in order, from the recorded calls."""
    at = next(i for i, c in enumerate(call.children) if c.kind == "Encoder") + 1
    rows = []
    for calls, ids, side in ((call.children[:at], call.inputs[0], "source"),
                             (call.children[at:], call.inputs[1], "target")):
        items = [_item(f"{side} ids", "token ids", ids, "ids")]
        for c in calls:
            if c.kind == "Embedding":
                items.append(_item("src_embed" if side == "source" else "tgt_embed",
                                   "× √d_model", c.output, "embed"))
            elif c.kind == "PositionalEncoding":
                items.append(_item(c.name, "+ positions", c.output, "stream"))
            elif c.kind in ("Encoder", "Decoder"):
                items += _stack(c)
            elif c.kind == "Linear":
                items.append(_item(c.name, "logits", c.output, "logits"))
        if side == "target" and items[-1]["kind"] != "logits":  # tied: F.linear, no module
            items.append(_item("project()", "logits", call.output, "logits"))
        rows.append(items)
    return rows[0], rows[1]


def _stack(stack: Call) -> list[dict]:
    items = []
    layers = [c for c in stack.children if c.kind.endswith("Layer")]
    for i, layer in enumerate(layers):
        if i == 0:  # inside the first layer: the shapes that are not (B, L, C)
            for c in layer.walk():
                if c.kind == "MultiHeadAttention":
                    kind = "self" if c.same_inputs else "cross"
                    items.append(_item(c.name.rsplit(".", 1)[-1], f"{kind}-attention weights",
                                       c.weights, "weights", layer.name, c.masks))
                elif c.kind == "PositionwiseFeedForward" and c.feed_forward_width():
                    items.append(_item("feed_forward", "inner width d_ff",
                                       c.feed_forward_width(), "inner", layer.name))
            items.append(_item("output", "the layer's output", layer.output, "stream",
                               layer.name))
        else:
            items.append(_item(layer.name, "", layer.output, "stream"))
    final = next((c for c in stack.children if c.kind == "LayerNorm"), None)
    if final is not None:
        items.append(_item(final.name, "final norm", final.output, "stream"))
    if stack.kind == "Encoder":
        items[-1]["role"] = "memory"
    return items


def _item(label: str, role: str, shape: tuple, kind: str, group: str | None = None,
          masks: list[Mask] | None = None) -> dict:
    return {"label": label, "role": role, "shape": tuple(shape), "kind": kind, "group": group,
            "masks": masks or [], "name": f"{group}.{label}" if group else label}


def _glyph(axis: Any, x: float, y: float, item: dict, row: float, unit: float, C: int) -> float:
    """Draw one tensor with its lower left corner at (x, y); return its right edge."""
    from matplotlib.patches import Rectangle

    shape, kind = item["shape"], item["kind"]
    if kind == "weights":  # (B, H, T, S): one grid per head, the first sentence's mask
        _, H, T, S = shape
        allowed = (np.broadcast_to(item["masks"][0].first, (T, S)) if item["masks"]
                   else np.ones((T, S), bool))
        for h in reversed(range(min(H, 8))):
            x0, y0 = x + h * DEPTH, y + h * DEPTH
            for t in range(T):
                for s in range(S):
                    axis.add_patch(Rectangle(
                        (x0 + s * row, y0 + (T - 1 - t) * row), row, row,
                        facecolor=WEIGHTS if allowed[t, s] else "white", edgecolor="#b06a2a",
                        lw=0.3, alpha=1.0 if h == 0 else 0.55))
        return x + S * row + min(H, 8) * DEPTH
    length = shape[1]
    if kind == "ids":
        w, cut = row, False
    else:
        w = shape[-1] * unit
        cut = w > 4 * C * unit
        w = min(w, 4 * C * unit)
    color = {"ids": IDS, "embed": EMBED, "stream": STREAM, "inner": INNER,
             "logits": LOGITS}[kind]
    copies = min(shape[0], 8)
    for b in reversed(range(copies)):
        axis.add_patch(Rectangle((x + b * DEPTH, y + b * DEPTH), w, length * row,
                                 facecolor=color, edgecolor="#444444", lw=0.6,
                                 alpha=1.0 if b == 0 else 0.5))
    for t in range(1, length):  # a line between tokens
        axis.plot([x, x + w], [y + t * row] * 2, color="white", lw=0.5)
    if cut:  # the vocabulary is far wider than drawn: a break, as on a cut axis
        for dx in (0.0, 0.07):
            axis.plot([x + w - 0.3 + dx, x + w - 0.22 + dx], [y - 0.04, y + length * row + 0.04],
                      color="white", lw=2.5, zorder=3)
        axis.text(x + w - 0.22, y + length * row + 0.06, "≈", ha="center", va="bottom",
                  fontsize=8)
    return x + w + (copies - 1) * DEPTH


def _frame(axis: Any, left: float, right: float, y: float, tallest: float, name: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    axis.add_patch(FancyBboxPatch((left, y - 0.4), right - left, tallest + 0.86,
                                  boxstyle="round,pad=0,rounding_size=0.08",
                                  facecolor="#f3f3f3", edgecolor="#aaaaaa", lw=0.7, zorder=0))
    axis.text(left + 0.07, y + tallest + 0.41, name, fontsize=6.5, family=MONO,
              fontweight="bold", color="#555555", va="top")


def _memory(axis: Any, places: dict, source: list[dict], target: list[dict], heights: dict,
            tallest: float) -> None:
    """An arrow from the encoder's output (the memory) to the cross-attention it feeds."""
    cross = next((t for t in target if t["kind"] == "weights" and t["role"].startswith("cross")),
                 None)
    if cross is None:
        return
    x0, x1 = places[source[-1]["name"]]
    u0, u1 = places[cross["name"]]
    top, bottom = heights["source side: the encoder"], heights["target side: the decoder"]
    axis.annotate("", ((u0 + u1) / 2, bottom + tallest + 0.34), ((x0 + x1) / 2, top - 0.38),
                  arrowprops=dict(arrowstyle="-|>", color="#a05a1a", lw=1, mutation_scale=9,
                                  connectionstyle="arc3,rad=0.1"))
    axis.text(((x0 + x1) / 2 + (u0 + u1) / 2) / 2 + 0.1, (top + bottom + tallest) / 2,
              "memory: keys and values\nof every cross-attention", fontsize=6.5,
              color="#a05a1a", va="center")


def _fmt(shape: tuple) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"
