"""Beam search's choice of the best continuations on the GPU: CuPy's argpartition against a
sort of each row (what ``translation.decode._largest`` does off NumPy), alternating.

    python bench/beam_topk.py                  # 256 random sources, batches of 128, 6 rounds

Beam 4 with the cache on a random-weight `small` model, eagerly and with one DecodingGraphs
kept across the runs. A round runs both selections, each first in every other round; the
tokens must be the same in every run. The median is over the rounds after the first (which
compiles kernels and captures the graphs). Without a GPU the script says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

from compare_torch import cuda_usable, decoding_sources, padded_batches, timed
from machine import commit, kind

import minitransformer as mt
from minitransformer.data.tokenizer import BOS_ID, EOS_ID
from minitransformer.translation import decode
from minitransformer.translation.graphs import DecodingGraphs

HERE = Path(__file__).resolve().parent
DEVICE = "cuda"


def gpu_name() -> str:
    return mt.backend.get_backend(DEVICE).xp.cuda.runtime.getDeviceProperties(0)["name"].decode()


def by_argpartition(x, k: int, xp):
    """The k largest of each row by argpartition, as NumPy does it."""
    n = x.shape[1]
    return xp.argpartition(x, n - k, axis=1)[:, n - k:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--output")
    args = p.parse_args()
    if not cuda_usable():
        print("beam_topk: needs an NVIDIA GPU that CuPy can use, and there is none here.",
              file=sys.stderr)
        return 1
    mt.use(DEVICE)
    model, sources, what = decoding_sources(SimpleNamespace(
        checkpoint="", data="", sentences=args.sentences, vocab_size=8000, device=DEVICE))
    batches = [mt.backend.to_device(b, DEVICE) for b in padded_batches(sources, args.batch)]
    selections = {"sort (decode._largest)": decode._largest, "argpartition": by_argpartition}
    kept = DecodingGraphs(model, max_shapes=8)

    def run(graphs, found: list) -> None:
        for src in batches:
            found += decode.beam_search(model, src, BOS_ID, EOS_ID, beam_size=4, graphs=graphs)

    seconds: dict = {}
    tokens: dict = {}
    try:
        for round_ in range(args.rounds):
            order = list(selections) if round_ % 2 == 0 else list(selections)[::-1]
            for name in order:
                decode._largest = selections[name]
                for mode, graphs in (("graphs, kept", kept), ("eager", None)):
                    found: list = []
                    seconds.setdefault(f"{name}, {mode}", []).append(
                        timed(lambda graphs=graphs, found=found: run(graphs, found), DEVICE))
                    if tokens.setdefault(mode, found) != found:
                        print(f"beam_topk: {name} ({mode}) chose other tokens", file=sys.stderr)
                        return 1
    finally:
        decode._largest = selections["sort (decode._largest)"]
    medians = {k: statistics.median(v[1:] or v) for k, v in seconds.items()}
    result = {"gpu": gpu_name(), "commit": commit(), "inputs": what,
              "batch": args.batch, "beam": 4, "seconds": seconds, "median_s": medians,
              "same_tokens": True}
    output = Path(args.output or HERE / "results" / f"beam_topk.{kind(result['gpu'])}.json")
    output.write_text(json.dumps(result, indent=1) + "\n")
    for name, value in medians.items():
        print(f"  {name}: {value:.3f} s (runs {' '.join(f'{s:.3f}' for s in seconds[name])})")
    print(f"same tokens in every run; wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
