"""Plots: attention heatmaps, the positional encoding, the learning-rate schedule, training
curves from a run's log, gradient-check errors.

Each function draws with matplotlib, saves a picture when given a path, and returns the
figure, so a notebook shows it and a script can keep it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import to_numpy
from ._render import pyplot, save_figure


def attention_heads(weights: Any, queries: Sequence[str], keys: Sequence[str],
                    title: str = "", path: str | Path | None = None, columns: int = 4,
                    average: bool = False) -> Any:
    """One heatmap per head of one sentence's weights (H, T, S), labelled with the tokens:
    queries down the side, keys along the top. With ``average``, a last panel shows the mean
    over the heads, each row's largest entry marked with a dot: the alignment that
    ``translate --alignment`` reads from the same weights."""
    weights = to_numpy(getattr(weights, "data", weights))
    if weights.ndim == 2:
        weights = weights[None]
    if weights.shape[1:] != (len(queries), len(keys)):
        raise ValueError(f"attention_heads: weights of shape {weights.shape} do not match "
                         f"{len(queries)} query and {len(keys)} key labels; pass one "
                         "sentence's (heads, queries, keys) weights.")
    n_heads = weights.shape[0]
    panels = [(weights[h], f"head {h}") for h in range(n_heads)]
    if average:
        panels.append((weights.mean(axis=0), "mean over heads; • the largest of each row"))
    columns = min(columns, len(panels))
    rows = math.ceil(len(panels) / columns)
    cell = 0.32
    width = max(3.0, cell * len(keys) + 1.2) * columns
    height = max(2.5, cell * len(queries) + 1.2) * rows
    plt = pyplot()
    figure, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False)
    for n, axis in enumerate(axes.ravel()):
        if n >= len(panels):
            axis.axis("off")
            continue
        panel, name = panels[n]
        axis.imshow(panel, cmap="viridis", vmin=0.0, vmax=1.0, aspect="equal")
        axis.set_xticks(range(len(keys)), keys, rotation=90, fontsize=8)
        axis.set_yticks(range(len(queries)), queries, fontsize=8)
        axis.set_title(name, fontsize=9)
        if average and n == n_heads and panel.size:
            axis.plot(panel.argmax(axis=1), np.arange(len(queries)), "o", color="white",
                      markersize=3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return save_figure(figure, path)


def schedule(rates: Sequence[float], title: str = "learning rate",
             path: str | Path | None = None) -> Any:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 3.4))
    axis.plot(np.arange(1, len(rates) + 1), rates)
    axis.set_xlabel("step")
    axis.set_ylabel("learning rate")
    axis.set_title(title)
    figure.tight_layout()
    return save_figure(figure, path)


def training_curves(log: str | Path, path: str | Path | None = None) -> Any:
    """Training loss per step and validation loss and BLEU from a run's ``log.jsonl``."""
    lines = Path(log).read_text(encoding="utf-8").splitlines()  # JSON is UTF-8, not the locale's
    records = [json.loads(line) for line in lines if line.strip()]
    steps = [r for r in records if "loss" in r]
    validations = [r["validation"] for r in records if "validation" in r]
    plt = pyplot()
    figure, (loss_axis, bleu_axis) = plt.subplots(1, 2, figsize=(11, 3.8))
    loss_axis.plot([r["step"] for r in steps], [r["loss"] for r in steps], lw=0.6, alpha=0.6,
                   label="training (label-smoothed)")
    loss_axis.plot([v["step"] for v in validations], [v["valid_loss"] for v in validations],
                   "o-", label="validation")
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("loss per token")
    loss_axis.legend()
    with_bleu = [v for v in validations if "valid_bleu" in v]
    bleu_axis.plot([v["step"] for v in with_bleu], [v["valid_bleu"] for v in with_bleu], "o-",
                   color="tab:green")
    bleu_axis.set_xlabel("step")
    bleu_axis.set_ylabel("validation BLEU (greedy)")
    figure.tight_layout()
    return save_figure(figure, path)


def positional_encoding(d_model: int = 64, length: int = 100,
                        path: str | Path | None = None) -> Any:
    """The sinusoidal table (§3.5) as a heatmap: positions along, dimensions up."""
    from ..nn.positional import sinusoidal_table

    table = to_numpy(sinusoidal_table(length, d_model))
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 3.6))
    image = axis.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower")
    axis.set_xlabel("position")
    axis.set_ylabel("dimension")
    axis.set_title(f"Sinusoidal positional encoding, d_model = {d_model}")
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    return save_figure(figure, path)


def gradcheck_errors(rows: Sequence[dict], threshold: float = 1e-6,
                     path: str | Path | None = None) -> Any:
    """One bar per gradient-check row (``minitransformer gradcheck --json``): its max relative
    error on a log scale, against the pass threshold."""
    errors = [max(row["max_rel_error"], 1e-16) for row in rows]
    labels = [f"{row['name']} {row.get('shapes', '')}"[:60] for row in rows]
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 0.22 * len(rows) + 1.2))
    colors = ["tab:green" if row["passed"] else "tab:red" for row in rows]
    axis.barh(range(len(rows)), errors, color=colors)
    axis.set_xscale("log")
    axis.axvline(threshold, color="black", ls="--", lw=1, label=f"threshold {threshold:g}")
    axis.set_yticks(range(len(rows)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("max relative error (float64, central differences)")
    axis.legend(loc="lower right")
    figure.tight_layout()
    return save_figure(figure, path)
