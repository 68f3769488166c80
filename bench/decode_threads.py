"""What the second core gives decoding, beside PyTorch: one thread against two, and two
threads as shares of sentences (what `translate` does: the first share on the calling thread,
the others on worker processes), as shares all on threads, or as one share with its products
and blocks split over the threads.

    python bench/decode_threads.py        # bench/results/decode_threads.<machine>.json

The batches of bench/compare_torch.py's decoding (its --checkpoint and Multi30k's first 500
test sentences where they are, else a random-weight model on random sources), sorted by
length: with one thread the first batch of 128 sentences, with two the first batch of 256.
Greedy and beam 4 with the cache; every case alternates with PyTorch run by run (--runs,
the median kept; the first round warms up, and starts the worker process). With two threads
minitransformer runs three ways: as `translate` does, in shares, one per core
(``decode._on_cores``: the second on a worker process, ``translation/_processes.py``); in
shares on threads (``set_decode_processes(False)``); and as "one share" (``MIN_SHARE`` above
the batch), its products and blocks split over the two threads as PyTorch splits its
operations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from compare_torch import (
    CHECKPOINT,
    SHARED,
    decode_batch,
    decoding_sources,
    model_pair,
    padded_batches,
)
from machine import commit, kind, machine

import minitransformer as mt
from minitransformer.translation import decode, set_decode_processes

HERE = Path(__file__).resolve().parent
SHARE = decode.MIN_SHARE  # sentences: translate's shares, one per core


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--output", help="JSON (default bench/results/"
                                         "decode_threads.<machine>.json)")
    return parser.parse_args(argv)


def timed_case(models: dict, batch, algorithm: str, args, ways: dict) -> dict:
    """{way: median seconds} for ways {name: (implementation, MIN_SHARE, shares on
    processes)}, alternating."""
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    outputs = {}
    for run in range(args.runs + 1):  # the first round warms up
        for way in (list(ways) if run % 2 == 0 else list(ways)[::-1]):
            impl, min_share, processes = ways[way]
            decode.MIN_SHARE = min_share
            set_decode_processes(processes)
            start = time.perf_counter()
            outputs[way] = decode_batch(impl, models[impl], batch, algorithm, True, args)
            if run:
                seconds[way].append(time.perf_counter() - start)
    decode.MIN_SHARE = SHARE
    set_decode_processes(True)
    same = all(out == outputs["torch"] for out in outputs.values())
    return {"seconds": {way: statistics.median(s) for way, s in seconds.items()},
            "same_outputs": same}



def main(argv: list[str]) -> None:
    args = parse_args(argv)
    args.device, args.beam, args.alpha = "cpu", 4, 0.6
    ours, sources, what = decoding_sources(args)
    models = model_pair(ours, "cpu")
    print(what, flush=True)
    cases = []
    for threads, size in ((1, 128), (2, 256)):
        mt.set_num_threads(threads)
        torch.set_num_threads(threads)
        batch = padded_batches(sources, size)[0]
        ways = {"minitransformer": ("minitransformer", SHARE, True),
                "torch": ("torch", 0, True)}
        if threads > 1:
            ways["shares on threads"] = ("minitransformer", SHARE, False)
            ways["one share"] = ("minitransformer", 10**9, True)
        for algorithm in ("greedy", "beam"):
            case = {"threads": threads, "sentences": len(batch), "algorithm": algorithm,
                    **timed_case(models, batch, algorithm, args, ways)}
            s = case["seconds"]
            case["ratio"] = {way: s["torch"] / s[way] for way in s if way != "torch"}
            cases.append(case)
            print(f"  {threads} thread(s), {len(batch)} sentences, {algorithm}: "
                  + ", ".join(f"{way} {t:.3f} s" for way, t in s.items())
                  + "; torch / minitransformer: "
                  + ", ".join(f"{way} {r:.2f}" for way, r in case["ratio"].items()),
                  flush=True)
    result = {"machine": machine(), "commit": commit(), "data": what, "cases": cases}
    default = HERE / "results" / f"decode_threads.{kind()}.json"
    output = Path(args.output) if args.output else default
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main(sys.argv[1:])
