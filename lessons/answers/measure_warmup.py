"""Warmup or not, post-LN or pre-LN, on chapter 14's reversal task (chapter 9, exercise 3;
chapter 13, exercise 3).

The tiny model (2 + 2 layers, d_model = 32, 4 heads, no dropout) trains on the same batches
from the same initial weights, four ways: post-LN (the paper) or pre-LN, with chapter 14's
schedule (linear warmup to the peak over 100 steps) or at the peak rate from the first step.
Each run reports its training loss along the way (the mean of the 10 steps up to each step
shown) and, at the end, the fraction of 100 unseen sequences reversed exactly (greedy
decoding). Three settings: chapter 14's peak rate of 1e-3; 3e-3, where the first steps are
harsher; and 3e-3 with 6 + 6 layers instead of 2 + 2, deep enough for post-LN's trouble to
show. Three seeds (initial weights and batches) each.

    python lessons/answers/measure_warmup.py              # about 10 minutes on 2 cores
    python lessons/answers/measure_warmup.py --steps 300 --seeds 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import greedy_decode

PAD, BOS, EOS, VOCAB = 0, 1, 2, 13           # chapter 14's reversal task
SHOWN = (10, 50, 100, 300)                   # steps at which the loss is reported


def batch(generator: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Chapter 14's batch: n sequences of one random length 4..8, reversed."""
    length = int(generator.integers(4, 9))
    src = generator.integers(3, VOCAB, size=(n, length))
    tgt = src[:, ::-1]
    tgt_in = np.concatenate([np.full((n, 1), BOS), tgt], axis=1)
    tgt_out = np.concatenate([tgt, np.full((n, 1), EOS)], axis=1)
    return src, tgt_in, tgt_out


def train(pre_norm: bool, warmup: bool, lr: float, steps: int, seed: int = 0,
          n_layers: int = 2) -> dict[str, object]:
    """Losses per step and the exact-reversal rate of one run."""
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = TransformerConfig.named("tiny", VOCAB, p_dropout=0.0, pre_norm=pre_norm,
                                     n_layers=n_layers)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(1, steps + 1):
        optimizer.lr = lr * min(1.0, step / 100) if warmup else lr
        optimizer.zero_grad()
        src, tgt_in, tgt_out = batch(rng, 32)
        loss = F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    src, _, _ = batch(np.random.default_rng(123), 100)
    outputs = greedy_decode(model.eval(), src, BOS, EOS)
    exact = float(np.mean([out == list(s[::-1]) for out, s in zip(outputs, src, strict=True)]))
    return {"losses": losses, "exact": exact}


def smoothed(losses: list[float], step: int) -> float:
    """The mean loss of the 10 steps ending at ``step`` (counted from 1)."""
    return float(np.mean(losses[max(0, step - 10):step]))


SETTINGS = ((2, 1e-3), (2, 3e-3), (6, 3e-3))   # (layers per stack, peak learning rate)


def measure(steps: int = 1000, settings: tuple = SETTINGS, seeds: int = 3) -> dict:
    """(layers, lr, norm, schedule) -> [each seed's run: its losses and exact rate]."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)  # tiny matrices: one thread is fastest, and fair to a shared machine
    try:
        return {(layers, lr, norm, schedule): [
                    train(norm == "pre-LN", schedule == "warmup", lr, steps, seed, layers)
                    for seed in range(seeds)]
                for layers, lr in settings for norm in ("post-LN", "pre-LN")
                for schedule in ("warmup", "constant")}
    finally:
        mt.set_num_threads(threads)


def summary(runs: list[dict], steps: int) -> dict[str, list[float]]:
    """Per seed: the smoothed loss at each of SHOWN and at the last step, and the exact rate."""
    shown = [s for s in (*SHOWN, steps) if s <= steps]
    table = {f"loss at {s}": [smoothed(run["losses"], s) for run in runs] for s in shown}
    table["exactly reversed"] = [run["exact"] for run in runs]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    results = measure(args.steps, SETTINGS, args.seeds)
    header = list(summary(next(iter(results.values())), args.steps))
    print("| layers | peak lr | norm | schedule | " + " | ".join(header) + " |")
    print("|" + " --- |" * (len(header) + 4))
    for (layers, lr, norm, schedule), runs in results.items():
        columns = summary(runs, args.steps)
        print(f"| {layers} | {lr:g} | {norm} | {schedule} | " + " | ".join(
            f"{np.mean(v):.3f} ({min(v):.2f}-{max(v):.2f})" for v in columns.values()) + " |")
    print(f"mean (lowest-highest) of {args.seeds} seeds; {time.perf_counter() - start:.0f} s")

if __name__ == "__main__":
    main()
