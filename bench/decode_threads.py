"""Beam search on one core and on two, beside PyTorch, and what the GIL costs the second core.

    python bench/decode_threads.py                 # about three minutes on 2 cores

Decoding a batch on two cores, minitransformer runs one share of the sentences per core on
Python threads (decode.py ``_on_cores``); PyTorch runs every operation on its own two OpenMP
threads. This script measures both on one core and on two, alternating, to separate the
speed of the decoder itself (one core) from what each way of using the second core gains:

1. Beam-4 decoding with the key/value cache of the first --sentences of test_2016_flickr
   (the trained model of --checkpoint, as compare_torch.py; a random small model when there
   is none), batches of --decode-batch: on one core (minitransformer with one worker and
   single-threaded BLAS, torch.set_num_threads(1)) and on two (as compare_torch.py). Also
   minitransformer's two shares in two processes instead of two threads (each decodes the
   sentences its thread would, single-threaded; both start together, and the pair's time is
   the slower one's): the same work without a shared GIL.
2. The GIL: a loop of float32 products (M, 64) @ (64, 64) with a few Python statements
   between them, on one thread, then twice at once on two threads, and on two processes.
   NumPy releases the GIL inside the product; when it returns, the thread must take the GIL
   back, waiting while the other thread holds it and for the wake-up after. The speed-up over
   one thread (2 at best) shows what that costs per call at each size; the processes show
   what the two cores give without a GIL.

Writes JSON (--output, default bench/results/decode_threads.json) and prints Markdown tables.
The one-core runs use ``minitransformer.set_num_threads(1)`` and ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
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
    model_pair,
    pin_threads,
)
from threadpoolctl import threadpool_limits

import minitransformer as mt

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def one_core(enabled: bool):
    """A context in which both libraries use one core (or, disabled, their default two)."""
    saved = (mt.get_num_threads(), torch.get_num_threads())
    if not enabled:
        yield
        return
    with threadpool_limits(1):  # BLAS's own count comes back at the end, whatever it was
        mt.set_num_threads(1)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            mt.set_num_threads(saved[0])
            torch.set_num_threads(saved[1])


def time_decoding(args) -> list[dict]:
    ours, batches, what = decoding_inputs(args)
    models = model_pair(ours, "cpu")
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
            if cores == 2:
                runs.setdefault("minitransformer_processes", []).append(
                    on_processes(["--_decode-share"], args))
        case = {"cores": cores, "sentences": n, "runs_s": runs,
                "seconds": {impl: statistics.median(r) for impl, r in runs.items()}}
        case["ratio"] = case["seconds"]["torch"] / case["seconds"]["minitransformer"]
        cases.append(case)
        print(f"  {cores} core(s): minitransformer {case['seconds']['minitransformer']:.2f} s, "
              f"torch {case['seconds']['torch']:.2f} s, ratio {case['ratio']:.2f}", flush=True)
    one, two = cases
    for impl in models:
        print(f"  {impl}: two cores {one['seconds'][impl] / two['seconds'][impl]:.2f}x one "
              "core", flush=True)
    processes = two["seconds"]["minitransformer_processes"]
    print(f"  minitransformer's shares on two processes: {processes:.2f} s, "
          f"{one['seconds']['minitransformer'] / processes:.2f}x one core", flush=True)
    return cases


def decode_share(args) -> float:
    """In a child process: beam-4 search of share ``args.share`` of every batch (the sentences
    ``_on_cores`` gives that share's thread), on one core; seconds from the parent's "go"."""
    ours, batches, _ = decoding_inputs(args)
    shares = [batch[args.share::2] for batch in batches]
    with one_core(True):
        decode_all("minitransformer", ours, [shares[0][:4]], "beam", True, args, max_len=3)
        print("ready", flush=True)
        sys.stdin.readline()
        seconds, _ = decode_all("minitransformer", ours, shares, "beam", True, args)
    return seconds


def on_processes(child_args: list[str], args) -> float:
    """Run this script with ``child_args`` in two processes (``--share 0`` and ``1``), start
    both at once when both are ready, and return the slower one's printed seconds."""
    command = [sys.executable, str(Path(__file__).resolve()), *child_args,
               "--data", args.data, "--checkpoint", args.checkpoint,
               "--sentences", str(args.sentences), "--decode-batch", str(args.decode_batch)]
    children = [subprocess.Popen([*command, "--share", str(share)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for share in (0, 1)]
    for child in children:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a child process of {command} did not start")
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    seconds = [float(child.communicate()[0].split()[-1]) for child in children]
    return max(seconds)


def loop_calls(rows: int) -> int:
    """Products in one loop of ``products``: about 2 GFLOP whatever the size."""
    return int(2e9 // (rows * 64 * 64 * 2))


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
    print("GIL handoffs: (M, 64) @ (64, 64) products on one thread, two threads, two processes",
          flush=True)
    cases = []
    with threadpool_limits(1):
        for rows in (16, 64, 256, 1024):
            calls = loop_calls(rows)
            single, double, processes = [], [], []
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
                processes.append(on_processes(["--_products", str(rows)], args))
            one, two = statistics.median(single), statistics.median(double)
            apart = statistics.median(processes)
            case = {"rows": rows, "calls": calls, "one_thread_us_per_call": one / calls * 1e6,
                    "two_threads_us_per_call_each": two / calls * 1e6,
                    "two_processes_us_per_call_each": apart / calls * 1e6,
                    "speedup_threads": 2 * one / two, "speedup_processes": 2 * one / apart}
            cases.append(case)
            print(f"  M={rows}: {case['one_thread_us_per_call']:.1f} us a call on one thread, "
                  f"{case['two_threads_us_per_call_each']:.1f} us on each of two threads "
                  f"(speed-up {case['speedup_threads']:.2f}), "
                  f"{case['two_processes_us_per_call_each']:.1f} us on each of two processes "
                  f"({case['speedup_processes']:.2f})", flush=True)
    return cases


def product_loop(rows: int) -> float:
    """In a child process: the loop of ``time_handoffs`` alone; seconds from the "go"."""
    calls = loop_calls(rows)
    with threadpool_limits(1):
        products(rows, 10)
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.perf_counter()
        products(rows, calls)
        return time.perf_counter() - start


def markdown(results: dict) -> str:
    lines = ["| cores | minitransformer s (threads) | minitransformer s (processes) | torch s | "
             "ratio torch s / minitransformer s (threads) |", "|---|---:|---:|---:|---:|"]
    for case in results["decoding"]:
        s = case["seconds"]
        apart = s.get("minitransformer_processes")
        lines.append(f"| {case['cores']} | {s['minitransformer']:.2f} | "
                     f"{'' if apart is None else f'{apart:.2f}'} | {s['torch']:.2f} | "
                     f"{case['ratio']:.2f} |")
    lines += ["", "| M | µs a call, one thread | each of two threads | speed-up | "
              "each of two processes | speed-up |", "|---:|---:|---:|---:|---:|---:|"]
    for case in results["gil"]:
        lines.append(f"| {case['rows']} | {case['one_thread_us_per_call']:.1f} | "
                     f"{case['two_threads_us_per_call_each']:.1f} | "
                     f"{case['speedup_threads']:.2f} | "
                     f"{case['two_processes_us_per_call_each']:.1f} | "
                     f"{case['speedup_processes']:.2f} |")
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
    parser.add_argument("--_decode-share", dest="decode_share", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--_products", dest="products", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--share", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.threads, args.device, args.beam, args.alpha = 2, "cpu", 4, 0.6
    args.vocab_size = 8000
    pin_threads(args.threads, argv)
    if args.decode_share:
        print(f"{decode_share(args):.4f}")
        return 0
    if args.products:
        print(f"{product_loop(args.products):.4f}")
        return 0
    results = {"machine": machine_info(args), "decoding": time_decoding(args),
               "gil": time_handoffs(args)}
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
