"""What the trainer's way of averaging over a step's tokens costs: three steps, one gradient.

    python bench/loss_scaling.py                    # bench/results/loss_scaling.<machine>.{json,md}
    python bench/loss_scaling.py --lengths 16 64 --repeats 12

A training step of several batches wants the gradient of the mean token loss over all of the
step's target tokens. Three ways to a step (zero grads, forward, loss, backward, the global
gradient norm as the trainer measures it, Adam), on one batch of random ids:

    plain       loss = cross_entropy(...) (the batch's mean); loss.backward()
                (the step of compare_torch.py: no norm, no token count)
    scaled      (loss · tokens).backward(), then every gradient divided by the step's tokens:
                the trainer before 19502cb
    normalizer  cross_entropy(..., normalizer=step tokens).backward(): the trainer now

On the CPU the loss makes its gradient in forward for dout = 1 (functional/loss.py); the
scaled step's dout is the token count, so its backward makes one more pass over the (N, V)
gradient of the logits, and the division one more over every gradient. The three alternate
step by step; each is reported as the median of its steps, with the difference to the plain
one.
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
from minitransformer.optim import Adam, clip_grad_norm

PAD_ID = 0


def steps(model, optimizer, batch) -> dict:
    """Each variant's step on ``batch`` (src, tgt_in, tgt_out); the step's tokens: the
    batch's target tokens (one batch a step, as the Multi30k recipe's)."""
    src, tgt_in, tgt_out = batch
    n_tokens = int((tgt_out != PAD_ID).sum())

    def loss_of(**options):
        return F.cross_entropy(model(src, tgt_in), tgt_out, 0.1, ignore_index=PAD_ID, **options)

    def plain():
        optimizer.zero_grad()
        loss_of().backward()
        optimizer.step()

    def scaled():
        optimizer.zero_grad()
        token_loss = loss_of() * n_tokens
        token_loss.backward()
        token_loss.item()
        for p in optimizer.params:
            if p.grad is not None:
                p.grad *= 1.0 / n_tokens
        clip_grad_norm(optimizer.params, None)
        optimizer.step()

    def normalizer():
        optimizer.zero_grad()
        share = loss_of(normalizer=n_tokens)
        share.backward()
        share.item()
        clip_grad_norm(optimizer.params, None)
        optimizer.step()
    return {"plain": plain, "scaled": scaled, "normalizer": normalizer}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=10, help="timed steps of each variant")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"
                                                / f"loss_scaling.{kind()}.json"))
    args = parser.parse_args(argv)

    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    config = TransformerConfig.named(args.config, args.vocab_size)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=1e-4)
    rows = []
    for length in args.lengths:
        B = max(1, args.tokens // length)
        src = rng.integers(4, args.vocab_size, size=(B, length))
        tgt = rng.integers(4, args.vocab_size, size=(B, length + 1))
        variants = steps(model, optimizer, (src, np.ascontiguousarray(tgt[:, :-1]),
                                            np.ascontiguousarray(tgt[:, 1:])))
        seconds = {name: [] for name in variants}
        for step in variants.values():  # warm-up
            step()
        for _ in range(args.repeats):
            for name, step in variants.items():
                start = time.perf_counter()
                step()
                seconds[name].append(time.perf_counter() - start)
        median = {name: statistics.median(s) for name, s in seconds.items()}
        row = {"length": length, "batch": B,
               "median_s": median, "min_s": {n: min(s) for n, s in seconds.items()},
               "max_s": {n: max(s) for n, s in seconds.items()}}
        rows.append(row)
        print(f"L = {length}: " + ", ".join(f"{n} {1e3 * m:.1f} ms" for n, m in median.items()),
              flush=True)
    result = {"benchmark": "the trainer's step: a loss scaled by tokens against the normalizer",
              "config_name": args.config, "vocab_size": args.vocab_size,
              "machine": machine(), "commit": commit(), "threads": mt.get_num_threads(),
              "repeats": args.repeats, "rows": rows}
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n")
    output.with_suffix(".md").write_text(report(result))
    print(f"wrote {output} and {output.with_suffix('.md').name}")


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"{result['config_name']}, vocabulary {result['vocab_size']}, "
             f"{result['threads']} threads; {m.get('cpu', '?')} ({m.get('blas', '?')}); "
             f"commit {result['commit']}; median of {result['repeats']} steps each, "
             "the three alternating.", "",
             "| L | batch | plain ms | scaled ms | normalizer ms | scaled − normalizer ms |",
             "|---|-------|----------|-----------|---------------|------------------------|"]
    for row in result["rows"]:
        ms = {n: 1e3 * s for n, s in row["median_s"].items()}
        lines.append(f"| {row['length']} | {row['batch']} | {ms['plain']:.1f} | "
                     f"{ms['scaled']:.1f} | {ms['normalizer']:.1f} | "
                     f"{ms['scaled'] - ms['normalizer']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
