"""Would numexpr make the CPU layers' elementwise work faster? Three of the layers' chains, as
the library writes them in NumPy, against the same chain as numexpr expressions.

    pip install numexpr && python bench/numexpr_check.py  # results/numexpr_check.<machine>.json

numexpr evaluates an expression in one pass over its operands, in blocks that stay in cache,
which is what the layers' NumPy chains do by hand (``functional/_blocks.py``). The cases:

    layer norm    the forward of one block of 512 rows x 256 features, as a worker runs it
    Adam          the update of 2,000,000 float32 parameters (m, v and the parameters)
    cross-entropy exp(z - max z) and its row sums on 64 rows x 8,000 logits

Both sides float32, constants as float32 (a Python float makes numexpr compute in float64),
numexpr on one thread (the library's workers run the blocks) and, for Adam, on all of them.
The median of --repeats calls is kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from machine import commit, kind, machine

try:
    import numexpr as ne
except ImportError:  # pragma: no cover - the script's one requirement
    raise SystemExit("numexpr is not installed: pip install numexpr") from None


def median_ms(function, repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def layer_norm_cases(rng):
    x = rng.standard_normal((512, 256)).astype(np.float32)
    gain, bias = np.ones(256, np.float32), np.zeros(256, np.float32)
    ones, C, eps = np.ones(256, np.float32), np.float32(256), np.float32(1e-6)
    x_hat, y = np.empty_like(x), np.empty_like(x)

    def numpy_chain():       # functional/normalization.py, one block
        mean = (x @ ones)[:, None] / C
        centred = np.subtract(x, mean, out=x_hat)
        np.subtract(centred, (centred @ ones)[:, None] / C, out=centred)
        squares = np.multiply(centred, centred, out=y)
        rstd = 1.0 / np.sqrt((squares @ ones)[:, None] / C + eps)
        np.multiply(centred, rstd, out=centred)
        np.multiply(centred, gain, out=y)
        np.add(y, bias, out=y)

    def numexpr_chain():
        mean = (x @ ones)[:, None] / C
        ne.evaluate("x - mean", local_dict={"x": x, "mean": mean}, out=x_hat)
        shift = (x_hat @ ones)[:, None] / C
        var = ne.evaluate("sum((c - shift) ** 2, axis=1)",
                          local_dict={"c": x_hat, "shift": shift})[:, None] / C
        rstd = (1.0 / np.sqrt(var + eps)).astype(np.float32)
        ne.evaluate("(c - shift) * rstd", local_dict={"c": x_hat, "shift": shift, "rstd": rstd},
                    out=x_hat)
        ne.evaluate("c * gain + bias", local_dict={"c": x_hat, "gain": gain, "bias": bias},
                    out=y)
    return numpy_chain, numexpr_chain


def adam_cases(rng):
    n = 2_000_000
    p, g = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    m, v, scratch = np.zeros_like(p), np.zeros_like(p), np.empty_like(p)
    b1, c1, b2, c2, lr, eps = (np.float32(c) for c in (0.9, 0.1, 0.98, 0.02, 1e-3, 1e-9))

    def numpy_chain():       # optim.py's update through one scratch buffer
        np.multiply(m, b1, out=m)
        np.multiply(g, c1, out=scratch)
        np.add(m, scratch, out=m)
        np.multiply(v, b2, out=v)
        np.multiply(g, g, out=scratch)
        np.multiply(scratch, c2, out=scratch)
        np.add(v, scratch, out=v)
        np.sqrt(v, out=scratch)
        np.add(scratch, eps, out=scratch)
        np.divide(m, scratch, out=scratch)
        np.multiply(scratch, lr, out=scratch)
        np.subtract(p, scratch, out=p)

    def numexpr_chain():
        names = {"m": m, "v": v, "p": p, "g": g, "b1": b1, "c1": c1, "b2": b2, "c2": c2,
                 "lr": lr, "eps": eps}
        ne.evaluate("b1 * m + c1 * g", local_dict=names, out=m)
        ne.evaluate("b2 * v + c2 * g * g", local_dict=names, out=v)
        ne.evaluate("p - lr * m / (sqrt(v) + eps)", local_dict=names, out=p)
    return numpy_chain, numexpr_chain


def cross_entropy_cases(rng):
    z = rng.standard_normal((64, 8000)).astype(np.float32)
    e, ones = np.empty_like(z), np.ones(8000, np.float32)

    def numpy_chain():       # functional/loss.py's cached exponentials
        top = z.max(axis=1, keepdims=True)
        np.subtract(z, top, out=e)
        np.exp(e, out=e)
        return e @ ones

    def numexpr_chain():
        top = z.max(axis=1, keepdims=True)
        ne.evaluate("exp(z - top)", local_dict={"z": z, "top": top}, out=e)
        return e @ ones
    return numpy_chain, numexpr_chain


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"
                                                / f"numexpr_check.{kind()}.json"))
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    cores = ne.detect_number_of_cores()
    rows = []
    for name, cases, threads in (("layer norm, one block", layer_norm_cases, 1),
                                 ("Adam, 2M parameters", adam_cases, 1),
                                 ("Adam, 2M parameters", adam_cases, cores),
                                 ("cross-entropy exp, one block", cross_entropy_cases, 1)):
        ne.set_num_threads(threads)
        numpy_chain, numexpr_chain = cases(rng)
        rows.append({"case": name, "numexpr_threads": threads,
                     "numpy_ms": round(median_ms(numpy_chain, args.repeats), 3),
                     "numexpr_ms": round(median_ms(numexpr_chain, args.repeats), 3)})
    print("| case | numexpr threads | NumPy ms | numexpr ms | numexpr / NumPy |")
    print("|------|-----------------|----------|------------|-----------------|")
    for row in rows:
        print(f"| {row['case']} | {row['numexpr_threads']} | {row['numpy_ms']:.3f} | "
              f"{row['numexpr_ms']:.3f} | {row['numexpr_ms'] / row['numpy_ms']:.2f}× |")
    Path(args.output).write_text(json.dumps(
        {"benchmark": "numexpr against the layers' NumPy chains", "numexpr": ne.__version__,
         "numpy": np.__version__, "repeats": args.repeats, "cases": rows,
         "machine": machine(), "commit": commit()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
