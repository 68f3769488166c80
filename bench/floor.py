"""The matmul floor of a training step: its matrix products alone, timed on the same BLAS.

    products = step_products(config, B, S, T)   every product of one step, forward and backward
    floor = time_floor(products, threads)        each one warm, alone: the sum of their times
    with traced_products() as calls: step(...)   the products a real step hands to numpy.matmul
    check_against_trace(products, calls)         the list and the step agree

A NumPy Transformer cannot take less time than its matrix products take on NumPy's BLAS: the
rest of a step (layer norm, softmax, dropout, the loss, Adam, the graph) only adds to them.
So the products of one step, run alone with nothing in between (float32, warm, operands laid
out as the step has them, outputs preallocated), are the floor such an implementation can
reach; a step's time over that floor says how much the rest costs.

The products, with N_s = B·S source and N_t = B·T target tokens, C = d_model, F = d_ff,
V the vocabulary, H heads of D = C / H (nn/attention.py, functional/linalg.py):

    linear x Wᵀ     forward  (N, C_in) @ (C_in, C_out)    Wᵀ a transposed view of W
                    dW       (C_out, N) @ (N, C_in)       doutᵀ a transposed view of dout
                    dx       (N, C_out) @ (C_out, C_in)
        encoder layer: Q, K, V as one product (C_out = 3C), W^O, w_1 (F), w_2 (C_in = F),
        all on N_s rows; decoder layer: the same on N_t rows, and cross-attention's W^Q and
        W^O on N_t, its K, V as one product (2C) on the memory's N_s; the tied output
        projection (N_t, C) @ (C, V).
    attention       per (batch, head): forward Q Kᵀ (T, D) @ (D, S) and P V (T, S) @ (S, D);
                    backward dV = Pᵀ dout, dP = dout Vᵀ, dQ = dS K, dK = dSᵀ Q. Q, K and V
                    are views of the projection's output split into heads, (B, T, H, D) in
                    memory; the attention output and dout are laid out the same way, and dQ,
                    dK, dV as Q, K, V are (one array, as their projection: _packed.py).

Each distinct product is timed both ways the run's threads can share it, and the faster
counts: one numpy.matmul call with BLAS at the run's thread count, and the product cut into
one block per thread (of its leading batch axis, else of its output's rows or columns), each
block one numpy.matmul on single-threaded BLAS, on a pool of that many threads (what the
library does; on a loaded machine BLAS's own spinning threads can be a thousand times slower).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits


@dataclass(frozen=True)
class Operand:
    """An array of a product: its shape, and how it lies in memory. ``layout`` is "C"
    (contiguous), "T" (the transposed view of a contiguous array: Wᵀ, doutᵀ, Pᵀ), or
    ("heads", i, n): (B, H, L, D) split from part i of n of a (B, L, n·H·D) projection
    (n = 1: one projection of width H·D), and ("heads_T", i, n) the same with its last two
    axes swapped (Kᵀ, Vᵀ)."""

    shape: tuple
    layout: str | tuple = "C"

    def make(self, rng: np.random.Generator) -> np.ndarray:
        """A float32 array of this shape and layout, of random values (never denormals)."""
        def normal(shape):
            return rng.standard_normal(shape, dtype=np.float32)
        if self.layout == "C":
            return normal(self.shape)
        if self.layout == "T":
            return normal(self.shape[:-2] + self.shape[:-3:-1]).swapaxes(-1, -2)
        what, i, n = self.layout
        B, H = self.shape[:2]
        L, D = self.shape[2:] if what == "heads" else self.shape[:1:-1]
        heads = normal((B, L, n, H, D))[:, :, i].transpose(0, 2, 1, 3)   # (B, H, L, D)
        return heads if what == "heads" else heads.swapaxes(-1, -2)


@dataclass(frozen=True)
class Product:
    """``count`` products a @ b -> out of one step, all of these shapes and layouts, made by
    the autograd Function named ``function``."""

    name: str
    a: Operand
    b: Operand
    out: Operand
    count: int = 1
    function: str = "Linear"

    @property
    def flops(self) -> int:
        """2·M·K·N per matrix, times the batch axes, times ``count``."""
        return self.count * flops_of(self.a.shape, self.b.shape)

    @property
    def key(self) -> tuple:
        """What the time depends on: the operands' shapes and layouts, not the name."""
        return (self.a, self.b, self.out)


def flops_of(a_shape: tuple, b_shape: tuple) -> int:
    """FLOPs of one (..., M, K) @ (..., K, N) product: 2·M·K·N per matrix of the batch."""
    batch = 1
    for n in a_shape[:-2]:
        batch *= n
    return 2 * batch * a_shape[-2] * a_shape[-1] * b_shape[-1]


