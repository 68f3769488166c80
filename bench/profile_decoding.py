"""Where a decoding run's host time goes: cProfile of greedy or beam search, after warm-up.

    python bench/profile_decoding.py                           # beam 4 on the CPU
    python bench/profile_decoding.py --device cuda --cuda-graphs   # with decoding graphs kept

The random-weight `small` model and random sources of compare_torch.py's decoding (so every
sentence runs to its limit), in batches of --batch; two untimed runs (kernels compiled,
graphs captured), one timed run, then one profiled run, whose functions are printed by their
own time and by their cumulative time. On a GPU the host's waits for the device fall in the
function that reads a device value (its own time), not in the kernels that made it wait.
It needs PyTorch, as the sources are compare_torch.py's.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from types import SimpleNamespace

from compare_torch import decoding_sources, padded_batches, synchronize
from machine import commit

import minitransformer as mt
from minitransformer.data.tokenizer import BOS_ID, EOS_ID
from minitransformer.translation.decode import beam_search, greedy_decode
from minitransformer.translation.graphs import DecodingGraphs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--search", choices=["beam", "greedy"], default="beam")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--cuda-graphs", action="store_true", help="decode with one DecodingGraphs "
                   "kept across the runs (GPU only)")
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--top", type=int, default=30, help="functions printed in each order")
    args = p.parse_args(argv)
    mt.use(args.device)
    model, sources, what = decoding_sources(SimpleNamespace(
        checkpoint="", data="", device=args.device, vocab_size=args.vocab_size,
        sentences=args.sentences))
    batches = [mt.backend.to_device(b, args.device) for b in padded_batches(sources, args.batch)]
    graphs = DecodingGraphs(model, max_shapes=len(batches)) if args.cuda_graphs else None

    def run() -> None:
        for src in batches:
            if args.search == "beam":
                beam_search(model, src, BOS_ID, EOS_ID, beam_size=args.beam, graphs=graphs)
            else:
                greedy_decode(model, src, BOS_ID, EOS_ID, graphs=graphs)
        synchronize(args.device)

    run()
    run()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    print(f"{args.search}{f' {args.beam}' if args.search == 'beam' else ''}, "
          f"{'graphs kept' if graphs else 'eager'}, {args.device}; {what}, batches of "
          f"{args.batch}; commit {commit()}: {seconds:.3f} s", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    for order in ("tottime", "cumulative"):
        pstats.Stats(profile).sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
