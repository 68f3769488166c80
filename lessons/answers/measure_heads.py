"""What h heads buy over one head of the full width, measured (chapter 7, question 5).

A task in which every position must read two other positions at once: the input is a random
sequence of tokens, and at each inner position i the model predicts both neighbours,
x[i-1] and x[i+1]. The control task needs one relation only: predict the left neighbour.

The model is one attention layer of the library, post-LN as in the paper:

    x = Embedding(ids)·√d_model + PE
    x = LayerNorm(x + MultiHeadAttention(x, x, x))
    x = LayerNorm(x + FFN(x))              (left out in the "attention only" variant)
    logits = Linear(x)                     one V-way prediction per neighbour

d_model = 32 for every h, so h = 1, 2 and 4 have exactly the same parameters; only the split
of the width into heads differs. Each model trains for the same steps on the same batches
(Adam, warmup), and is scored on 500 held-out sequences: the fraction of neighbour tokens
predicted right. Three seeds each.

    python lessons/answers/measure_heads.py            # about 90 s on 2 cores
    python lessons/answers/measure_heads.py --steps 200 --seeds 1     # a quick look
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import (
    Embedding,
    LayerNorm,
    Linear,
    Module,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from minitransformer.optim import Adam

V, T, D_MODEL, PAD = 16, 10, 32, 0      # tokens 1..15; 0 marks a target that is not scored
HEADS = (1, 2, 4)
VARIANTS = (("neighbours", True), ("neighbours", False), ("left", True))


class OneLayer(Module):
    """Embedding, positions, one (multi-head) self-attention sub-layer, optionally the FFN,
    and a linear read-out of ``n_out`` V-way predictions per position."""

    def __init__(self, n_heads: int, n_out: int, ffn: bool):
        super().__init__()
        self.embed = Embedding(V, D_MODEL)
        self.positions = PositionalEncoding(D_MODEL, 64)
        self.attn = MultiHeadAttention(D_MODEL, n_heads)
        self.attn_norm = LayerNorm(D_MODEL)
        self.ffn = PositionwiseFeedForward(D_MODEL, 4 * D_MODEL) if ffn else None
        self.ffn_norm = LayerNorm(D_MODEL) if ffn else None
        self.readout = Linear(D_MODEL, n_out * V)
        self.n_out = n_out

    def forward(self, ids):
        x = self.positions(self.embed(ids) * math.sqrt(D_MODEL))          # (B, T, C)
        x = self.attn_norm(x + self.attn(x, x, x))                        # (B, T, C)
        if self.ffn is not None:
            x = self.ffn_norm(x + self.ffn(x))
        B, L, _ = x.shape
        return self.readout(x).reshape(B, L, self.n_out, V)               # (B, T, n_out, V)


def batch(rng: np.random.Generator, n: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (n, T) and targets (n, T, 2) = (left, right neighbour), PAD at the ends;
    for the task "left", targets (n, T, 1)."""
    x = rng.integers(1, V, size=(n, T))
    targets = np.full((n, T, 2), PAD)
    targets[:, 1:-1, 0] = x[:, :-2]                                       # left neighbour
    targets[:, 1:-1, 1] = x[:, 2:]                                        # right neighbour
    return x, (targets[..., :1] if task == "left" else targets)


def accuracy(model: OneLayer, task: str, seed: int) -> float:
    x, y = batch(np.random.default_rng(10_000 + seed), 500, task)
    with mt.no_grad():
        predicted = model.eval()(x).numpy().argmax(axis=-1)
    model.train()
    scored = y != PAD
    return float((predicted == y)[scored].mean())


def train(n_heads: int, task: str, ffn: bool, seed: int, steps: int,
          checkpoints: tuple[int, ...]) -> dict[int | str, Any]:
    """Held-out accuracy after each of ``checkpoints`` steps; under "weights", the trained
    model's attention to the neighbours (``attention_to_neighbours``)."""
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = OneLayer(n_heads, 1 if task == "left" else 2, ffn)
    optimizer = Adam(model.parameters(), lr=3e-3)
    scores: dict[int | str, Any] = {}
    for step in range(1, steps + 1):
        optimizer.lr = 3e-3 * min(1.0, step / 100)
        optimizer.zero_grad()
        x, y = batch(rng, 32, task)
        F.cross_entropy(model(x), y, ignore_index=PAD).backward()
        optimizer.step()
        if step in checkpoints:
            scores[step] = accuracy(model, task, seed)
    scores["weights"] = attention_to_neighbours(model, seed)
    return scores


def attention_to_neighbours(model: OneLayer, seed: int) -> list[tuple[float, float, float]]:
    """Per head, the mean weight of the inner positions on (left neighbour, right neighbour,
    itself), on held-out sequences."""
    x, _ = batch(np.random.default_rng(10_000 + seed), 500, "neighbours")
    model.attn.record_weights = True
    with mt.no_grad():
        model.eval()(x)
    model.train()
    model.attn.record_weights = False
    w = model.attn.weights.numpy()                                        # (B, H, T, S)
    i = np.arange(1, T - 1)
    return [(float(w[:, h, i, i - 1].mean()), float(w[:, h, i, i + 1].mean()),
             float(w[:, h, i, i].mean())) for h in range(w.shape[1])]


def measure(steps: int = 1200,
            seeds: int = 3) -> dict[tuple[str, bool, int], dict[int, list[float]]]:
    """(task, ffn, heads) -> {checkpoint: [accuracy of each seed], "weights": [attention to
    the neighbours of each seed's model]}."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)  # tiny matrices: one thread is fastest, and fair to a shared machine
    checkpoints = (steps // 4, steps // 2, steps)
    results = {}
    try:
        for task, ffn in VARIANTS:
            for heads in HEADS:
                runs = [train(heads, task, ffn, seed, steps, checkpoints)
                        for seed in range(seeds)]
                results[task, ffn, heads] = {c: [r[c] for r in runs]
                                             for c in (*checkpoints, "weights")}
    finally:
        mt.set_num_threads(threads)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    results = measure(args.steps, args.seeds)
    checkpoints = [c for c in next(iter(results.values())) if c != "weights"]
    print("| task | FFN | heads | " + " | ".join(f"{c} steps" for c in checkpoints) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in checkpoints) + " |")
    for (task, ffn, heads), scores in results.items():
        print(f"| {task} | {'yes' if ffn else 'no'} | {heads} | " + " | ".join(
            f"{np.mean(scores[c]):.3f} ({min(scores[c]):.2f}-{max(scores[c]):.2f})"
            for c in checkpoints) + " |")
    print(f"held-out accuracy, mean (lowest-highest) of {args.seeds} seeds\n")
    print("mean weight of the inner positions on their left neighbour, right neighbour and "
          "themselves, per head, seed 0, after training:")
    for (task, ffn, heads), scores in results.items():
        if task == "neighbours":
            print(f"  {'with' if ffn else 'without'} FFN, {heads} head(s): " + "; ".join(
                f"{left:.2f} {right:.2f} {itself:.2f}"
                for left, right, itself in scores["weights"][0]))
    print(f"{time.perf_counter() - start:.0f} s")

if __name__ == "__main__":
    main()
