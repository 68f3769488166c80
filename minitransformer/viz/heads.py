"""The split and merge of attention heads (§3.2.2), drawn from the tape of one call.

Multi-head attention projects the queries once to C = H·D columns, then cuts them into H
heads of D columns by a reshape and a transpose, runs attention on every head at once, and
puts the heads back side by side before W^O. ``draw_heads`` runs a ``MultiHeadAttention`` on
a batch, finds those steps on its autograd tape (the Functions between the projection and
the attention, and between the attention and W^O) and draws the first sentence's tensor
after each, its columns coloured by the head they belong to: the shapes and the steps are
the code's own.

    B batch   T length   C d_model   H heads   D = C / H
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..autograd.grad_mode import enable_grad
from ..nn.attention import MultiHeadAttention
from ._render import pyplot, save_figure

CELL = 0.11  # inches a side


def head_steps(attention: MultiHeadAttention, x: Any) -> dict[str, list[tuple[str, tuple]]]:
    """The steps of ``attention(x, x, x)`` around the attention itself, read from its tape:
    {"split": [(step, shape), ...] from the projected queries to the heads,
     "merge": [(step, shape), ...] from the attention's output to W^O's}."""
    with enable_grad():
        out = attention(x, x, x)
    node, merge = out.creator, []
    merge.append(("$\\cdot W^O$ (w_o): mixes the heads", node.output_meta[0][0]))
    node, index = node.next_edges[0]
    while node.name in ("Reshape", "Transpose"):
        merge.append((_step(node), node.output_meta[index][0]))
        node, index = node.next_edges[0]
    if node.name != "ScaledDotProductAttention":
        raise RuntimeError(f"draw_heads: expected the attention before W^O's heads were "
                           f"merged, found {node.name} on the tape.")
    merge.append(("attention, each head alone", node.output_meta[0][0]))
    node, index = node.next_edges[0]  # the queries
    split = []
    while node.name in ("Reshape", "Transpose"):
        split.append((_step(node), node.output_meta[index][0]))
        node, index = node.next_edges[0]
    split.append(("queries $x W^Q$" + (", Split from K, V" if node.name == "Split" else ""),
                  node.output_meta[index][0]))
    return {"split": split[::-1], "merge": merge[::-1]}


def draw_heads(attention: MultiHeadAttention, x: Any, path: str | Path | None = None) -> Any:
    """The heads of ``attention`` cut out of the projected queries and put back together,
    for the first sentence of ``x`` (B, T, C) in self-attention. Returns the figure; writes
    it to ``path`` if given."""
    steps = head_steps(attention, x)
    H, D = attention.n_heads, attention.d_head
    plt = pyplot()
    figure = plt.figure()
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set_axis_off()
    colors = plt.get_cmap("tab10").colors
    # each step's tensor as the arrangement of its blocks: "row" (T, C) in one block,
    # "apart" (T, H, D) as H blocks side by side, "stacked" (H, T, D) as H blocks one above
    # another; the merge ends with W^O, which mixes the heads
    rows = [("Split: the C columns cut into H heads, the heads made a batch axis",
             steps["split"], ["row", "apart", "stacked"]),
            ("Merge: after attention ran on every head at once, the heads side by side again",
             steps["merge"], ["stacked", "apart", "row", "mixed"])]
    T = steps["split"][0][1][1]
    tallest = H * T * CELL + (H - 1) * 0.08
    y, width = 0.2, 0.0
    for title, row, layouts in rows[::-1]:
        if len(row) != len(layouts):
            raise RuntimeError(f"draw_heads: the tape's {title.lower()} has the steps "
                               f"{[s for s, _ in row]}, not the {len(layouts)} expected.")
        x0 = 0.3
        for i, ((step, shape), layout) in enumerate(zip(row, layouts, strict=True)):
            right = _blocks(axis, x0, y + 0.35, T, H, D, layout, colors)
            axis.text((x0 + right) / 2, y + 0.25, _fmt(shape), ha="center", va="top",
                      fontsize=7.5, family="DejaVu Sans Mono")
            axis.text((x0 + right) / 2, y + 0.05, step, ha="center", va="top", fontsize=7,
                      color="#444444")
            if i < len(row) - 1:
                axis.annotate("", (right + 0.5, y + 0.35 + tallest / 2),
                              (right + 0.12, y + 0.35 + tallest / 2),
                              arrowprops=dict(arrowstyle="-|>", color="#444444", lw=1,
                                              mutation_scale=10))
            x0 = right + 0.62
        width = max(width, x0)
        axis.text(0.3, y + 0.45 + tallest + 0.15, title, fontsize=9.5, fontweight="bold")
        y += tallest + 1.15
    B, _, C = steps["split"][0][1]
    axis.text(0.3, y + 0.25, "Multi-head attention: the heads split and merged (§3.2.2)",
              fontsize=10.5, fontweight="bold")
    sentence = "one sentence" if B == 1 else f"the first of B = {B} sentences"
    axis.text(0.3, y, f"H = {H} heads of D = {D} columns from C = {C}; {sentence}, one row "
              f"per token (T = {T}), the row of the first token dark", fontsize=8,
              color="#333333")
    figure.set_size_inches(width, y + 0.6)
    axis.set_xlim(0, width)
    axis.set_ylim(0, y + 0.6)
    return save_figure(figure, path)


def _blocks(axis: Any, x0: float, y0: float, T: int, H: int, D: int, layout: str,
            colors: Any) -> float:
    """Draw one (T, C) tensor arranged by ``layout`` from (x0, y0); return its right edge."""
    from matplotlib.patches import Rectangle

    tallest = H * T * CELL + (H - 1) * 0.08
    right = x0
    for h in range(H):
        color = colors[h % len(colors)] if layout != "mixed" else "#9a9a9a"
        if layout == "stacked":  # head h is the h-th matrix: head 0 on top
            left, bottom = x0, y0 + tallest - (h + 1) * T * CELL - h * 0.08
        else:
            gap = 0.08 if layout == "apart" else 0.0
            left, bottom = x0 + h * (D * CELL + gap), y0 + (tallest - T * CELL) / 2
        for t in range(T):
            for d in range(D):
                axis.add_patch(Rectangle((left + d * CELL, bottom + (T - 1 - t) * CELL), CELL,
                                         CELL, facecolor=color, alpha=0.45 if t else 1.0,
                                         edgecolor="white", lw=0.6))
        if layout != "mixed":
            label_y = bottom + T * CELL + 0.02
            if layout == "stacked":
                axis.text(left + D * CELL + 0.05, bottom + T * CELL / 2, f"head {h}",
                          fontsize=6.5, va="center", color=color)
            elif layout == "apart" or h == 0 or D * CELL > 0.3:
                axis.text(left + D * CELL / 2, label_y, f"head {h}" if layout == "apart"
                          or D * CELL > 0.3 else "", fontsize=6, ha="center", va="bottom",
                          color=color)
        right = max(right, left + D * CELL + (0.45 if layout == "stacked" else 0.0))
    return right


def _step(node: Any) -> str:
    if node.name == "Transpose":
        return f"transpose{tuple(node.axes)}"
    return f"reshape{tuple(node.shape)}"


def _fmt(shape: tuple) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"
