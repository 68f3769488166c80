"""How many sentences a batch of ``translate`` should hold: beam-4 and greedy decoding of the
Multi30k test set at several batch sizes, on every thread and on one.

    python bench/translate_batch.py                # about six minutes on 2 cores

``minitransformer.translator.translate`` (what ``evaluate``, ``translate`` and the validation
BLEU of training call) sorts the sentences by length and decodes them in batches; on the CPU
each batch is split into one share per worker thread. A decoding step costs a few milliseconds
of fixed work per share, whatever its size, so small shares waste time, and very large ones
carry long sentences that the rest of their batch waits for. This script times the whole test
set at each batch size, the sizes alternating in order from round to round, and checks that
every batch size gives the same translations.

Writes JSON (--output, default bench/results/translate_batch.json) and prints a Markdown table.
Needs the trained Multi30k checkpoint (--checkpoint) and the data (--data).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from machine import machine

import minitransformer as mt
from minitransformer.checkpoint import load_checkpoint, restore_model
from minitransformer.corpus import load_corpus
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.translator import translate

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data" / "multi30k"
CHECKPOINT = HERE / "results" / "multi30k-epyc-4" / "checkpoints" / "averaged.npz"


def time_sizes(model, tokenizer, sentences: list[str], beam: int, sizes: list[int],
               repeats: int) -> dict:
    """{size: [seconds per round]} and whether every size translated alike."""
    translate(model, tokenizer, sentences[:32], beam)  # warm-up
    seconds: dict[int, list[float]] = {size: [] for size in sizes}
    outputs: dict[int, list[str]] = {}
    for round_ in range(repeats):
        for size in (sizes if round_ % 2 == 0 else sizes[::-1]):
            start = time.perf_counter()
            outputs[size] = translate(model, tokenizer, sentences, beam, batch_size=size)
            seconds[size].append(time.perf_counter() - start)
    same = all(out == outputs[sizes[0]] for out in outputs.values())
    return {"seconds": {str(size): s for size, s in seconds.items()}, "same_translations": same}


def markdown(results: dict) -> str:
    sizes = results["sizes"]
    lines = [f"{results['sentences']} sentences of test_2016_flickr, {results['machine']['cpu']}; "
             "seconds (median of the rounds), and speed against the old default of 64",
             "",
             "| threads | decoding | " + " | ".join(f"batch {s}" for s in sizes) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in sizes) + " |"]
    for case in results["cases"]:
        medians = {s: statistics.median(case["seconds"][str(s)]) for s in sizes}
        base = medians.get(64)
        cells = [f"{medians[s]:.2f}" + (f" ({base / medians[s]:.2f}×)" if base else "")
                 for s in sizes]
        name = "greedy" if case["beam"] == 1 else f"beam {case['beam']}"
        lines.append(f"| {case['threads']} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--output", default=str(HERE / "results" / "translate_batch.json"))
    args = parser.parse_args(argv)
    checkpoint = load_checkpoint(args.checkpoint)
    model = restore_model(checkpoint, "cpu")
    tokenizer = Tokenizer.from_bytes(checkpoint.tokenizer_bytes)
    pairs = load_corpus(args.data, "de", "en").test[: args.sentences]
    sentences = [source for source, _ in pairs]
    cases = []
    all_threads = mt.get_num_threads()
    for threads in sorted({all_threads, 1}, reverse=True):
        mt.set_num_threads(threads)
        for beam in (4, 1):
            case = {"threads": threads, "beam": beam,
                    **time_sizes(model, tokenizer, sentences, beam, args.sizes, args.repeats)}
            cases.append(case)
            print(f"  {threads} thread(s), beam {beam}: " + ", ".join(
                f"{s} {statistics.median(case['seconds'][str(s)]):.2f} s" for s in args.sizes)
                + ("" if case["same_translations"] else "  DIFFERENT TRANSLATIONS"), flush=True)
    mt.set_num_threads(all_threads)
    path = Path(args.checkpoint).resolve()
    shown = path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path
    results = {"machine": machine(), "checkpoint": str(shown),
               "sentences": len(sentences), "sizes": args.sizes, "repeats": args.repeats,
               "cases": cases}
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    return 0 if all(case["same_translations"] for case in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
