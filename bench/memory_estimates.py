"""memory.py's estimates against the peaks the code really reaches, case by case.

Decoding, aligning, training and averaging checkpoints: every row of the table in
``minitransformer/translation/memory.py``'s docstring.

    python bench/memory_estimates.py               # every case (about a minute)
    python bench/memory_estimates.py --only train  # the cases whose names begin so
    python bench/memory_estimates.py --only "decode small" align

writes bench/results/memory_estimates.<machine>.{json,md}.

Each case runs in a fresh process, with one thread (one worker: a batch is decoded in one
share, in this process, where tracemalloc sees every array; with more cores the estimate sums
the shares over the worker processes that decode them, which one process cannot measure). A
process first runs a tiny model's training step, greedy search, beam search and alignment, so
that loading the compiled kernels is not counted, then measures with ``tracemalloc`` (NumPy
reports its arrays to it) the peak of the bytes allocated during the case beyond those before
it, the case's model freshly made:

    decode    random weights, sources of random ids, an end-of-sentence id no step emits:
              every hypothesis runs to its limit S + 50 (the longest search); the model's first
              search, so its positional table and the copies of Wᵀ that small products read
              are made inside it, as in a translator's first batch; estimate ``decoding_bytes``
    align     the teacher-forced pass of ``alignment.cross_attention`` over random hypotheses
              (the model's first); estimate ``decoding_bytes`` with ``alignments`` (one
              sentence's search beside it is far smaller)
    train     the trainer's step (dropout on, the logits held through the backward, each
              batch's loss over the step's tokens, Adam made and stepped); the first step of
              the model, whose peak includes Adam's moments and the workspace's blocks for the
              (B·T, V) arrays; estimate ``training_peak``'s state and step, less the parameters
              (there before). Beside it, what a second step with the same optimizer allocates
              anew (the moments and the workspace's blocks already held, and reused)
    average   ``average_checkpoints`` of step checkpoints (model and Adam) written beforehand,
              after one call that loads the zip reader; estimate ``averaging_bytes``

An estimate below its peak would let a job start that the machine cannot hold: the table marks
any such case, and the script exits with status 1 (2 when a case fails to run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

from machine import commit, kind, machine

MiB = 2**20
# name: (job, configuration, vocabulary, sentences B, source length S, target length T or the
# beam K, hypotheses or checkpoints)
CASES = {
    "decode tiny V1000 B256 S25 beam 4": ("decode", "tiny", 1000, 256, 25, 4),
    "decode tiny V1000 B256 S25 greedy": ("decode", "tiny", 1000, 256, 25, 1),
    "decode small V8000 B128 S30 beam 4": ("decode", "small", 8000, 128, 30, 4),
    "decode small V8000 B256 S30 greedy": ("decode", "small", 8000, 256, 30, 1),
    "decode small V8000 B32 S30 beam 16": ("decode", "small", 8000, 32, 30, 16),
    "decode base V8000 B16 S30 beam 4": ("decode", "base", 8000, 16, 30, 4),
    "align small V8000 128 hypotheses S30 T80": ("align", "small", 8000, 128, 30, 80),
    "train tiny V1000 B160 S22 T25": ("train", "tiny", 1000, 160, 22, 25),
    "train small V8000 B100 S40 T40": ("train", "small", 8000, 100, 40, 40),
    "train small V8000 B40 S100 T100": ("train", "small", 8000, 40, 100, 100),
    "train base V8000 B50 S40 T40": ("train", "base", 8000, 50, 40, 40),
    "average small V8000 5 checkpoints": ("average", "small", 8000, 5, 0, 0),
    "average base V8000 2 checkpoints": ("average", "base", 8000, 2, 0, 0),
}


def peak_bytes(work) -> int:
    """The peak of the bytes allocated while ``work()`` runs, beyond those before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def train_step(model, optimizer, src, tgt_in, tgt_out):
    """One step as the trainer takes it (``Trainer._step``): gradients cleared, the batch's
    loss over the step's tokens, backward, Adam's update. ``optimizer`` None: made here."""
    from minitransformer import functional as F
    from minitransformer.optim import Adam

    optimizer = optimizer or Adam(model.parameters(), lr=1e-4)
    optimizer.zero_grad()
    logits = model(src, tgt_in)                      # held through the backward
    loss = F.cross_entropy(logits, tgt_out, 0.1, ignore_index=0, normalizer=tgt_out.size)
    loss.backward()
    optimizer.step()
    return optimizer


def load_kernels() -> None:
    """A tiny model's step, searches and alignment: the compiled kernels they call, loaded
    before any case is measured."""
    import numpy as np

    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation.alignment import cross_attention
    from minitransformer.translation.decode import beam_search, greedy_decode

    rng = np.random.default_rng(1)
    model = Transformer(TransformerConfig.named("tiny", 300))
    train_step(model, None, *(rng.integers(4, 300, (8, 9)) for _ in range(3)))
    model.eval()
    src = rng.integers(4, 300, (4, 9))
    greedy_decode(model, src, 2, -1, max_len=3)
    beam_search(model, src, 2, -1, 4, max_len=3)
    cross_attention(model, src.tolist(), src.tolist(), 2)


