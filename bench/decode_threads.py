"""Beam search on one core and on two, beside PyTorch, and what a handoff of the GIL costs.

    python bench/decode_threads.py                 # about two minutes on 2 cores

Decoding a batch on two cores, minitransformer runs one share of the sentences per core on
Python threads (decode.py ``_on_cores``); PyTorch runs every operation on its own two OpenMP
threads. This script measures both on one core and on two, alternating, to separate the
speed of the decoder itself (one core) from what each way of using the second core gains:

1. Beam-4 decoding with the key/value cache of the first --sentences of test_2016_flickr
   (the trained model of --checkpoint, as compare_torch.py; a random small model when there
   is none), batches of --decode-batch: on one core (minitransformer with one worker and
   single-threaded BLAS, torch.set_num_threads(1)) and on two (as compare_torch.py).
2. The GIL: a loop of float32 products (M, 64) @ (64, 64) with a few Python statements
   between them, once on one thread and then twice at once on two threads. NumPy releases
   the GIL inside the product; when it returns, the thread must take the GIL back from the
   other, which sleeps or runs Python, so each call can wait for a wake-up. The speed-up of
   two threads over one (2 at best) shows what that costs per call at each size.

Writes JSON (--output, default bench/results/decode_threads.json) and prints Markdown tables.
Sets module globals of minitransformer (``WORKERS``) for the one-core runs: a benchmark's
switch, not an API.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from compare_torch import (
    CHECKPOINT,
    SHARED,
    decode_all,
    decoding_inputs,
    machine_info,
    pin_threads,
)
from threadpoolctl import threadpool_limits
from torch_model import TorchTransformer, copy_weights

from minitransformer import decode
from minitransformer.functional import _blocks

HERE = Path(__file__).resolve().parent


def one_core(enabled: bool):
    """A context in which both libraries use one core (or, disabled, their default two)."""
    class Context:
        def __enter__(self):
            self.saved = (decode.WORKERS, _blocks.WORKERS, torch.get_num_threads())
            if enabled:
                decode.WORKERS = _blocks.WORKERS = 1
                torch.set_num_threads(1)
                self.blas = threadpool_limits(1)
                self.blas.__enter__()

        def __exit__(self, *exc):
            if enabled:
                self.blas.__exit__(*exc)
            decode.WORKERS, _blocks.WORKERS, threads = self.saved
            torch.set_num_threads(threads)
    return Context()


def time_decoding(args) -> list[dict]:
    ours, batches, what = decoding_inputs(args)
    theirs = TorchTransformer(ours.config)
    copy_weights(theirs, ours)
    models = {"minitransformer": ours, "torch": theirs}
    n = sum(len(b) for b in batches)
    print(f"beam-4 decoding: {what}, batches of {args.decode_batch}", flush=True)
    for impl, model in models.items():  # warm-up
        decode_all(impl, model, [batches[0][:4]], "beam", True, args, max_len=3)
    cases = []
    for cores in (1, 2):
        runs: dict[str, list[float]] = {impl: [] for impl in models}
        for rep in range(args.repeats):
            order = list(models) if rep % 2 == 0 else list(models)[::-1]
            for impl in order:
                with one_core(cores == 1):
                    seconds, _ = decode_all(impl, models[impl], batches, "beam", True, args)
                runs[impl].append(seconds)
        case = {"cores": cores, "sentences": n, "runs_s": runs,
                "seconds": {impl: statistics.median(r) for impl, r in runs.items()}}
        case["ratio"] = case["seconds"]["torch"] / case["seconds"]["minitransformer"]
        cases.append(case)
        print(f"  {cores} core(s): minitransformer {case['seconds']['minitransformer']:.2f} s, "
              f"torch {case['seconds']['torch']:.2f} s, ratio {case['ratio']:.2f}", flush=True)
    for impl in models:
        one, two = (c["seconds"][impl] for c in cases)
        print(f"  {impl}: two cores {one / two:.2f}x one core", flush=True)
    return cases


def products(rows: int, calls: int) -> None:
    a = np.ones((rows, 64), np.float32)
    b = np.ones((64, 64), np.float32)
    out = np.empty((rows, 64), np.float32)
    for _ in range(calls):
        np.matmul(a, b, out=out)       # releases the GIL
        total = 0
        for i in range(5):             # a little Python, as between two NumPy calls
            total += i


def time_handoffs(args) -> list[dict]:
    print("GIL handoffs: (M, 64) @ (64, 64) products, one thread, then two at once", flush=True)
    cases = []
    with threadpool_limits(1):
        for rows in (16, 64, 256, 1024):
            calls = int(2e9 // (rows * 64 * 64 * 2))
            single, double = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                products(rows, calls)
                single.append(time.perf_counter() - start)
                threads = [threading.Thread(target=products, args=(rows, calls)) for _ in range(2)]
                start = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                double.append(time.perf_counter() - start)
            one, two = statistics.median(single), statistics.median(double)
            case = {"rows": rows, "calls": calls, "one_thread_us_per_call": one / calls * 1e6,
                    "two_threads_us_per_call_each": two / calls * 1e6,
                    "speedup": 2 * one / two}
            cases.append(case)
            print(f"  M={rows}: {case['one_thread_us_per_call']:.1f} us a call on one thread, "
                  f"{case['two_threads_us_per_call_each']:.1f} us on each of two: "
                  f"speed-up {case['speedup']:.2f}", flush=True)
    return cases


def markdown(results: dict) -> str:
    lines = ["| cores | minitransformer s | torch s | ratio (torch s / minitransformer s) |",
             "|---|---:|---:|---:|"]
    for case in results["decoding"]:
        s = case["seconds"]
        lines.append(f"| {case['cores']} | {s['minitransformer']:.2f} | {s['torch']:.2f} | "
                     f"{case['ratio']:.2f} |")
    lines += ["", "| M | µs a call, one thread | µs a call, each of two threads | speed-up |",
              "|---:|---:|---:|---:|"]
    for case in results["gil"]:
        lines.append(f"| {case['rows']} | {case['one_thread_us_per_call']:.1f} | "
                     f"{case['two_threads_us_per_call_each']:.1f} | {case['speedup']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--decode-batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--output", default=str(HERE / "results" / "decode_threads.json"))
    args = parser.parse_args(argv)
    args.threads, args.device, args.beam, args.alpha = 2, "cpu", 4, 0.6
    args.vocab_size = 8000
    pin_threads(args.threads, argv)
    results = {"machine": machine_info(args), "decoding": time_decoding(args),
               "gil": time_handoffs(args)}
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
