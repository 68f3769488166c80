"""What the kernels of NumPy's OpenBLAS do to a training step: OpenBLAS's own choice for this
processor against the kernels OPENBLAS_CORETYPE names, side by side.

    python bench/blas_kernels.py                       # own choice against Haswell's, 3 rounds
    python bench/blas_kernels.py --coretypes Haswell SkylakeX --rounds 2 --lengths 16 128

OpenBLAS reads OPENBLAS_CORETYPE once, when it loads, so every case runs in a fresh process of
its own: this script started again with the variable unset (OpenBLAS's choice) or set to
one of --coretypes. Each child measures NumPy's float32 matmul rate on three products of a
`small` step (the median of 7, in GFLOP/s), then times the `small` training step (zero grads,
forward, label-smoothed loss, backward, Adam; as bench/step.py: a warm-up step, then the
median of --repeats) at each of --lengths. The cases alternate round by round, so that the
machine's drift reaches them alike; the table gives each case's median over the rounds.
Writes bench/results/blas_kernels.<machine>.json (or --output).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

OWN = "own"  # the case with OPENBLAS_CORETYPE unset
# (rows, inner, columns) of three products of a `small` step at 4,000 tokens: the first
# feed-forward layer, its weight gradient, the tied output projection
PRODUCTS = [(4000, 256, 1024), (1024, 4000, 256), (4000, 256, 8000)]


def child(args: argparse.Namespace) -> dict:
    """One case, in this process: the matmul rates and the step times."""
    import minitransformer as mt  # first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads

    # isort: split
    import numpy as np
    from machine import machine
    from step import time_steps

    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.optim import Adam

    rng = np.random.default_rng(0)
    rates = {}
    for n, k, m in PRODUCTS:
        a = rng.standard_normal((n, k), dtype=np.float32)
        b = rng.standard_normal((k, m), dtype=np.float32)
        out = np.empty((n, m), dtype=np.float32)
        seconds = []
        for i in range(9):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            if i >= 2:  # two warm-up products
                seconds.append(time.perf_counter() - start)
        rates[f"{n}x{k}x{m}"] = 2 * n * k * m / statistics.median(seconds) / 1e9
    mt.manual_seed(0)
    config = TransformerConfig.named("small", args.vocab_size)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=1e-4)
    steps = {}
    for length in args.lengths:
        batch = max(1, args.tokens // length)
        src = rng.integers(4, args.vocab_size, size=(batch, length))
        tgt = rng.integers(4, args.vocab_size, size=(batch, length + 1))
        steps[str(length)] = statistics.median(
            time_steps(model, optimizer, src, tgt[:, :-1], tgt[:, 1:], args.repeats))
    return {"machine": machine(), "threads": mt.get_num_threads(),
            "matmul_gflops": rates, "step_s": steps}


def run_case(coretype: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype != OWN:
        env["OPENBLAS_CORETYPE"] = coretype
    command = [sys.executable, __file__, "--_child", "--lengths", *map(str, args.lengths),
               "--repeats", str(args.repeats), "--tokens", str(args.tokens),
               "--vocab-size", str(args.vocab_size)]
    # stdout only: a child's traceback or OpenBLAS's "Core not found" reaches the terminal
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coretypes", nargs="+", default=["Haswell"],
                        help="the kernels to set beside OpenBLAS's own choice")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per length")
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--output", help="JSON (default bench/results/blas_kernels.<machine>"
                                         ".json)")
    parser.add_argument("--_child", dest="child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return

    from machine import commit, kind

    cases = [OWN, *args.coretypes]
    runs: dict[str, list[dict]] = {case: [] for case in cases}
    for round_ in range(args.rounds):
        order = cases if round_ % 2 == 0 else cases[::-1]
        for case in order:
            result = run_case(case, args)
            runs[case].append(result)
            steps = ", ".join(f"L={length} {s:.3f} s" for length, s in result["step_s"].items())
            print(f"round {round_ + 1}, {case:>10}: {result['machine']['blas']}; matmul "
                  f"{statistics.median(result['matmul_gflops'].values()):.0f} GFLOP/s; "
                  f"step {steps}", flush=True)
    summary = {}
    for case, results in runs.items():
        summary[case] = {
            "blas": results[0]["machine"]["blas"],
            "matmul_gflops": {p: statistics.median(r["matmul_gflops"][p] for r in results)
                              for p in results[0]["matmul_gflops"]},
            "step_s": {length: statistics.median(r["step_s"][length] for r in results)
                       for length in results[0]["step_s"]}}
    own = summary[OWN]
    print("\n| case | NumPy's BLAS | matmul GFLOP/s | "
          + " | ".join(f"step s, L = {length}" for length in own["step_s"])
          + " | step / own choice's step |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in own["step_s"]) + " | --- |")
    for case, row in summary.items():
        speed = statistics.median(row["step_s"][length] / own["step_s"][length]
                                  for length in own["step_s"])
        print(f"| {'OPENBLAS_CORETYPE unset' if case == OWN else f'OPENBLAS_CORETYPE={case}'} "
              f"| {row['blas']} | {statistics.median(row['matmul_gflops'].values()):.0f} | "
              + " | ".join(f"{s:.3f}" for s in row["step_s"].values()) + f" | {speed:.2f} |")
    machine_info = {k: v for k, v in runs[OWN][0]["machine"].items() if k != "blas"}
    result = {"benchmark": "NumPy's OpenBLAS kernels: its own choice against OPENBLAS_CORETYPE",
              "machine": machine_info, "threads": runs[OWN][0]["threads"], "commit": commit(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "environment_coretype": os.environ.get("OPENBLAS_CORETYPE"),
              "rounds": args.rounds, "repeats": args.repeats, "tokens": args.tokens,
              "summary": summary, "runs": runs}
    output = Path(args.output or Path(__file__).parent / "results"
                  / f"blas_kernels.{kind()}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
