"""Decoding's products with Wᵀ as a view of W and as a contiguous copy (functional/_layout.py).

    python bench/layout_products.py     # bench/results/layout_products.<machine>.json
    python bench/layout_products.py --checkpoint CKPT --data ../shared/data/multi30k

A linear layer multiplies its input (M, C_in) by Wᵀ, W stored (C_out, C_in). Part 1 times
that product for the `small` model's decoding shapes (its attention projections, feed-forward
layers and 8,000-word output projection) at growing row counts M, single-threaded as a
decoding share runs it: Wᵀ as the view W.T, and Wᵀ copied contiguous, alternating call by
call, the minimum of --repeats rounds. Part 2, given a trained checkpoint and Multi30k:
`translate` over the first --sentences test sentences, greedy and beam 4, with the copies
(frozen_weights' default) and without (MAX_ROWS = -1), alternating run by run, the median of
--runs; the translations must be the same.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from machine import commit, kind, machine
from threadpoolctl import threadpool_limits

SHAPES = [(256, 768), (256, 256), (256, 1024), (1024, 256), (256, 8000)]  # (C_in, C_out)
ROWS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--data", default=str(Path(__file__).parents[2] / "shared" / "data"
                                               / "multi30k"))
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--output", help="JSON (default bench/results/"
                                         "layout_products.<machine>.json)")
    return parser.parse_args(argv)


def products(repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    with threadpool_limits(1):
        for C_in, C_out in SHAPES:
            W = rng.standard_normal((C_out, C_in), dtype=np.float32)
            contiguous = np.ascontiguousarray(W.T)
            for M in ROWS:
                x = rng.standard_normal((M, C_in), dtype=np.float32)
                out = np.empty((M, C_out), dtype=np.float32)
                calls = max(1, int(2e8 // (2 * M * C_in * C_out)))
                best = {"view": float("inf"), "contiguous": float("inf")}
                for _ in range(repeats):
                    for name, wt in (("view", W.T), ("contiguous", contiguous)):
                        np.matmul(x, wt, out=out)
                        start = time.perf_counter()
                        for _ in range(calls):
                            np.matmul(x, wt, out=out)
                        best[name] = min(best[name], (time.perf_counter() - start) / calls)
                rows.append({"C_in": C_in, "C_out": C_out, "rows": M,
                             "view_us": best["view"] * 1e6,
                             "contiguous_us": best["contiguous"] * 1e6,
                             "speed_up": best["view"] / best["contiguous"]})
                print(f"  ({M:>4}, {C_in}) @ ({C_in}, {C_out}): W.T {best['view'] * 1e6:8.0f} µs"
                      f"   contiguous {best['contiguous'] * 1e6:8.0f} µs"
                      f"   {best['view'] / best['contiguous']:.2f}x", flush=True)
    return rows


def translations(args) -> list[dict]:
    from minitransformer.functional import _layout
    from minitransformer.translation.translator import load_translator, translate

    model, tokenizer = load_translator(args.checkpoint)
    path = Path(args.data) / "test_2016_flickr.de.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        sentences = [line.strip() for line in f][: args.sentences]
    cases, max_rows = [], _layout.MAX_ROWS
    for beam in (1, 4):
        seconds: dict[bool, list[float]] = {True: [], False: []}
        outputs = {}
        translate(model, tokenizer, sentences[:64], beam)  # warm-up
        for run in range(args.runs):
            for copies in ((True, False) if run % 2 == 0 else (False, True)):
                _layout.MAX_ROWS = max_rows if copies else -1
                start = time.perf_counter()
                outputs[copies] = translate(model, tokenizer, sentences, beam)
                seconds[copies].append(time.perf_counter() - start)
        _layout.MAX_ROWS = max_rows
        ratios = [v / c for c, v in zip(seconds[True], seconds[False], strict=True)]
        case = {"beam": beam, "sentences": len(sentences),
                "copies_s": statistics.median(seconds[True]),
                "view_s": statistics.median(seconds[False]),
                "speed_up": statistics.median(ratios),
                "same_translations": outputs[True] == outputs[False]}
        cases.append(case)
        print(f"  translate, beam {beam}: with copies {case['copies_s']:.3f} s, without "
              f"{case['view_s']:.3f} s, {case['speed_up']:.3f}x, same "
              f"{case['same_translations']}", flush=True)
    return cases


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    print("products, one thread:", flush=True)
    result = {"machine": machine(), "commit": commit(), "products": products(args.repeats)}
    if args.checkpoint:
        print(f"translate ({args.checkpoint}):", flush=True)
        result["translate"] = translations(args)
    default = Path(__file__).parent / "results" / f"layout_products.{kind()}.json"
    output = Path(args.output) if args.output else default
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main(sys.argv[1:])