def linear_products(name: str, N: int, C_in: int, C_out: int, count: int,
                    function: str = "Linear") -> list[Product]:
    """y = x Wᵀ (N, C_in) -> (N, C_out), and its backward dW = doutᵀ x, dx = dout W."""
    return [
        Product(f"{name}: y = x Wᵀ", Operand((N, C_in)), Operand((C_in, C_out), "T"),
                Operand((N, C_out)), count, function),
        Product(f"{name}: dW = doutᵀ x", Operand((C_out, N), "T"), Operand((N, C_in)),
                Operand((C_out, C_in)), count, function),
        Product(f"{name}: dx = dout W", Operand((N, C_out)), Operand((C_out, C_in)),
                Operand((N, C_in)), count, function),
    ]


def attention_products(name: str, B: int, H: int, T: int, S: int, D: int, q: tuple,
                       kv: tuple, count: int) -> list[Product]:
    """The six batched products of attention of T queries on S keys over (B, H): q and kv
    are the ("heads", i, n) layouts of Q and of K (V is the next part of K's projection)."""
    k, v = ("heads", *kv), ("heads", kv[0] + 1, kv[1])
    kT, vT = ("heads_T", *kv), ("heads_T", kv[0] + 1, kv[1])
    heads = ("heads", 0, 1)              # the output and dout: (B, T, H, D) in memory
    P, PT = Operand((B, H, T, S)), Operand((B, H, S, T), "T")
    return [Product(f"{name}: {what}", a, b, out, count, "ScaledDotProductAttention")
            for what, a, b, out in (
        ("S = Q Kᵀ", Operand((B, H, T, D), ("heads", *q)), Operand((B, H, D, S), kT), P),
        ("out = P V", P, Operand((B, H, S, D), v), Operand((B, H, T, D), heads)),
        ("dV = Pᵀ dout", PT, Operand((B, H, T, D), heads), Operand((B, H, S, D), v)),
        ("dP = dout Vᵀ", Operand((B, H, T, D), heads), Operand((B, H, D, S), vT), P),
        ("dQ = dS K", P, Operand((B, H, S, D), k), Operand((B, H, T, D), ("heads", *q))),
        ("dK = dSᵀ Q", PT, Operand((B, H, T, D), ("heads", *q)), Operand((B, H, S, D), k)),
    )]


def step_products(config, B: int, S: int, T: int) -> list[Product]:
    """Every matrix product of one training step of ``config`` (a TransformerConfig) on B
    sentences of S source and T target tokens, forward and backward, as the model runs them."""
    C, F, V, N, H = (config.d_model, config.d_ff, config.tgt_vocab_size, config.n_layers,
                     config.n_heads)
    D, Ns, Nt = C // H, B * S, B * T
    return [
        *linear_products("encoder self-attention Q, K, V", Ns, C, 3 * C, N),
        *attention_products("encoder self-attention", B, H, S, S, D, (0, 3), (1, 3), N),
        *linear_products("encoder self-attention W^O", Ns, C, C, N),
        *linear_products("encoder feed-forward w_1", Ns, C, F, N, "FeedForward"),
        *linear_products("encoder feed-forward w_2", Ns, F, C, N, "FeedForward"),
        *linear_products("decoder self-attention Q, K, V", Nt, C, 3 * C, N),
        *attention_products("decoder self-attention", B, H, T, T, D, (0, 3), (1, 3), N),
        *linear_products("decoder self-attention W^O", Nt, C, C, N),
        *linear_products("decoder cross-attention Q", Nt, C, C, N),
        *linear_products("decoder cross-attention K, V", Ns, C, 2 * C, N),
        *attention_products("decoder cross-attention", B, H, T, S, D, (0, 1), (0, 2), N),
        *linear_products("decoder cross-attention W^O", Nt, C, C, N),
        *linear_products("decoder feed-forward w_1", Nt, C, F, N, "FeedForward"),
        *linear_products("decoder feed-forward w_2", Nt, F, C, N, "FeedForward"),
        *linear_products("output projection (tied)", Nt, C, V, 1),
    ]


# ----------------------------------------------------------------------------- the check

@contextlib.contextmanager
def traced_products(clock=time.perf_counter):
    """Within the block, every numpy.matmul call is recorded (on any thread) as a dict:
    shapes ``a`` and ``b``, ``thread``, ``start`` and ``end`` (seconds of ``clock``). The
    library calls numpy.matmul through the module (``xp.matmul``), so all of its products
    pass here, whatever blocks it cuts them into."""
    calls: list[dict] = []
    matmul = np.matmul

    def recording(a, b, *args, **kwargs):
        start = clock()
        try:
            return matmul(a, b, *args, **kwargs)
        finally:
            calls.append({"a": np.shape(a), "b": np.shape(b), "start": start, "end": clock(),
                          "thread": threading.get_ident()})

    np.matmul = recording
    try:
        yield calls
    finally:
        np.matmul = matmul


