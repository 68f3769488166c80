"""Time one training step of the `small` Transformer: forward, backward and Adam update.

    python bench/step.py                      # a table, and bench/results/step.<machine>.json
    python bench/step.py --repeats 10 --lengths 16 32 64

Each case is a batch of random token ids at one sequence length (source = target length),
about --tokens target tokens per batch, the `small` configuration with a shared vocabulary of
--vocab-size, float32, dropout on (training mode). The first step is a warm-up; the median,
min and max of the following --repeats steps are reported, with target tokens per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import minitransformer as mt  # first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads

# isort: split
import numpy as np
from machine import commit, kind, machine

from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam


def time_steps(model, optimizer, src, tgt_in, tgt_out, repeats):
    seconds = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=0)
        loss.backward()
        optimizer.step()
        if i > 0:  # the first step warms caches and allocators up
            seconds.append(time.perf_counter() - start)
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"
                                                / f"step.{kind()}.json"))
    args = parser.parse_args(argv)

    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    config = TransformerConfig.named(args.config, args.vocab_size)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=1e-4)
    rows = []
    print(f"{args.config}: {model.num_parameters():,} parameters, vocabulary {args.vocab_size}, "
          f"device {mt.current_device()}")
    print(f"{'length':>6} {'batch':>6} {'tokens':>7} {'median s':>9} {'min s':>7} {'max s':>7} "
          f"{'tokens/s':>9}")
    for length in args.lengths:
        batch = max(1, args.tokens // length)
        src = rng.integers(4, args.vocab_size, size=(batch, length))
        tgt = rng.integers(4, args.vocab_size, size=(batch, length + 1))
        seconds = time_steps(model, optimizer, src, tgt[:, :-1], tgt[:, 1:], args.repeats)
        median = statistics.median(seconds)
        row = {"length": length, "batch": batch, "target_tokens": batch * length,
               "median_s": median, "min_s": min(seconds), "max_s": max(seconds),
               "tokens_per_s": batch * length / median}
        rows.append(row)
        print(f"{length:>6} {batch:>6} {row['target_tokens']:>7} {median:>9.3f} "
              f"{row['min_s']:>7.3f} {row['max_s']:>7.3f} {row['tokens_per_s']:>9.0f}",
              flush=True)
    result = {
        "benchmark": "training step (forward, backward, Adam) of minitransformer",
        "config": config.to_dict(), "config_name": args.config,
        "num_parameters": model.num_parameters(), "device": mt.current_device(),
        "machine": machine(), "commit": commit(),
        "repeats": args.repeats, "rows": rows,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
