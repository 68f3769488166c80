"""``minitransformer gradcheck``: every hand-written backward against finite differences."""

from __future__ import annotations

import argparse
import json
import sys

from .. import backend
from .values import at_least


def add_parser(commands: argparse._SubParsersAction) -> None:
    gradcheck = commands.add_parser(
        "gradcheck",
        help="prove every hand-written backward against finite differences",
        description="Check the backward of every Function and every Module (parameters "
                    "included, up to the whole Transformer with its loss) against central "
                    "finite differences in float64, through a random upstream gradient, and "
                    "print one row per case. Exits with status 1 if any row fails.",
    )
    gradcheck.add_argument("--filter", metavar="TEXT",
                           help="only the cases whose name contains TEXT (e.g. 'matmul')")
    gradcheck.add_argument("--seed", type=at_least(0), default=0,
                           help="seed of the inputs, upstream gradients and directions "
                                "(default 0)")
    gradcheck.add_argument("--json", action="store_true",
                           help="print the rows as a JSON list instead of a table")
    gradcheck.add_argument("--device", choices=["cpu", "cuda"], default=None,
                           help="where to run (default: $MINITRANSFORMER_DEVICE or cpu)")
    gradcheck.add_argument("--kernels", choices=["numpy", "compiled"], default=None,
                           help="on the CPU, NumPy's code or the compiled kernels of "
                                "minitransformer[fast] (default: compiled where Numba is "
                                "installed)")
    gradcheck.set_defaults(run=run)



def run(args: argparse.Namespace) -> int:
    from .. import get_compiled_kernels, set_compiled_kernels
    from ..verify.module_cases import full_suite

    if args.kernels is not None:
        try:
            set_compiled_kernels(args.kernels == "compiled")
        except ImportError as exc:
            print(f"minitransformer gradcheck: {exc}", file=sys.stderr)
            return 2
    kernels = "compiled" if get_compiled_kernels() and backend.current_device() == "cpu" \
        else "numpy" if backend.current_device() == "cpu" else "cuda"
    cases = full_suite(args.filter)
    if not cases:
        print(f"minitransformer gradcheck: no case name contains {args.filter!r}; run without "
              "--filter to see them all.", file=sys.stderr)
        return 2
    rows = []
    if not args.json:
        print(f"{'name':<28} {'inputs':<58} {'max abs err':>11} {'max rel err':>11} "
              f"{'result':>6} {'time':>8}  case")
    for case, run in cases:
        report = run(case, seed=args.seed)
        row = {"name": report.name, "shapes": report.shapes,
               "max_abs_error": report.max_abs_error, "max_rel_error": report.max_rel_error,
               "passed": report.passed, "seconds": round(report.seconds, 4)}
        rows.append(row)
        if not args.json:  # what the case exercises last, so that the columns line up
            shapes, _, note = row["shapes"].partition(" [")
            print(f"{row['name']:<28} {shapes:<58} {row['max_abs_error']:>11.2e} "
                  f"{row['max_rel_error']:>11.2e} {'pass' if row['passed'] else 'FAIL':>6} "
                  f"{1000 * row['seconds']:>6.0f}ms  {note.removesuffix(']')}".rstrip(),
                  flush=True)
    n_failed = sum(not row["passed"] for row in rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"\n{len(rows) - n_failed} passed, {n_failed} failed "
              f"(float64, device {backend.current_device()}, {kernels} kernels, "
              f"seed {args.seed})")
    return 1 if n_failed else 0
