"""CUDA graphs on the GPU: minitransformer's training and decoding steps replayed as graphs,
beside the same steps run eagerly, CUDA PyTorch eager and (where it compiles) torch.compile.

    python bench/cuda_graphs.py                 # small, lengths 16 32 64, 20 steps each
    python bench/cuda_graphs.py --quick         # small, length 16, 3 steps
    python bench/compare_torch.py --device cuda # runs this too, after its own parts

Training, float32, dropout on, one batch shape per length (B = --tokens // L), so every step
after the warm-up and the capture replays the graph:

* minitransformer eager: compare_torch.py's step (forward, mean loss, backward, Adam; no read
  on the host);
* minitransformer graphs: translation/graphs.py's GraphedTraining (the token-summed loss, the
  gradients scaled by the token count, the global norm read on the host, Adam), two reads on
  the host a step, as `minitransformer train --cuda-graphs` does;
* torch eager, and torch.compile in its default mode and in "reduce-overhead" mode (which
  replays the compiled forward and backward as PyTorch's own CUDA graphs); each labelled, and
  left out with the reason when it fails to compile.

Decoding: greedy and beam search with the cache over the same batches, --decode-repeats
times: eagerly (graphs=None); with a DecodingGraphs made for each run, as `translate
--cuda-graphs` meets text it has not seen (each batch shape is captured at its second step
and replayed by the rest); with one DecodingGraphs kept across the runs; and by CUDA PyTorch
eager (bench/torch_model.py's port of the same search, the same weights). The tokens must be
the eager ones.

Every training time is the median of the timed steps after three untimed ones; the JSON keeps
them all. Without a GPU the script says so and exits 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from compare_torch import (
    build_pair,
    cuda_usable,
    decode_batch,
    decoding_sources,
    make_steps,
    model_pair,
    padded_batches,
    random_batch,
    timed,
    to_device,
    torch_step,
)
from machine import commit, kind

import minitransformer as mt
from minitransformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from minitransformer.nn import TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import beam_search, greedy_decode
from minitransformer.translation.graphs import DecodingGraphs, GraphedTraining

HERE = Path(__file__).resolve().parent


def graphed_step(model):
    """A step of ``train --cuda-graphs`` on a host batch (src, tgt_in, tgt_out)."""
    graphs = GraphedTraining(model, Adam(model.parameters(), lr=1e-4), label_smoothing=0.1)

    def step(batch):
        src, tgt_in, tgt_out = batch
        n_tokens = int((tgt_out != PAD_ID).sum())
        graphs.zero_grad()
        graphs.forward_backward(SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
                                                n_tgt_tokens=n_tokens), n_tokens)
        graphs.update(graphs.gradient_norm(), None)
    return step, graphs


COMPILE_MODES = ("default", "reduce-overhead")


def compiled_step(theirs, mode: str):
    """torch.compile of the torch model inside the eager step, or the reason it fails.

    "reduce-overhead" replays the compiled forward and backward as CUDA graphs of PyTorch's own
    (its cudagraph trees), so it is the like-for-like rival of minitransformer's graphs; each
    step is marked as a new iteration, as PyTorch asks of a training loop; Adam stays eager."""
    try:
        compiled = torch.compile(theirs, mode=mode)
        step = torch_step(compiled, torch.optim.Adam(theirs.parameters(), lr=1e-4,
                                                     betas=(0.9, 0.98), eps=1e-9))
    except Exception as exc:  # no compiler toolchain on the machine, say
        return None, f"{type(exc).__name__}: {exc}"
    if mode != "reduce-overhead":
        return step, None

    def marked(batch):
        torch.compiler.cudagraph_mark_step_begin()
        step(batch)
    return marked, None


def time_training(config: TransformerConfig, args) -> list[dict]:
    rows = []
    for L in args.lengths:
        B = max(1, args.tokens // L)
        ours, theirs = build_pair(config, "cuda")
        eager = make_steps(ours, theirs)
        ours_graphed, _ = build_pair(config, "cuda")
        graphed, graphs = graphed_step(ours_graphed)
        host = random_batch(np.random.default_rng(L), config.tgt_vocab_size, B, L)
        runs = {"minitransformer eager": (eager["minitransformer"], to_device(host, "mt", "cuda")),
                "minitransformer graphs": (graphed, host),
                "torch eager": (eager["torch"], to_device(host, "torch", "cuda"))}
        row = {"length": L, "batch": B, "seconds": {}}
        for mode in COMPILE_MODES:
            compiled, why = compiled_step(build_pair(config, "cuda")[1], mode)
            if compiled is None:
                row.setdefault("not_measured", {})[f"torch.compile ({mode} mode)"] = why
            else:
                runs[f"torch.compile ({mode} mode)"] = (compiled, to_device(host, "torch", "cuda"))
        for name, (step, batch) in runs.items():
            run = functools.partial(step, batch)
            try:
                # warm-up: for minitransformer's graphs the eager run, then the capture; for
                # torch.compile the compilation, and in reduce-overhead mode its warm-up and
                # recording runs
                for _ in range(3):
                    timed(run, "cuda")
                row["seconds"][name] = [timed(run, "cuda") for _ in range(args.repeats)]
            except Exception as exc:  # torch.compile compiles at its first call
                row.setdefault("not_measured", {})[name] = f"{type(exc).__name__}: {exc}"
        row["median_s"] = {n: statistics.median(s) for n, s in row["seconds"].items()}
        row["graphs"] = graphs.summary()
        rows.append(row)
        print(f"  L={L:<4} " + "  ".join(f"{n} {s * 1e3:.2f} ms"
                                          for n, s in row["median_s"].items()), flush=True)
    return rows


def time_decoding(args) -> dict:
    model, sources, what = decoding_sources(args)
    batches = padded_batches(sources, args.decode_batch)
    theirs = model_pair(model, "cuda")["torch"].eval()  # the same weights, bench/torch_model.py
    torch_args = SimpleNamespace(device="cuda", beam=args.beam, alpha=0.6)
    result = {"inputs": what, "batch_size": args.decode_batch, "cases": {}}
    for algorithm in ("greedy", "beam"):
        kept = DecodingGraphs(model, max_shapes=args.decode_shapes)

        def run_torch(algorithm=algorithm):
            return [hyp for src in batches
                    for hyp in decode_batch("torch", theirs, src, algorithm, True, torch_args)]

        def run(with_graphs, algorithm=algorithm):
            out = []
            for src in batches:
                src = mt.backend.to_device(src, "cuda")
                if algorithm == "greedy":
                    out += greedy_decode(model, src, BOS_ID, EOS_ID, graphs=with_graphs)
                else:
                    out += beam_search(model, src, BOS_ID, EOS_ID, beam_size=args.beam,
                                       graphs=with_graphs)
            return out

        reference = run(None)
        torch_tokens = run_torch()
        seconds = {"eager": [], "graphs, new": [], "graphs, kept": [], "torch eager": []}
        same = True
        for _ in range(args.decode_repeats):
            seconds["eager"].append(timed(lambda: run(None), "cuda"))
            seconds["torch eager"].append(timed(run_torch, "cuda"))
            # new: a DecodingGraphs made for the run, as `translate --cuda-graphs` on text it
            # has not seen (each batch shape captured at its second step); kept: one kept
            # across the runs, whose shapes were captured by the first
            for name in ("graphs, new", "graphs, kept"):
                graphs = (kept if name == "graphs, kept"
                          else DecodingGraphs(model, max_shapes=args.decode_shapes))
                found: list = []
                seconds[name].append(timed(functools.partial(
                    lambda found, graphs: found.extend(run(graphs)), found, graphs), "cuda"))
                same = same and found == reference
        result["cases"][algorithm] = {
            "seconds": seconds, "same_tokens": same, "graphs": kept.summary(),
            "same_tokens_as_torch": sum(a == b for a, b in zip(reference, torch_tokens,
                                                                strict=True)) / len(reference),
            # the first run of each compiles kernels (and captures, for "kept")
            "median_s": {k: statistics.median(v[1:] or v) for k, v in seconds.items()}}
        m = result["cases"][algorithm]["median_s"]
        print(f"  {algorithm}: " + ", ".join(f"{k} {v:.3f} s" for k, v in m.items())
              + f", same tokens {same}", flush=True)
    return result


def report(results: dict) -> str:
    lines = ["## CUDA graphs (bench/cuda_graphs.py)", "",
             f"{results['gpu']}, commit {results['commit']}, config {results['config']}", "",
             "Training step, median ms (batch of --tokens // L sentence pairs, float32):", ""]
    names = sorted({n for row in results["training"] for n in row["median_s"]})
    lines += ["| L | B | " + " | ".join(names) + " |",
              "|---|---|" + "---|" * len(names)]
    for row in results["training"]:
        cells = [f"{row['median_s'][n] * 1e3:.2f}" if n in row["median_s"] else "not measured"
                 for n in names]
        lines.append(f"| {row['length']} | {row['batch']} | " + " | ".join(cells) + " |")
    if "decoding" in results:
        lines += ["", "Decoding with the cache, median seconds over all batches (graphs, new: "
                  "a DecodingGraphs made for the run; kept: one kept across the runs; CUDA "
                  "PyTorch eager: bench/torch_model.py's port of the same search):", "",
                  "| search | eager | graphs, new | graphs, kept | CUDA PyTorch eager | "
                  "graphs, new against PyTorch | same tokens as eager | same as PyTorch |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, case in results["decoding"]["cases"].items():
            m = case["median_s"]
            lines.append(f"| {name} | {m['eager']:.3f} | {m['graphs, new']:.3f} | "
                         f"{m['graphs, kept']:.3f} | {m['torch eager']:.3f} | "
                         f"{m['torch eager'] / m['graphs, new']:.2f}× | "
                         f"{case['same_tokens']} | {case['same_tokens_as_torch']:.1%} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="small")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--tokens", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--sentences", type=int, default=500)
    p.add_argument("--decode-batch", type=int, default=128)
    p.add_argument("--decode-repeats", type=int, default=6)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--decode-shapes", type=int, default=8,
                   help="decoding shapes whose buffers and graph are kept")
    p.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data" / "multi30k"))
    p.add_argument("--checkpoint", default="")
    p.add_argument("--quick", action="store_true", help="length 16, 3 steps, 50 sentences")
    p.add_argument("--output", help="JSON (default bench/results/cuda_graphs.<machine>.json)")
    args = p.parse_args(argv)
    args.device = "cuda"  # compare_torch.decoding_sources restores the checkpoint there
    if args.quick:
        args.lengths, args.repeats, args.sentences, args.decode_repeats = [16], 3, 50, 3
    return args


def measure(args) -> dict:
    """Everything above, as one JSON-ready dict (compare_torch.py --device cuda calls it)."""
    mt.use("cuda")
    config = TransformerConfig.named(args.config, args.vocab_size)
    print("\n== CUDA graphs: training step", flush=True)
    results = {"gpu": torch.cuda.get_device_name(), "commit": commit(), "config": args.config,
               "training": time_training(config, args)}
    print("\n== CUDA graphs: decoding", flush=True)
    results["decoding"] = time_decoding(args)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not cuda_usable():
        print("cuda_graphs: needs an NVIDIA GPU that both CuPy and PyTorch can use, and there "
              "is none here.", file=sys.stderr)
        return 1
    results = measure(args)
    output = Path(args.output or HERE / "results" / f"cuda_graphs.{kind(results['gpu'])}"
                  f"{'.quick' if args.quick else ''}.json")
    output.write_text(json.dumps(results, indent=1) + "\n")
    output.with_suffix(".md").write_text(report(results))
    print(report(results) + f"\nwrote {output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
