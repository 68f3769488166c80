"""The built-in gradient-check suite: every Function of the package, on shapes that matter.

Each ``Case`` names the operation, builds its inputs from a seeded generator on the current
device and says which function of them to differentiate. ``minitransformer gradcheck`` runs
them all and prints one row per case; the tests run the same list. Inputs avoid the places
where a function has no derivative (ReLU at 0, ties in max, log and sqrt near 0), since finite
differences measure nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import backend
from .. import functional as F
from .checker import GradcheckReport, check_function


@dataclass(frozen=True)
class Case:
    name: str                                  # the operation, e.g. "matmul"
    fn: Callable[..., Any]                     # differentiated with respect to float inputs
    make_inputs: Callable[[Any], tuple]        # generator -> inputs (float64 or int/bool)
    note: str = ""                             # what this case exercises, e.g. "broadcast"
    eps: float = 1e-6                          # the finite-difference step
    unit_dout: bool = False                    # dout = 1, as loss.backward() seeds it


# ----------------------------------------------------------------------------- inputs

def normal(*shape: int) -> Callable[[Any], Any]:
    return lambda g: g.standard_normal(shape, dtype="float64")


def positive(*shape: int) -> Callable[[Any], Any]:
    """Values in [0.5, 2): safe for log, sqrt, division and non-integer powers."""
    return lambda g: 0.5 + 1.5 * g.random(shape, dtype="float64")


def away_from_zero(*shape: int) -> Callable[[Any], Any]:
    """|values| >= 0.1: no element sits on ReLU's kink within a finite-difference step."""
    def make(g):
        x = g.standard_normal(shape, dtype="float64")
        xp = backend.get_array_module(x)
        return x + 0.1 * xp.sign(x)
    return make


def on_float32_grid(*shape: int) -> Callable[[Any], Any]:
    """Normal values rounded to multiples of 2^-12: they and their neighbours at a step of
    2^-10 are exact in float32, so a float32 round trip moves them by exactly the step."""
    def make(g):
        x = g.standard_normal(shape, dtype="float64")
        return backend.get_array_module(x).round(x * 4096) / 4096
    return make


def mask(*shape: int, p: float = 0.3) -> Callable[[Any], Any]:
    return lambda g: g.random(shape, dtype="float64") < p


def indices(high: int, *shape: int) -> Callable[[Any], Any]:
    return lambda g: g.integers(0, high, size=shape)


