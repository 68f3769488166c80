"""Where a training step's time goes: its matrix products, and the rest part by part.

    python bench/profile_step.py                   # small, L = 32, about 4,000 target tokens
    python bench/profile_step.py --length 128 --config base --profiled 2

One step as compare_torch.py times it (zero grads, forward, label-smoothed loss, backward,
Adam; float32, dropout on, source = target length L, --tokens // L sentences), at --threads
threads (the script runs itself again with OMP/OPENBLAS/MKL_NUM_THREADS set, as
compare_torch.py does). In one run:

1. the step's median time over --repeats steps, after a warm-up step that is traced to check
   the floor's list of products (bench/floor.py);
2. the matmul floor: those products alone (floor.py);
3. --profiled steps with timers around every autograd Function's forward and backward, the
   engine's gradient accumulation (``engine._send``) and every numpy.matmul call (on every
   thread). A step's time in matrix products is the time during which at least one thread
   was in a matrix-matrix product; each Function's "rest" is its time outside them (its
   row and column sums, matrix-vector products through BLAS, are counted apart within it).
   What no Function covers is the modules' own Python and Function calls' bookkeeping
   (forward), the engine's walk of the graph (backward), Adam and zero_grad.

The library is not modified: the timers are wrappers installed by this script for the
profiled steps and removed afterwards. They cost some time of their own (the profiled
step against the median is printed). Writes the tables (Markdown) and every figure (JSON)
to bench/results/profile_step.<machine>[.<config>-L<length>].{md,json}.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import minitransformer as mt  # first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads

# isort: split
import numpy as np
from compare_report import table
from floor import (
    check_against_trace,
    is_matrix_product,
    step_products,
    time_floor,
    traced_products,
)
from machine import commit, kind, machine

from minitransformer import functional as F
from minitransformer.autograd import engine
from minitransformer.autograd.function import Function
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam

HERE = Path(__file__).resolve().parent
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
clock = time.perf_counter
ZERO = {"calls": 0, "products": 0.0, "sums": 0.0, "forward": 0.0, "backward": 0.0,
        "optimizer": 0.0}


def pin_threads(threads: int, argv: list[str]) -> None:
    """As compare_torch.py: BLAS reads its thread count when it loads, so run again with it
    set (and OPENBLAS_THREAD_TIMEOUT=4, which the library sets for itself) unless it is."""
    wanted = {**dict.fromkeys(THREAD_VARIABLES, str(threads)),
              "OPENBLAS_THREAD_TIMEOUT": os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4")}
    if any(os.environ.get(name) != value for name, value in wanted.items()):
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv],
                  {**os.environ, **wanted})


# ----------------------------------------------------------------------------- timers

def _function_classes() -> list[type]:
    """Every autograd Function class of the library (imported by now), subclasses too."""
    found, todo = [], [Function]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


@contextlib.contextmanager
def profiled():
    """Within the block, records (name, phase, start, end) of every Function's forward and
    backward (the outermost on each thread; the subclass's name) and of the engine's
    ``_send``, and every numpy.matmul call (floor.traced_products). Yields (records, calls)."""
    records: list[tuple] = []
    local = threading.local()

    def timer(original, phase):
        def timed(self, *args):
            if getattr(local, "inside", False):
                return original(self, *args)
            local.inside, start = True, clock()
            try:
                return original(self, *args)
            finally:
                records.append((type(self).__name__, phase, start, clock()))
                local.inside = False
        return timed

    patched = [(cls, name, cls.__dict__[name]) for cls in _function_classes()
               for name in ("forward", "backward") if name in cls.__dict__]
    send = engine._send

    def timed_send(*args):
        start = clock()
        try:
            return send(*args)
        finally:
            records.append(("engine: gradient accumulation", "backward", start, clock()))

    for cls, name, original in patched:
        setattr(cls, name, timer(original, name))
    engine._send = timed_send
    try:
        with traced_products(clock) as calls:
            yield records, calls
    finally:
        engine._send = send
        for cls, name, original in patched:
            setattr(cls, name, original)


def merged(intervals: list[tuple]) -> tuple[list, list]:
    """The union of (start, end) intervals as sorted, disjoint (starts, ends)."""
    starts: list[float] = []
    ends: list[float] = []
    for start, end in sorted(intervals):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def covered(union: tuple[list, list], start: float, end: float) -> float:
    """Seconds of [start, end] inside the union (``merged``)."""
    starts, ends = union
    total = 0.0
    i = max(0, bisect.bisect_right(starts, start) - 1)
    while i < len(starts) and starts[i] < end:
        total += max(0.0, min(end, ends[i]) - max(start, starts[i]))
        i += 1
    return total


# ----------------------------------------------------------------------------- the step

def make_step(model, optimizer, batch, phases: dict | None = None):
    """One training step; with ``phases``, the (start, end) of each of its four parts."""
    src, tgt_in, tgt_out = batch

    def step():
        t0 = clock()
        optimizer.zero_grad()
        t1 = clock()
        logits = model(src, tgt_in)                                     # (B, T, V)
        loss = F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=0)
        t2 = clock()
        loss.backward()
        t3 = clock()
        optimizer.step()
        t4 = clock()
        if phases is not None:
            phases.update(zero_grad=(t0, t1), forward=(t1, t2), backward=(t2, t3),
                          adam=(t3, t4))
    return step


def profile_one(step, phases: dict) -> dict:
    """One profiled step: the step's wall time, its time in matrix products, and each part's
    seconds (ZERO's keys: in products, in sums, the rest in forward, backward or the
    optimizer) and calls."""
    with profiled() as (records, calls):
        step()
    products = merged([(c["start"], c["end"]) for c in calls if is_matrix_product(c)])
    sums = merged([(c["start"], c["end"]) for c in calls if not is_matrix_product(c)])
    parts: dict = defaultdict(lambda: dict(ZERO))
    inside = dict.fromkeys(("forward", "backward"), 0.0)
    for name, phase, start, end in records:
        part = parts[name]
        in_products = covered(products, start, end)
        if phase == "forward" or name.startswith("engine"):
            part["calls"] += 1
        part["products"] += in_products
        part["sums"] += covered(sums, start, end)
        part[phase] += end - start - in_products
        inside[phase] += end - start
    span = {phase: end - start for phase, (start, end) in phases.items()}
    # what no Function covers (no matrix products there: the step's total says so)
    for name, phase, seconds in (
            ("forward: modules' code, Functions' bookkeeping", "forward",
             span["forward"] - inside["forward"]),
            ("engine: the walk of the graph", "backward", span["backward"] - inside["backward"]),
            ("Adam step", "optimizer", span["adam"]),
            ("zero_grad", "optimizer", span["zero_grad"])):
        parts[name]["calls"] = 1
        parts[name][phase] += seconds
    step_start, step_end = phases["zero_grad"][0], phases["adam"][1]
    return {"seconds": step_end - step_start,
            "products": covered(products, step_start, step_end),
            "parts": {name: dict(part) for name, part in parts.items()}}


def mean_profile(profiles: list[dict]) -> dict:
    """The mean of each figure over the profiled steps."""
    names = {name for p in profiles for name in p["parts"]}
    parts = {name: {key: statistics.fmean(p["parts"].get(name, ZERO)[key] for p in profiles)
                    for key in ZERO} for name in names}
    for part in parts.values():
        part["rest"] = part["forward"] + part["backward"] + part["optimizer"]
    return {"seconds": statistics.fmean(p["seconds"] for p in profiles),
            "products": statistics.fmean(p["products"] for p in profiles),
            "parts": dict(sorted(parts.items(), key=lambda kv: -kv[1]["rest"]))}


# ----------------------------------------------------------------------------- tables

def summary_table(result: dict) -> str:
    step, floor, prof = result["step"]["median_s"], result["floor"]["seconds"], result["profile"]
    rest = prof["seconds"] - prof["products"]
    rows = [["step (median, not profiled)", f"{step * 1e3:,.0f}", f"{step / floor:.2f}"],
            ["matmul floor (the products alone)", f"{floor * 1e3:,.0f}", "1.00"],
            ["profiled step", f"{prof['seconds'] * 1e3:,.0f}", f"{prof['seconds'] / floor:.2f}"],
            ["  in matrix products", f"{prof['products'] * 1e3:,.0f}",
             f"{prof['products'] / floor:.2f}"],
            ["  the rest", f"{rest * 1e3:,.0f}", f"{rest / floor:.2f}"]]
    return table(["", "ms", "/ floor"], rows)


def products_table(result: dict) -> str:
    """Each Function's matrix products in the profiled step against the same ones alone."""
    alone, parts = result["floor"]["by_function"], result["profile"]["parts"]
    rows = [[name, f"{parts[name]['products'] * 1e3:,.0f}", f"{seconds * 1e3:,.0f}",
             f"{parts[name]['products'] / seconds:.2f}"]
            for name, seconds in sorted(alone.items(), key=lambda kv: -kv[1]) if name in parts]
    return table(["matrix products of", "in the step ms", "alone ms", "in the step / alone"],
                 rows)


def parts_table(result: dict) -> str:
    prof = result["profile"]
    rest = prof["seconds"] - prof["products"]
    rows = [[name, f"{p['calls']:.0f}", f"{p['products'] * 1e3:.1f}",
             f"{p['forward'] * 1e3:.1f}", f"{p['backward'] * 1e3:.1f}",
             f"{p['optimizer'] * 1e3:.1f}", f"{p['rest'] * 1e3:.1f}", f"{p['sums'] * 1e3:.1f}",
             f"{p['rest'] / rest:.1%}"]
            for name, p in prof["parts"].items()]
    return table(["part", "calls", "in products ms", "rest: forward ms", "backward ms",
                  "optimizer ms", "rest ms", "of which sums ms", "share of the rest"], rows)


def report(result: dict) -> str:
    return (f"{result['config_name']}, L = {result['length']}, batch {result['batch']}, "
            f"{result['threads']} threads; {result['machine']['cpu']}"
            + (f" ({result['machine']['blas']})" if "blas" in result["machine"] else "")
            + f"; commit {result['commit']}; mean of {result['profiled']} profiled steps.\n\n"
            + summary_table(result) + "\n\n" + products_table(result) + "\n\n"
            + parts_table(result) + "\n")


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps, not profiled")
    parser.add_argument("--profiled", type=int, default=3, help="profiled steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", help="JSON (default bench/results/profile_step.<machine>"
                        "[.<config>-L<length>].json; the Markdown beside it)")
    args = parser.parse_args(argv)
    pin_threads(args.threads, argv)
    mt.set_num_threads(args.threads)
    if args.output is None:
        case = "" if (args.config, args.length) == ("small", 32) else \
            f".{args.config}-L{args.length}"
        args.output = str(HERE / "results" / f"profile_step.{kind()}{case}.json")

    mt.manual_seed(0)
    config = TransformerConfig.named(args.config, args.vocab_size)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=1e-4)
    B, L = max(1, args.tokens // args.length), args.length
    rng = np.random.default_rng(0)
    tgt = rng.integers(4, args.vocab_size, size=(B, L + 1))
    batch = (rng.integers(4, args.vocab_size, size=(B, L)), np.ascontiguousarray(tgt[:, :-1]),
             np.ascontiguousarray(tgt[:, 1:]))
    load_at_start = os.getloadavg()[0]  # another process on the cores slows every part
    phases: dict = {}
    step = make_step(model, optimizer, batch, phases)
    print(f"{args.config}, L = {L}, batch {B}, {args.threads} threads", flush=True)

    products = step_products(config, B, L, L)
    with traced_products() as calls:  # the warm-up step: the floor's list is the step's
        step()
    check_against_trace(products, calls)
    seconds = []
    for _ in range(args.repeats):
        start = clock()
        step()
        seconds.append(clock() - start)
    print(f"step: median {statistics.median(seconds):.3f} s of {args.repeats}", flush=True)
    floor = time_floor(products, args.threads)
    print(f"matmul floor: {floor['seconds']:.3f} s", flush=True)
    profiles = [profile_one(step, phases) for _ in range(args.profiled)]

    result = {
        "benchmark": "one training step: matrix products against the matmul floor, and the "
                     "rest by autograd Function, engine, modules and Adam",
        "config_name": args.config, "config": config.to_dict(), "length": L, "batch": B,
        "threads": args.threads, "machine": machine(), "kind": kind(), "commit": commit(),
        "load_average_at_start": load_at_start,
        "step": {"seconds": seconds, "median_s": statistics.median(seconds)},
        "floor": floor, "profiled": args.profiled, "profile": mean_profile(profiles),
        "profiles": profiles,
    }
    text = report(result)
    print("\n" + text, flush=True)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n")
    output.with_suffix(".md").write_text(text)
    print(f"wrote {output} and {output.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
