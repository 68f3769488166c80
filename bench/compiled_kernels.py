"""The compiled CPU kernels (minitransformer[fast], Numba) against NumPy's code, part by part
and on whole training steps.

    pip install -e ".[fast]" && python bench/compiled_kernels.py
    # -> bench/results/compiled_kernels.<machine>.json

Each part is timed as the layers call it in a `small` step of about 4,000 target tokens
(float32, at --threads threads, the library's workers running the blocks either way): the
post-LN residual's forward and backward on (4,000, 256), layer norm alone, the feed-forward
layer's bias and ReLU on (4,000, 1,024) and their backward, the embedding's backward into an
(8,000, 256) table and Adam's update of the `small` model's parameters. Both paths run in
one process, alternating call by call (``set_compiled_kernels``), after a warm-up that
compiles the kernels; the median of --repeats is kept. Then whole training steps of `small`
at each of --lengths, alternating the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from machine import commit, kind, machine

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30, help="calls per part and path")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--steps", type=int, default=6, help="steps per length and path")
    parser.add_argument("--output", help="JSON (default bench/results/"
                                         "compiled_kernels.<machine>.json)")
    return parser.parse_args(argv)


def alternate(parts: dict, repeats: int) -> dict:
    """{name: {"numpy": ms, "compiled": ms}}: each part's call, NumPy's and the compiled
    kernels' in turn, the median of ``repeats`` each."""
    import minitransformer as mt

    times: dict = {name: {"numpy": [], "compiled": []} for name in parts}
    for name, call in parts.items():
        for on in (False, True):        # warm-up: compiles, fills the allocator's free lists
            mt.set_compiled_kernels(on)
            call()
        for _ in range(repeats):
            for on, path in ((False, "numpy"), (True, "compiled")):
                mt.set_compiled_kernels(on)
                start = time.perf_counter()
                call()
                times[name][path].append(time.perf_counter() - start)
    return {name: {path: round(1e3 * statistics.median(t), 3) for path, t in paths.items()}
            for name, paths in times.items()}


def parts_of_a_step(rng) -> dict:
    """The calls timed: each a closure over arrays of a `small` step's shapes."""
    import numpy as np

    from minitransformer.functional.embedding import Embedding
    from minitransformer.functional.linalg import LinearReLU
    from minitransformer.functional.normalization import LayerNorm
    from minitransformer.functional.residual import DropoutAddLayerNorm
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.optim import Adam

    N, C, d_ff, V = 4000, 256, 1024, 8000

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    x, h, dout = normal(N, C), normal(N, C), normal(N, C)
    gain, bias = normal(C), normal(C)
    hidden, w1, b1, d_hidden = normal(N, C), normal(d_ff, C) / 16, normal(d_ff), normal(N, d_ff)
    ids = rng.integers(0, V, size=N)

    def forward_and_backward(make, inputs, upstream):
        def forward():
            function = make()
            function.needs_input_grad = (True,) * len(inputs)
            function.forward(*inputs)
            return function
        function = forward()
        return forward, lambda: function.backward(upstream)

    residual = forward_and_backward(lambda: DropoutAddLayerNorm(0.1), (x, h, gain, bias), dout)
    norm = forward_and_backward(LayerNorm, (x, gain, bias), dout)
    relu = forward_and_backward(LinearReLU, (hidden, w1, b1), d_hidden)
    embedding = Embedding()
    embedding.needs_input_grad = (False, True)
    embedding.forward(ids, normal(V, C))
    model = Transformer(TransformerConfig.named("small", V))
    params = model.parameters()
    for p in params:
        p.grad = np.full(p.shape, 1e-3, np.float32)
    adam = Adam(params, lr=1e-4)
    return {"residual forward (4000, 256)": residual[0],
            "residual backward": residual[1],
            "layer norm forward (4000, 256)": norm[0],
            "layer norm backward": norm[1],
            "linear+ReLU forward (4000, 256) -> 1024": relu[0],
            "linear+ReLU backward": relu[1],
            "embedding backward (4000 ids, 8000 x 256)": lambda: embedding.backward(dout),
            f"Adam update ({sum(p.size for p in params):,} parameters)": adam.step}


def steps(lengths: list[int], n_steps: int) -> list[dict]:
    """Whole `small` training steps, the two paths alternating step by step."""
    import numpy as np

    import minitransformer as mt
    from minitransformer import functional as F
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.optim import Adam

    rows = []
    for L in lengths:
        mt.manual_seed(0)
        rng = np.random.default_rng(0)
        model = Transformer(TransformerConfig.named("small", 8000))
        optimizer = Adam(model.parameters(), lr=1e-4)
        B = 4000 // L
        src, tgt = rng.integers(4, 8000, size=(B, L)), rng.integers(4, 8000, size=(B, L + 1))

        def step(model=model, optimizer=optimizer, src=src, tgt=tgt):
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], label_smoothing=0.1,
                                   ignore_index=0)
            loss.backward()
            optimizer.step()
            return time.perf_counter() - start
        times: dict = {"numpy": [], "compiled": []}
        for on in (False, True):
            mt.set_compiled_kernels(on)
            step()
        for _ in range(n_steps):
            for on, path in ((False, "numpy"), (True, "compiled")):
                mt.set_compiled_kernels(on)
                times[path].append(step())
        row = {"length": L, "batch": B,
               **{f"{path} s": round(statistics.median(t), 4) for path, t in times.items()}}
        row["speed-up"] = round(row["numpy s"] / row["compiled s"], 3)
        rows.append(row)
        print(f"  small L={L:<4} numpy {row['numpy s']:.3f} s  compiled "
              f"{row['compiled s']:.3f} s  speed-up {row['speed-up']:.2f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if any(os.environ.get(v) != str(args.threads) for v in THREAD_VARIABLES):
        # BLAS reads its thread count at import: run again with it set, before NumPy loads
        env = {**os.environ, **{v: str(args.threads) for v in THREAD_VARIABLES}}
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    import numpy as np

    import minitransformer as mt
    if not mt.get_compiled_kernels():
        print("compiled_kernels: the compiled kernels are not available (pip install -e "
              "'.[fast]', and leave MINITRANSFORMER_COMPILED unset).", file=sys.stderr)
        return 1
    print(f"{args.threads} threads; each part's median of {args.repeats} calls, ms", flush=True)
    parts = alternate(parts_of_a_step(np.random.default_rng(0)), args.repeats)
    for name, t in parts.items():
        print(f"  {name:<44} numpy {t['numpy']:8.3f}  compiled {t['compiled']:8.3f}  "
              f"speed-up {t['numpy'] / t['compiled']:.2f}", flush=True)
    rows = steps(args.lengths, args.steps)
    mt.set_compiled_kernels(True)
    machine_info = machine()
    import numba
    machine_info["kernels"] = f"both, alternating (numba {numba.__version__})"
    result = {"benchmark": "compiled CPU kernels (Numba) against NumPy's code",
              "machine": machine_info, "commit": commit(), "threads": args.threads,
              "parts_ms": parts, "small_steps": rows}
    default = Path(__file__).parent / "results" / f"compiled_kernels.{kind()}.json"
    output = Path(args.output or default)
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