def inputs(*makers: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    return lambda g: tuple(make(g) for make in makers)


def fixed(values: Any, dtype: Any = None) -> Callable[[Any], Any]:
    """Given ids or mask values (nested lists) as an array on the current device."""
    return lambda g: backend.as_array(values, dtype=dtype)


def padding_mask(*lengths: int, S: int) -> Callable[[Any], Any]:
    """(B, 1, 1, S): key j of sequence b is real when j < lengths[b]; broadcasts over heads
    and queries."""
    return fixed([[[[j < n for j in range(S)]]] for n in lengths])


def targets_with_ignored(high: int, *shape: int, ignore: int = -100, p: float = 0.3):
    """Class ids in [0, high) with about a fraction p of them set to ``ignore``."""
    def make(g):
        ids = g.integers(0, high, size=shape)
        xp = backend.get_array_module(ids)
        return xp.where(g.random(shape, dtype="float64") < p, ignore, ids)
    return make


def seeded_dropout(x, p=0.3, seed=0):
    """Dropout in training mode, reseeded on every call: the same mask for every finite-
    difference evaluation, so the function being checked is deterministic."""
    backend.manual_seed(seed)
    return F.dropout(x, p, training=True)


def seeded_dropout_add_layer_norm(x, h, gain, bias, p=0.3, seed=0):
    """LayerNorm(x + Dropout(h)) in training mode, reseeded on every call (one mask)."""
    backend.manual_seed(seed)
    return F.dropout_add_layer_norm(x, h, gain, bias, p)


# ----------------------------------------------------------------------------- the suite

CASES: list[Case] = [
    # elementwise arithmetic, with broadcasting and size-1 axes
    Case("add", F.add, inputs(normal(3, 4), normal(3, 4))),
    Case("add", F.add, inputs(normal(2, 3, 4), normal(4)), "broadcast"),
    Case("add", F.add, inputs(normal(3, 1), normal(1, 4)), "size-1 axes"),
    Case("sub", F.sub, inputs(normal(2, 3, 4), normal(3, 1)), "broadcast"),
    Case("mul", F.mul, inputs(normal(3, 4), normal(3, 4))),
    Case("mul", F.mul, inputs(normal(2, 1, 4), normal(3, 1)), "broadcast"),
    Case("div", F.div, inputs(normal(3, 4), positive(4)), "broadcast"),
    Case("neg", F.neg, inputs(normal(3, 4))),
    Case("pow", lambda a: F.pow(a, 3.0), inputs(normal(3, 4)), "constant exponent"),
    Case("pow", F.pow, inputs(positive(3, 4), normal(4)), "tensor exponent"),
    Case("exp", F.exp, inputs(normal(3, 4))),
    Case("log", F.log, inputs(positive(3, 4))),
    Case("sqrt", F.sqrt, inputs(positive(3, 4))),
    # float64 -> float32 -> float64: the backward casts dout down and back up, so the analytic
    # gradient carries float32 rounding (~1e-8 relative) while the differences, on a grid
    # float32 holds exactly, are exact; a step of 1e-6 would drown in float32's rounding
    Case("astype", lambda a: F.astype(F.astype(a, "float32"), "float64"),
         inputs(on_float32_grid(3, 4)), "float64 -> float32 -> float64", eps=2.0 ** -10),
    # activations
    Case("tanh", F.tanh, inputs(normal(3, 4))),
    Case("relu", F.relu, inputs(away_from_zero(3, 4))),
    # reductions
    Case("sum", lambda a: F.sum(a), inputs(normal(3, 4)), "all axes"),
    Case("sum", lambda a: F.sum(a, axis=(0, 2), keepdims=True), inputs(normal(2, 3, 4)),
         "keepdims"),
    Case("mean", lambda a: F.mean(a, axis=-1), inputs(normal(2, 3, 4))),
    Case("max", lambda a: F.max(a, axis=1), inputs(normal(3, 5))),
    Case("max", lambda a: F.max(a, axis=(0, 2), keepdims=True), inputs(normal(2, 3, 4)),
         "two axes"),
    Case("max", lambda a: F.max(a, axis=0), inputs(normal(2, 3, 4)),
         "leading axis of 3-D"),   # its axes' permutation is not its own inverse
    # shapes
    Case("reshape", lambda a: F.reshape(a, (4, -1)), inputs(normal(2, 3, 4))),
    Case("transpose", lambda a: F.transpose(a, (2, 0, 1)), inputs(normal(2, 3, 4))),
    Case("swapaxes", lambda a: F.swapaxes(a, 1, 2), inputs(normal(2, 3, 4))),
    Case("broadcast_to", lambda a: F.broadcast_to(a, (2, 3, 4)), inputs(normal(3, 1))),
    Case("sum_to", lambda a: F.sum_to(a, (3, 1)), inputs(normal(2, 3, 4))),
    # indexing and joining
    Case("getitem", lambda a: a[1:, ::2], inputs(normal(3, 4)), "slices"),
    Case("getitem", lambda a, i: a[i], inputs(normal(5, 3), indices(5, 7)),
         "repeated integer index"),
    Case("getitem", lambda a, i, j: a[i, j], inputs(normal(4, 5), indices(4, 6), indices(5, 6)),
         "two index arrays"),
    Case("getitem", lambda a, m: a[m], inputs(normal(4, 5), mask(4, 5, p=0.5)), "boolean mask"),
    Case("concat", lambda a, b: F.concat([a, b], axis=1), inputs(normal(2, 3), normal(2, 4))),
    Case("stack", lambda a, b: F.stack([a, b], axis=1), inputs(normal(2, 3), normal(2, 3))),
    Case("split", lambda a: F.split(a, [1, 3], axis=1), inputs(normal(2, 5)), "three parts"),
    Case("split", lambda a: F.split(a, 2)[0], inputs(normal(4, 3)), "one part used"),
    Case("where", lambda c, a, b: F.where(c, a, b), inputs(mask(3, 4), normal(3, 4), normal(4)),
         "broadcast"),
    Case("masked_fill", lambda a, m: F.masked_fill(a, m, -1e9),
         inputs(normal(2, 3, 4), mask(3, 4)), "broadcast mask"),
    # matrix products
    Case("matmul", F.matmul, inputs(normal(3, 4), normal(4, 5))),
    Case("matmul", F.matmul, inputs(normal(2, 2, 3, 4), normal(2, 1, 4, 5)), "batched, broadcast"),
    Case("matmul", F.matmul, inputs(normal(2, 3, 4), normal(4, 5)), "batch @ matrix"),
    Case("matmul", F.matmul, inputs(normal(4), normal(2, 4, 3)), "vector @ batch"),
    Case("matmul", F.matmul, inputs(normal(3, 4), normal(4)), "matrix @ vector"),
    # fused layers of the Transformer
    Case("linear", F.linear, inputs(normal(2, 3, 4), normal(5, 4), normal(5)), "3-D input, bias"),
    Case("linear", F.linear, inputs(normal(2, 3, 4), normal(5, 4)), "no bias"),
    Case("linear_relu", F.linear_relu, inputs(normal(2, 3, 4), normal(5, 4), normal(5)),
         "3-D input, bias"),
    Case("linear_relu", F.linear_relu, inputs(normal(2, 3, 4), normal(5, 4)), "no bias"),
    Case("feed_forward", F.feed_forward,
         inputs(normal(2, 3, 4), normal(5, 4), normal(5), normal(4, 5), normal(4)),
         "3-D input"),
    Case("feed_forward", F.feed_forward,
         inputs(normal(2, 20, 3), normal(4, 3), normal(4), normal(2, 4), normal(2)),
         "40 rows: db1's groups of 16, the last short"),
    Case("softmax", F.softmax, inputs(normal(3, 5)), "axis -1"),
    Case("softmax", lambda a: F.softmax(a, axis=0), inputs(normal(4, 3)), "axis 0"),
    Case("log_softmax", F.log_softmax, inputs(normal(3, 5)), "axis -1"),
    Case("log_softmax", lambda a: F.log_softmax(a, axis=0), inputs(normal(4, 3)), "axis 0"),
    Case("layer_norm", F.layer_norm, inputs(normal(2, 3, 5), normal(5), normal(5)),
         "input, gain, bias"),
    Case("dropout", seeded_dropout, inputs(normal(4, 6)), "training, p=0.3"),
    Case("dropout_add_layer_norm", seeded_dropout_add_layer_norm,
         inputs(normal(2, 3, 5), normal(2, 3, 5), normal(5), normal(5)), "training, p=0.3"),
    Case("embedding", lambda W, ids: F.embedding(ids, W),
         inputs(normal(5, 3), fixed([[1, 0, 3, 1, 3], [4, 4, 0, 2, 1]])), "repeated ids"),
    Case("embedding", lambda w, ids: F.embedding(ids, w, padding_idx=0),
         inputs(normal(5, 3), fixed([[1, 0, 3, 1, 3], [4, 4, 0, 2, 1]])), "padding_idx=0"),
    Case("embedding", lambda w, ids: F.embedding(ids, w, padding_idx=2),
         inputs(normal(5, 3), fixed([[1, 0, 3, 2], [2, 4, 0, 2]])), "padding_idx=2"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3)), "no mask"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3),
                padding_mask(5, 2, S=5)), "padding mask (B,1,1,S)"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(2, 2, 4, 3), normal(2, 2, 4, 3), normal(2, 2, 4, 3),
                lambda g: F.causal_mask(4).data), "causal mask"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 3),
                fixed([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 0, 1, 1]], dtype=bool)),
         "a fully masked row"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3),
                fixed([[[[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 0, 1, 1]]],
                       [[[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]]], dtype=bool)),
         "(B,H,T,S), fully masked rows (B,1,T,S)"),
    Case("scaled_dot_product_attention", F.scaled_dot_product_attention,
         inputs(normal(3, 4), normal(5, 4), normal(5, 3),
                fixed([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]], dtype=bool)),
         "one matrix (T, D), mask (T, S)"),
    Case("cross_entropy", F.cross_entropy, inputs(normal(2, 3, 6), indices(6, 2, 3)), "ε=0"),
    Case("cross_entropy", lambda z, t: F.cross_entropy(z, t, label_smoothing=0.1),
         inputs(normal(2, 3, 6), indices(6, 2, 3)), "ε=0.1"),
    Case("cross_entropy",
         lambda z, t: F.cross_entropy(z, t, label_smoothing=0.1, ignore_index=-100),
         inputs(normal(3, 4, 6), targets_with_ignored(6, 3, 4)), "ε=0.1, ignore_index"),
    Case("cross_entropy",
         lambda z, t: F.cross_entropy(z, t, label_smoothing=0.1, ignore_index=-100,
                                      normalizer=20),
         inputs(normal(3, 4, 6), targets_with_ignored(6, 3, 4)), "ε=0.1, normalizer 20"),
    # dout = 1, loss.backward()'s seed: the gradient made in the forward pass, handed on as is
    Case("cross_entropy",
         lambda z, t: F.cross_entropy(z, t, label_smoothing=0.1, ignore_index=-100),
         inputs(normal(3, 4, 6), targets_with_ignored(6, 3, 4)),
         "ε=0.1, ignore_index, dout = 1", unit_dout=True),
    Case("cross_entropy",
         lambda z, t: F.cross_entropy(z, t, label_smoothing=0.1, ignore_index=-100,
                                      normalizer=20),
         inputs(normal(3, 4, 6), targets_with_ignored(6, 3, 4)),
         "ε=0.1, normalizer 20, dout = 1", unit_dout=True),
    # a composite: the graph engine summing a diamond of uses
    Case("composite", lambda a, b: F.tanh(a @ b) * a.sum(axis=1, keepdims=True) + a.exp().mean(),
         inputs(normal(3, 4), normal(4, 4)), "reuse and diamond"),
]


def run_case(case: Case, seed: int = 0) -> GradcheckReport:
    """Build the case's inputs with ``seed`` and check it."""
    generator = backend.get_backend().make_rng(seed)
    report = check_function(case.fn, *case.make_inputs(generator), name=case.name, seed=seed,
                            eps=case.eps, unit_dout=case.unit_dout)
    if case.note:
        report.shapes = f"{report.shapes} [{case.note}]"
    return report
