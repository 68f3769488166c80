"""What one operation costs in Python, beside the NumPy call it makes.

    python bench/op_overhead.py [--output FILE]

Every operation on Tensors goes through ``Function.__call__`` (inputs checked, forward run,
the result wrapped in a Tensor, the graph recorded when gradients are on). On the small
arrays of a decoding step that bookkeeping is a visible part of the time, and on two threads
it is time spent holding the GIL. This times a few operations on small float32 tensors
under ``no_grad`` (as decoding runs them) and with a graph, next to the bare NumPy call, in
microseconds per call (the best of five repeats of 20,000 calls, one thread).

Writes JSON (default bench/results/op_overhead.json) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer import functional as F

HERE = Path(__file__).resolve().parent


def cases() -> list[tuple[str, object, object]]:
    """(name, the operation on Tensors, the bare NumPy call it makes)."""
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((4, 8, 16)).astype(np.float32), requires_grad=True)
    w = mt.tensor(rng.standard_normal((16, 16)).astype(np.float32), requires_grad=True)
    b = mt.tensor(rng.standard_normal(16).astype(np.float32), requires_grad=True)
    xd, wd, bd = x.data, w.data, b.data
    return [
        ("reshape", lambda: x.reshape(4, 128), lambda: xd.reshape(4, 128)),
        ("transpose", lambda: x.transpose(0, 2, 1), lambda: xd.transpose(0, 2, 1)),
        ("add (broadcast)", lambda: x + b, lambda: xd + bd),
        ("linear", lambda: F.linear(x, w, b), lambda: xd @ wd.T + bd),
    ]


def best_us(function, number: int = 20_000, repeat: int = 5) -> float:
    return min(timeit.repeat(function, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(HERE / "results" / "op_overhead.json"))
    parser.add_argument("--label", default="this checkout", help="which code was measured")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    rows = []
    for name, operation, bare in cases():
        with mt.no_grad():
            no_grad = best_us(operation)
        rows.append({"operation": name, "no_grad_us": no_grad, "graph_us": best_us(operation),
                     "numpy_us": best_us(bare)})
    results = {"machine": {"platform": platform.platform(), "python": sys.version.split()[0],
                           "numpy": np.__version__, "code": args.label},
               "operations": rows}
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print("| operation | no_grad µs | with graph µs | NumPy alone µs |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['operation']} | {row['no_grad_us']:.1f} | {row['graph_us']:.1f} | "
              f"{row['numpy_us']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