def is_matrix_product(call: dict) -> bool:
    """A matrix-matrix product; the layers' row and column sums are matrix-vector ones
    (functional/_reduce.py) and belong to the rest of the step."""
    return len(call["a"]) >= 2 and len(call["b"]) >= 2


def flops_by_inner_size(shapes) -> Counter:
    """FLOPs per inner dimension K of (a shape, b shape) pairs: cutting a product into blocks
    of rows, columns or batch entries keeps K and the FLOPs, so the step's calls, however the
    library shares them among its threads, must give the list's figures."""
    total: Counter = Counter()
    for a, b in shapes:
        total[a[-1]] += flops_of(a, b)
    return total


def check_against_trace(products: list[Product], calls: list[dict]) -> None:
    """Raise unless the matrix products a real step made (``traced_products``) have the
    list's FLOPs, in total and for each inner dimension."""
    expected = flops_by_inner_size((p.a.shape, p.b.shape) for p in products
                                   for _ in range(p.count))
    traced = flops_by_inner_size((c["a"], c["b"]) for c in calls if is_matrix_product(c))
    if traced != expected:
        differ = {k: (traced[k], expected[k]) for k in set(traced) | set(expected)
                  if traced[k] != expected[k]}
        raise RuntimeError(
            "the floor's list of products does not match the step's numpy.matmul calls: "
            f"{sum(traced.values()):,} FLOPs traced against {sum(expected.values()):,} listed; "
            "differing (inner size: traced, listed): "
            + ", ".join(f"{k}: {t:,}, {e:,}" for k, (t, e) in sorted(differ.items()))
            + ". Update bench/floor.py's step_products to the model's products.")


# ----------------------------------------------------------------------------- the timing

def _blocks(a, b, out, parts: int) -> list[tuple]:
    """a @ b -> out cut into ``parts`` blocks: of the leading batch axis, else of the
    output's rows (its columns when it has fewer rows than columns)."""
    def shares(n):
        bounds = [n * i // parts for i in range(parts + 1)]
        return [slice(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]
    if out.ndim > 2:
        return [(a[s], b[s], out[s]) for s in shares(out.shape[0])]
    M, N = out.shape
    if M >= N:
        return [(a[s], b, out[s]) for s in shares(M)]
    return [(a, b[:, s], out[:, s]) for s in shares(N)]


def _median_seconds(run, repeats: int, give_up: float = float("inf")) -> float:
    """The median time of ``repeats`` calls after a warm one; only the warm-up's time when
    that took longer than ``give_up`` seconds."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    if first > give_up:
        return first
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def time_product(product: Product, threads: int, pool, repeats: int, rng) -> dict:
    """Median seconds of one of ``product``'s calls, one call of BLAS at ``threads`` threads
    ("blas_s") and one block per thread on single-threaded BLAS ("blocks_s"), and the faster."""
    a, b, out = (operand.make(rng) for operand in (product.a, product.b, product.out))
    result = {}
    if threads > 1:
        blocks = _blocks(a, b, out, threads)
        with threadpool_limits(limits=1, user_api="blas"):
            result["blocks_s"] = _median_seconds(
                lambda: list(pool.map(lambda block: np.matmul(*block[:2], out=block[2]),
                                      blocks)), repeats)
    give_up = 20 * result.get("blocks_s", float("inf"))
    with threadpool_limits(limits=threads, user_api="blas"):
        result["blas_s"] = _median_seconds(lambda: np.matmul(a, b, out=out), repeats, give_up)
    result["seconds"] = min(result.values())
    return result


def time_floor(products: list[Product], threads: int, repeats: int = 5, seed: int = 0) -> dict:
    """The floor: Σ count × (the faster median time of each product alone). Products of the
    same shapes and layouts (the layers of a stack, encoder and decoder when S = T) are timed
    once. Returns the seconds, the FLOPs and each product's entry."""
    rng = np.random.default_rng(seed)
    timed: dict[tuple, dict] = {}
    entries = []
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for p in products:
            if p.key not in timed:
                timed[p.key] = time_product(p, threads, pool, repeats, rng)
            entries.append({"name": p.name, "function": p.function, "count": p.count,
                            "a": list(p.a.shape), "b": list(p.b.shape), "flops": p.flops,
                            **timed[p.key]})
    by_function: dict[str, float] = {}
    for e in entries:
        by_function[e["function"]] = by_function.get(e["function"], 0.0) + e["count"] * e["seconds"]
    return {"seconds": sum(by_function.values()), "flops": sum(p.flops for p in products),
            "threads": threads, "repeats": repeats, "distinct_products": len(timed),
            "by_function": by_function, "products": entries}
