"""Does the way the two decoders alternate change their ratio? Both ways, in one session.

    python bench/alternation_check.py               # about three minutes on 2 cores

compare_torch.py times beam-4 decoding (with the cache) of 500 test sentences in batches of
100 by alternating the two libraries batch by batch: every batch is decoded by both, one
straight after the other. Earlier it alternated whole runs: all 500 sentences by one, then all
by the other. Switching library at every batch could itself favour one side (caches, threads
waking up), so this script measures the ratio (PyTorch's time / minitransformer's) both ways,
interleaved: each of --repeats rounds makes one pair of whole runs and one batch-by-batch run.
If the batch-by-batch ratios are no higher than the whole-run ones, the switching does not
favour minitransformer; the batch-by-batch ratios should only spread less.

Writes JSON (--output, default bench/results/alternation_check.json) and prints a table.
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
    decode_alternating,
    decoding_inputs,
    machine_info,
    model_pair,
    pin_threads,
)

HERE = Path(__file__).resolve().parent


def measure(args) -> dict:
    ours, batches, what = decoding_inputs(args)
    models = model_pair(ours, args.device)
    for impl in IMPLS:  # warm-up, as compare_torch.py
        decode_all(impl, models[impl], batches[:1], "beam", True, args)
    print(f"  {what}, batches of {args.decode_batch}", flush=True)
    rounds = []
    for rep in range(args.repeats):
        whole = {}
        for impl in (IMPLS if rep % 2 == 0 else IMPLS[::-1]):
            whole[impl], _ = decode_all(impl, models[impl], batches, "beam", True, args)
        by_batch = decode_alternating(models, batches, "beam", True, args, rep)
        rounds.append({"whole_s": whole,
                       "by_batch_s": {impl: by_batch[impl][0] for impl in IMPLS},
                       "whole_ratio": whole["torch"] / whole["minitransformer"],
                       "by_batch_ratio": by_batch["torch"][0] / by_batch["minitransformer"][0]})
        print(f"  round {rep}: whole runs {rounds[-1]['whole_ratio']:.3f}, "
              f"batch by batch {rounds[-1]['by_batch_ratio']:.3f}", flush=True)
    summary = {}
    for way in ("whole_ratio", "by_batch_ratio"):
        ratios = [r[way] for r in rounds]
        summary[way] = {"median": statistics.median(ratios), "min": min(ratios),
                        "max": max(ratios)}
    return {"inputs": what, "batch_size": args.decode_batch, "beam_size": args.beam,
            "rounds": rounds, "summary": summary}


def markdown(result: dict) -> str:
    lines = ["| alternation | ratio, median (min–max) |", "| --- | ---: |"]
    names = {"whole_ratio": "whole runs of all sentences",
             "by_batch_ratio": "batch by batch (compare_torch.py)"}
    for way, name in names.items():
        s = result["summary"][way]
        lines.append(f"| {name} | {s['median']:.3f} ({s['min']:.3f}–{s['max']:.3f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--decode-batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=6, help="rounds (even: each side "
                        "goes first as often)")
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--output", default=str(HERE / "results" / "alternation_check.json"))
    args = parser.parse_args(argv)
    args.threads, args.device, args.beam, args.alpha = 2, "cpu", 4, 0.6
    args.vocab_size = 8000
    pin_threads(args.threads, argv)
    result = {"machine": machine_info(args), **measure(args)}
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
