"""`minitransformer train` on a machine whose cores are not all free: alone, beside a busy
process, and with one thread beside it.

    python bench/shared_cores.py        # bench/results/shared_cores.<machine>.json
    python bench/shared_cores.py --steps 100 --repeats 1

A course server, a laptop with a busy browser tab, two students on one machine: the cores are
rarely all free. Each case runs the same command, the built-in task with the tiny model and
the default threads, `--max-steps` steps and no validation before the end:

    alone          nothing else running
    beside busy    beside a neighbour process that keeps every core busy with NumPy float32
                   matrix products (1024 x 1024, its BLAS on all cores)
    1 thread       beside the same neighbour, with OMP_NUM_THREADS=1

and records the time of the training steps (the log's elapsed seconds at the last step), the
whole command (with its final validation and the test set's greedy and beam translations),
and how many products the neighbour made per second meanwhile. The cases alternate run by
run (--repeats rounds), and the table gives the median. The figure that matters is
"beside busy / alone": losing half of two cores should cost about 2 times, not 12.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import commit, kind, machine

NEIGHBOUR = """
import signal, sys, time
import numpy as np
a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
products, started = 0, time.perf_counter()
def report(*_):
    print(products / (time.perf_counter() - started), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, report)
while True:
    a @ a
    products += 1
"""

CASES = {"alone": (False, {}), "beside busy": (True, {}),
         "1 thread": (True, {"OMP_NUM_THREADS": "1"})}


def train_once(steps: int, neighbour: bool, env: dict, scratch: Path) -> dict:
    """One `minitransformer train` run; its step and total seconds, and the neighbour's rate."""
    busy = None
    rate = None
    try:  # the neighbour ends with the run, even when this script is stopped
        if neighbour:
            busy = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE,
                                    text=True)
            time.sleep(1.0)                               # the neighbour's BLAS is running
        out = Path(tempfile.mkdtemp(dir=scratch))
        command = [sys.executable, "-m", "minitransformer", "train", "--max-steps", str(steps),
                   "--eval-every", str(10 * steps), "--no-progress", "--out", str(out)]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True,
                              env={**os.environ, **env})
        total = time.perf_counter() - started
    finally:
        if busy is not None:
            busy.terminate()
            rate = float(busy.communicate(timeout=30)[0].strip() or "nan")
    if done.returncode:
        sys.exit(f"train failed ({done.returncode}): {done.stderr[-2000:]}")
    steps_logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    last = [entry for entry in steps_logged if entry.get("step") == steps and "loss" in entry]
    return {"train_seconds": last[-1]["elapsed"], "command_seconds": round(total, 2),
            "threads": re.search(r"cpu, (\d+) thread", done.stdout).group(1),
            "neighbour_products_per_s": rate}


def neighbour_alone(seconds: float = 5.0) -> float:
    """The neighbour's products per second with the machine to itself."""
    busy = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(seconds)
    finally:
        busy.terminate()
    return float(busy.communicate(timeout=30)[0].strip())


def table(results: dict, alone_rate: float) -> str:
    alone = statistics.median(r["train_seconds"] for r in results["alone"])
    lines = ["| case | steps s, median (runs) | whole command s | vs alone | "
             "neighbour products/s |",
             "|------|------------------------|-----------------|----------|"
             "----------------------|"]
    for case, runs in results.items():
        steps = statistics.median(r["train_seconds"] for r in runs)
        command = statistics.median(r["command_seconds"] for r in runs)
        rates = [r["neighbour_products_per_s"] for r in runs if r["neighbour_products_per_s"]]
        rate = f"{statistics.median(rates):.1f}" if rates else "–"
        spread = ", ".join(f"{r['train_seconds']:.1f}" for r in runs)
        lines.append(f"| {case} | {steps:.1f} ({spread}) | {command:.1f} | "
                     f"{steps / alone:.2f}× | {rate} |")
    lines.append(f"\nThe neighbour alone: {alone_rate:.1f} products/s.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the three cases")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"
                                                / f"shared_cores.{kind()}.json"))
    args = parser.parse_args(argv)
    # SIGTERM (kill, pkill) as an exit, so that the finally blocks stop the neighbour
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    results: dict[str, list] = {case: [] for case in CASES}
    alone_rate = neighbour_alone()
    with tempfile.TemporaryDirectory(prefix="shared-cores-") as scratch:
        for round_ in range(args.repeats):
            order = list(CASES) if round_ % 2 == 0 else list(CASES)[::-1]
            for case in order:
                neighbour, env = CASES[case]
                run = train_once(args.steps, neighbour, env, Path(scratch))
                results[case].append(run)
                print(f"round {round_ + 1}, {case}: {run['train_seconds']:.1f} s of steps, "
                      f"{run['command_seconds']:.1f} s in all, {run['threads']} thread(s)",
                      flush=True)
    summary = {"benchmark": "shared cores: minitransformer train (built-in task, tiny) alone, "
                            "beside a busy process, and with one thread beside it",
               "steps": args.steps, "repeats": args.repeats, "cases": results,
               "neighbour_alone_products_per_s": alone_rate,
               "machine": machine(), "commit": commit()}
    Path(args.output).write_text(json.dumps(summary, indent=1) + "\n")
    print(table(results, alone_rate))


if __name__ == "__main__":
    main()
