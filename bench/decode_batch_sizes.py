"""Beam-4 decoding beside PyTorch at several batch sizes, in one session.

    python bench/decode_batch_sizes.py             # about six minutes on 2 cores

compare_torch.py decodes the 500 test sentences in batches of the size minitransformer's
translate takes (128 sentences per CPU thread: 256 on 2 cores); earlier runs used 100. This
script shows what the size does to each library: every (library, batch size) pair decodes all
the sentences once per round, the pairs in turn (the order reversed every other round), and
the medians say which size suits which library, and the ratio at each size and at each
library's own best size.

Writes JSON (--output, default bench/results/decode_batch_sizes.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from compare_torch import (
    CHECKPOINT,
    IMPLS,
    SHARED,
    decode_all,
    decoding_sources,
    machine_info,
    model_pair,
    padded_batches,
    pin_threads,
)

HERE = Path(__file__).resolve().parent


def measure(args) -> dict:
    ours, sources, what = decoding_sources(args)
    batches = {size: padded_batches(sources, size) for size in args.sizes}
    models = model_pair(ours, "cpu")
    for impl in IMPLS:  # warm-up, as compare_torch.py
        decode_all(impl, models[impl], batches[args.sizes[0]][:1], "beam", True, args)
    print(f"  {what}", flush=True)
    pairs = [(impl, size) for size in args.sizes for impl in IMPLS]
    seconds: dict[tuple, list[float]] = {pair: [] for pair in pairs}
    hyps: dict[tuple, list] = {}
    for round_ in range(args.repeats):
        for impl, size in (pairs if round_ % 2 == 0 else pairs[::-1]):
            elapsed, hyps[impl, size] = decode_all(impl, models[impl], batches[size], "beam",
                                                   True, args)
            seconds[impl, size].append(elapsed)
        print(f"  round {round_}: " + ", ".join(
            f"{impl} {size} {seconds[impl, size][-1]:.2f} s" for impl, size in pairs), flush=True)
    median = {pair: statistics.median(s) for pair, s in seconds.items()}
    best = {impl: min(args.sizes, key=lambda size: median[impl, size]) for impl in IMPLS}
    return {
        "inputs": what, "beam_size": args.beam, "repeats": args.repeats, "sizes": args.sizes,
        "seconds": {f"{impl} {size}": seconds[impl, size] for impl, size in pairs},
        "ratio_at_size": {str(size): median["torch", size] / median["minitransformer", size]
                          for size in args.sizes},
        "best_size": best,
        "ratio_at_best_sizes": (median["torch", best["torch"]]
                                / median["minitransformer", best["minitransformer"]]),
        "same_hypotheses": all(h == hyps[pairs[0]] for h in hyps.values()),
    }


def markdown(results: dict) -> str:
    m = results["measured"]
    lines = ["| batch size | minitransformer s | torch s | ratio (torch time / ours) |",
             "| ---: | ---: | ---: | ---: |"]
    for size in m["sizes"]:
        ours = statistics.median(m["seconds"][f"minitransformer {size}"])
        theirs = statistics.median(m["seconds"][f"torch {size}"])
        ratio = m["ratio_at_size"][str(size)]
        lines.append(f"| {size} | {ours:.2f} | {theirs:.2f} | {ratio:.2f} |")
    lines.append(f"\nEach at its best size (minitransformer {m['best_size']['minitransformer']}, "
                 f"torch {m['best_size']['torch']}): {m['ratio_at_best_sizes']:.2f}; the same "
                 f"hypotheses at every size and in both: {m['same_hypotheses']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 128, 200, 250, 256, 500])
    parser.add_argument("--repeats", type=int, default=4, help="rounds (even: each order "
                        "as often)")
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--output", default=str(HERE / "results" / "decode_batch_sizes.json"))
    args = parser.parse_args(argv)
    args.threads, args.device, args.beam, args.alpha, args.vocab_size = 2, "cpu", 4, 0.6, 8000
    pin_threads(args.threads, argv)
    results = {"machine": machine_info(args), "measured": measure(args)}
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