def measure(name: str) -> dict:
    """Run one case in this process: its measured peak and its estimate, in bytes."""
    import numpy as np

    import minitransformer as mt
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation import memory

    mt.set_num_threads(1)
    job, config_name, vocab, B, S, T = CASES[name]
    load_kernels()
    rng = np.random.default_rng(0)
    mt.manual_seed(0)
    config = TransformerConfig.named(config_name, vocab)
    model = Transformer(config)
    extra: dict = {}
    if job == "decode":
        from minitransformer.translation.decode import beam_search, greedy_decode

        model.eval()
        src = rng.integers(4, vocab, (B, S))
        search = ((lambda: greedy_decode(model, src, 2, -1)) if T == 1 else
                  (lambda: beam_search(model, src, 2, -1, T)))
        measured = peak_bytes(search)
        estimate = memory.decoding_bytes(config, B, S, S + 50, T)
    elif job == "align":
        from minitransformer.translation.alignment import cross_attention

        model.eval()
        sources = rng.integers(4, vocab, (B, S)).tolist()
        outputs = rng.integers(4, vocab, (B, T)).tolist()
        measured = peak_bytes(lambda: cross_attention(model, sources, outputs, 2))
        estimate = memory.decoding_bytes(config, 1, S, T, 1, alignments=B)
    elif job == "train":
        model.train()
        src, tgt_in, tgt_out = (rng.integers(4, vocab, shape) for shape in
                                ((B, S), (B, T), (B, T)))
        made: list = []  # the optimizer, made inside the first step's count
        measured = peak_bytes(lambda: made.append(train_step(model, None, src, tgt_in, tgt_out)))
        extra["second_step_bytes"] = peak_bytes(
            lambda: train_step(model, made[0], src, tgt_in, tgt_out))
        peak = memory.training_peak(config, [(B, S, T)])
        estimate = peak.state + peak.step - memory.parameter_count(config) * 4
    else:  # average
        from minitransformer.optim import Adam
        from minitransformer.translation.checkpoint import average_checkpoints, save_checkpoint

        with tempfile.TemporaryDirectory() as folder:
            paths = []
            for seed in range(B):
                for p in model.parameters():
                    p.data += np.random.default_rng(seed).standard_normal(
                        p.shape).astype(np.float32) * 0.01
                paths.append(save_checkpoint(Path(folder) / f"step{seed}.npz", model,
                                             Adam(model.parameters())))
            average_checkpoints(paths[:1])  # the zip reader's first use
            measured = peak_bytes(lambda: average_checkpoints(paths))
            estimate = memory.averaging_bytes(paths)
    return {"case": name, "job": job, "config": config_name, "measured_bytes": measured,
            "estimate_bytes": estimate, **extra}


def table(results: list[dict], info: dict) -> str:
    lines = [f"{info['cpu']}, one thread, NumPy {info['numpy']}, {info['kernels']}; commit "
             f"{info['commit']}. Peak bytes allocated during each case (tracemalloc) against "
             f"memory.py's estimate.", "",
             "| case | measured MiB | estimate MiB | estimate / measured |",
             "| --- | --- | --- | --- |"]
    for r in results:
        ratio = r["estimate_bytes"] / r["measured_bytes"]
        flag = "" if ratio >= 1 else " **below**"
        lines.append(f"| {r['case']} | {r['measured_bytes'] / MiB:.1f} | "
                     f"{r['estimate_bytes'] / MiB:.1f} | {ratio:.3f}{flag} |")
    seconds = [f"{r['case']}: {r['second_step_bytes'] / MiB:.1f} MiB" for r in results
               if "second_step_bytes" in r]
    if seconds:
        lines += ["", "A second step with the same optimizer (Adam's moments and the workspace's "
                  "blocks held from the first, and reused) allocates anew: "
                  + "; ".join(seconds) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[],
                        help="run only the cases whose names begin with one of these prefixes "
                        "(quote one of several words: \"decode small\")")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, in this process
    parser.add_argument("--output", help="JSON (default bench/results/memory_estimates."
                        "<machine>.json; the Markdown beside it)")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(measure(args.case)))
        return 0
    names = [n for n in CASES if not args.only or any(n.startswith(w) for w in args.only)]
    if not names:
        parser.error(f"--only {' '.join(args.only)} names no case; the cases begin with "
                     f"{', '.join(sorted({n.split()[0] for n in CASES}))}.")
    results = []
    for name in names:
        run = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if run.returncode != 0:
            print(f"{run.stderr}\ncase {name!r} failed (exit status {run.returncode}); "
                  f"nothing written.", file=sys.stderr)
            return 2
        results.append(json.loads(run.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(f"{name}: measured {r['measured_bytes'] / MiB:.1f} MiB, estimate "
              f"{r['estimate_bytes'] / MiB:.1f} MiB", flush=True)
    info = {**machine(), "commit": commit(), "threads": 1}
    output = Path(args.output or Path(__file__).parent / "results"
                  / f"memory_estimates.{kind()}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"machine": info, "results": results}, indent=2) + "\n")
    output.with_suffix(".md").write_text(table(results, info))
    print(table(results, info))
    print(f"wrote {output} and {output.with_suffix('.md')}")
    return 1 if any(r["estimate_bytes"] < r["measured_bytes"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
