"""What two decodings at once cost each other: on two threads of one process (what a
search's shares were, and are with set_decode_processes(False)) against two processes (what
they are now), beside one decoding alone.

    python bench/decode_gil.py        # bench/results/decode_gil.<machine>.json

A decoding step is some hundred NumPy and compiled calls, each of which lets go of Python's
lock while it computes, and the Python between them, which needs the lock. Two threads
decoding at once take turns at that lock; two processes have one each. So the two-process
time is what the second core could give with no lock at all, and the gap between it and the
two-thread time is what the lock costs. Every way decodes the same batch (the first 128
sentences of bench/compare_torch.py's decoding sources, sorted by length: the trained model
and Multi30k where they are, else a random-weight model on random sources) with one BLAS
thread per decoding, greedy and beam 4 with the cache; the ways alternate round by round
(--runs, the median kept). Voluntary context switches (a thread blocked, mostly on the lock)
are counted over each two-thread run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

from compare_torch import CHECKPOINT, SHARED, decoding_sources, padded_batches
from machine import commit, kind, machine

import minitransformer as mt
from minitransformer.data.tokenizer import BOS_ID, EOS_ID
from minitransformer.translation.decode import beam_search, greedy_decode

HERE = Path(__file__).resolve().parent
SENTENCES = 128


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(CHECKPOINT))
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--output", help="JSON (default bench/results/decode_gil.<machine>.json)")
    return parser.parse_args(argv)


def setup(args: argparse.Namespace) -> tuple:
    """(model, the batch, what they are), with one thread for BLAS and the library."""
    mt.set_num_threads(1)
    args.device, args.sentences = "cpu", 500
    model, sources, what = decoding_sources(args)
    return model.eval(), padded_batches(sources, SENTENCES)[0], what


def decode(model, batch, algorithm: str) -> list:
    """One decoding of the batch with the cache (the search lays the weights out for it)."""
    if algorithm == "greedy":
        return greedy_decode(model, batch, BOS_ID, EOS_ID)
    return beam_search(model, batch, BOS_ID, EOS_ID, beam_size=4, length_penalty=0.6)


def process_worker(args: argparse.Namespace, connection) -> None:
    """A process of its own: decode when told, answer with the seconds and the tokens."""
    model, batch, _ = setup(args)
    connection.send("ready")
    while (algorithm := connection.recv()) is not None:
        start = time.perf_counter()
        out = decode(model, batch, algorithm)
        connection.send((time.perf_counter() - start, out))


def two_threads(model, batch, algorithm: str) -> tuple:
    """Two threads decoding the batch at once: (seconds, voluntary switches, tokens)."""
    outputs: list = [None, None]

    def work(i: int) -> None:
        outputs[i] = decode(model, batch.copy(), algorithm)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
    return seconds, switches, outputs


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    pipes = [context.Pipe() for _ in range(2)]
    workers = [context.Process(target=process_worker, args=(args, child), daemon=True)
               for _, child in pipes]
    for worker in workers:
        worker.start()
    model, batch, what = setup(args)
    for parent, _ in pipes:
        assert parent.recv() == "ready"
    print(f"{what}; batch of {len(batch)}", flush=True)

    def processes(algorithm: str) -> tuple:
        for parent, _ in pipes:
            parent.send(algorithm)
        answers = [parent.recv() for parent, _ in pipes]
        return max(s for s, _ in answers), [out for _, out in answers]

    cases = []
    for algorithm in ("greedy", "beam"):
        reference = decode(model, batch, algorithm)
        seconds: dict[str, list[float]] = {"alone": [], "two threads": [], "two processes": []}
        switches, same = [], True
        for run in range(args.runs + 1):  # the first round warms up
            order = list(seconds) if run % 2 == 0 else list(seconds)[::-1]
            for way in order:
                if way == "alone":
                    start = time.perf_counter()
                    outs = [decode(model, batch, algorithm)]
                    took = time.perf_counter() - start
                elif way == "two threads":
                    took, switched, outs = two_threads(model, batch, algorithm)
                    if run:
                        switches.append(switched)
                else:
                    took, outs = processes(algorithm)
                same = same and all(out == reference for out in outs)
                if run:
                    seconds[way].append(took)
        median = {way: statistics.median(s) for way, s in seconds.items()}
        case = {"algorithm": algorithm, "sentences": len(batch), "seconds": seconds,
                "median_s": median, "same_outputs": same,
                "voluntary_switches_two_threads": statistics.median(switches),
                "over_alone": {way: median[way] / median["alone"] for way in median}}
        cases.append(case)
        print(f"  {algorithm}: " + ", ".join(f"{way} {t:.3f} s ({case['over_alone'][way]:.2f}×)"
                                              for way, t in median.items())
              + f"; {case['voluntary_switches_two_threads']:.0f} voluntary switches a "
                f"two-thread run; same tokens {same}", flush=True)
    for parent, _ in pipes:
        parent.send(None)
    for worker in workers:
        worker.join(timeout=10)
    result = {"machine": machine(), "commit": commit(), "data": what, "cases": cases}
    output = Path(args.output or HERE / "results" / f"decode_gil.{kind()}.json")
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main(sys.argv[1:])
