"""Training throughput with threads against processes, and what the all-reduce costs.

    python bench/distributed.py                 # bench/results/distributed.<machine>.json
    python bench/distributed.py --steps 10      # a quicker, noisier run

The `small` Transformer of the Multi30k recipe (bench/multi30k.py) trains on Multi30k's
batches of at most 4,000 padded tokens, measured in three layouts of the same cores:

    1 process  x 2 threads    the default on a 2-core machine
    2 processes x 1 thread    mpiexec -n 2: each process one batch of the step
    1 process  x 1 thread     the baseline each core would give alone

Each layout trains ``--warmup`` unmeasured steps and then ``--steps`` measured ones; the figure
is target and source tokens per second over the measured steps (a two-process step counts
both processes' tokens). The two-process run also times its all-reduce alone: the gradient
buffer (4 bytes per parameter) summed across the processes, 20 times. From the measured step
time and bytes the results give the network bandwidth at which a ring all-reduce among N
machines would cost 10% of a step.

The layouts run one after another in fresh processes (``--worker`` is what each runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
LAYOUTS = (("1 process x 2 threads", 1, 2), ("2 processes x 1 thread", 2, 1),
           ("1 process x 1 thread", 1, 1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED), help="a Multi30k folder")
    parser.add_argument("--steps", type=int, default=40, help="measured steps per layout")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured steps first")
    parser.add_argument("--out", help="results file (default bench/results/"
                                      "distributed.<machine>.json)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    from machine import commit, kind, machine

    if not Path(args.data).is_dir():
        sys.exit(f"no Multi30k folder at {args.data}: get one with "
                 "`minitransformer data multi30k --dest DIR` and pass --data DIR.")
    mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                           f"{os.environ.get('PATH', '')}")
    if mpiexec is None:
        sys.exit('no mpiexec: pip install -e ".[distributed]" first.')
    rows = []
    for name, processes, threads in LAYOUTS:
        command = [sys.executable, __file__, "--worker", "--data", args.data,
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
        if processes > 1:
            command = [mpiexec, "-n", str(processes), *command]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        print(f"{name}: {args.warmup} + {args.steps} steps ...", flush=True)
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
        row = {"layout": name, "processes": processes, "threads_per_process": threads,
               **json.loads(done.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(f"  {row['tokens_per_s']:,.0f} tokens/s, {row['step_seconds']:.3f} s per step",
              flush=True)
    two = next(r for r in rows if r["processes"] == 2)
    step, megabytes = two["step_seconds"], two["gradient_bytes"] / 1e6
    scaling = [{"machines": n, "bytes_sent_per_machine": 2 * (n - 1) / n * two["gradient_bytes"],
                "gbit_per_s_for_10_percent": 2 * (n - 1) / n * two["gradient_bytes"] * 8
                / (0.1 * step) / 1e9} for n in (2, 4, 8, 16)]
    result = {"benchmark": "training throughput: threads against processes (mpiexec)",
              "model": "small (Multi30k recipe)", "max_tokens": 4000,
              "warmup_steps": args.warmup, "measured_steps": args.steps, "layouts": rows,
              "gradient_megabytes": megabytes, "ring_allreduce_estimate": scaling,
              "machine": machine(), "commit": commit()}
    out = Path(args.out or RESULTS / f"distributed.{kind()}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


def worker(args) -> None:
    """One layout: train, measure, and (rank 0) print one JSON line."""
    import numpy as np

    import minitransformer as mt
    from minitransformer.data.tokenizer import Tokenizer
    from minitransformer.distributed import threads_per_process, world
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation.corpus import load_corpus, prepare, prepare_corpus
    from minitransformer.translation.training import TrainConfig, Trainer

    comm = world()
    mt.set_num_threads(threads_per_process(comm))
    corpus = load_corpus(args.data, "de", "en")
    if comm.rank == 0:
        tokenizer, data, _ = prepare(corpus, vocab_size=8000, max_len=100)
    if comm.size > 1:  # rank 0's vocabulary for every process, as `train` does
        shared = comm.broadcast_bytes(tokenizer.to_bytes() if comm.rank == 0 else None)
        if comm.rank != 0:
            tokenizer = Tokenizer.from_bytes(shared)
            data = prepare_corpus(corpus, 8000, 100, tokenizer).data
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("small", tokenizer.vocab_size))
    config = TrainConfig(max_tokens=4000, warmup_steps=800, lr_scale=0.7,
                         max_steps=args.warmup + args.steps, eval_every=10**6,
                         bleu_sentences=0, keep_last=1, progress=False)
    with tempfile.TemporaryDirectory() as run_dir:
        Trainer(model, tokenizer, data, config, run_dir, comm).fit()
        if comm.rank == 0:  # rank 0 alone writes the log
            records = [json.loads(line) for line in (Path(run_dir) / "log.jsonl").open()
                       if '"loss"' in line]
    n_weights = sum(p.data.size for p in model.parameters())
    buffer = np.ones(n_weights, dtype=np.float32)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        comm.allreduce_sum(buffer)
        times.append(time.perf_counter() - start)
    if comm.rank == 0:
        measured = records[args.warmup:]
        seconds = sum(r["seconds"] for r in measured)
        tokens = sum(r["tokens"] for r in measured)
        print(json.dumps({"tokens_per_s": tokens / seconds, "step_seconds": seconds / len(measured),
                          "steps": len(measured), "gradient_bytes": 4 * n_weights,
                          "allreduce_seconds_median": float(np.median(times))
                          if comm.size > 1 else 0.0}))


if __name__ == "__main__":
    main()
