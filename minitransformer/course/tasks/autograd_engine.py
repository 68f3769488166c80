"""The exercise ``autograd_engine``: the learner writes the backward walk, ``backward(root,
dout)``, that ``engine.run_backward`` does for the library.

Every case builds the same graph twice from one seed: the library's engine runs the one, the
learner's walk the other, and every leaf's ``.grad`` is compared. The learner's walk runs on
real Functions whose ``backward`` is watched: each must be called once, from the learner's own
file, after every node that uses its output, with a gradient of the output's shape for each of
its outputs. A wrong gradient is recognised by running the known wrong walks of ``MISTAKES`` on
the same graph: the one whose gradients the learner's match names the mistake.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import functional as F
from ...autograd.engine import graph_nodes
from ...autograd.tensor import Tensor
from ._common import (
    AlgorithmTask,
    Failed,
    Learner,
    TaskCase,
    at,
    close,
    largest_difference,
    pair,
    tiny_model,
)

CHAIN = 1500  # operations in the deep case: more than Python's default recursion limit (1000)


@dataclass
class Graph:
    root: Tensor
    dout: Any
    leaves: dict[str, Tensor]                   # that want a gradient, by name
    others: dict[str, Tensor] = field(default_factory=dict)  # constants, intermediate results


def _leaf(g: Any, *shape: int) -> Tensor:
    return Tensor(g.standard_normal(shape), requires_grad=True)


def _used_twice(g: Any) -> Graph:
    x, w = _leaf(g, 3, 4), _leaf(g, 4)
    c = Tensor(g.standard_normal((3, 4)))
    xx = x * x
    out = ((xx + x * w) * c).sum(axis=1)
    return Graph(out, g.standard_normal(3), {"x": x, "w": w}, {"c": c, "x·x": xx})


def _diamond(g: Any) -> Graph:
    x, y = _leaf(g, 2, 3), _leaf(g, 2, 3)
    s = x + y                                   # add hands the same dout to x and y
    u = (x * 2.0).exp()
    out = u * s + s.tanh() * (y + x)            # s used twice; x and y three times each
    return Graph(out, g.standard_normal((2, 3)), {"x": x, "y": y}, {"s": s, "u": u})


def _unused_output(g: Any) -> Graph:
    x, w = _leaf(g, 2, 6), _leaf(g, 3)
    first, second = F.split(x, 2, axis=1)       # (2, 3) each; the second is never used
    out = (first * w).sum() + (x * x).sum()
    return Graph(out, np.asarray(g.standard_normal()), {"x": x, "w": w}, {"first": first})


def _linear_with_grads(g: Any) -> Graph:
    weight, bias = _leaf(g, 4, 5), _leaf(g, 4)
    weight.grad, bias.grad = g.standard_normal((4, 5)), g.standard_normal(4)  # a batch before
    x = Tensor(g.standard_normal((3, 5)))
    loss = F.cross_entropy(F.linear(x, weight, bias), g.integers(0, 4, size=3))
    return Graph(loss, np.asarray(1.0), {"weight": weight, "bias": bias}, {"x": x})


def _chain(g: Any) -> Graph:
    x = _leaf(g, 4)
    y = x
    for _ in range(CHAIN):
        y = y * 0.999
    return Graph(y, g.standard_normal(4), {"x": x})


def _transformer(g: Any) -> Graph:
    model = tiny_model(int(g.integers(2**31)))
    src = g.integers(1, 13, size=(2, 5))
    src[0, 3:] = 0                              # padding
    tgt_in, tgt_out = g.integers(1, 13, size=(2, 4)), g.integers(1, 13, size=(2, 4))
    tgt_out[1, 3] = 0                           # an ignored target
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=0)
    return Graph(loss, np.asarray(1.0), dict(model.named_parameters()), {"logits": logits})


# ----------------------------------------------------------------------------- the mistakes

def reference_walk(root: Tensor, dout: Any, leaf_add: bool = True, node_add: bool = True,
                   keep_old: bool = True, copy: bool = True) -> None:
    """The engine's walk, or one of the known wrong ones: ``leaf_add`` / ``node_add`` False
    overwrite instead of summing, ``keep_old`` False drops what a leaf's .grad held before,
    ``copy`` False keeps the arrays it is given and adds into them in place."""
    pending: dict[Any, list] = {}
    seen: set[int] = set()

    def send(edge: Any, grad: Any) -> None:
        if isinstance(edge, tuple):
            slots = pending.setdefault(edge[0], [None] * len(edge[0].output_meta))
            old = slots[edge[1]]
            if old is None or not node_add:
                slots[edge[1]] = grad
            elif copy:
                slots[edge[1]] = old + grad
            else:
                old += grad
            return
        old = edge.grad if keep_old or id(edge) in seen else None
        seen.add(id(edge))
        if old is None or not leaf_add:
            edge.grad = grad.copy() if copy else grad
        elif copy:
            edge.grad = old + grad
        else:
            old += grad
            edge.grad = old

    send(root.grad_edge(), dout)
    for node in graph_nodes([root.creator]):
        douts = pending.pop(node, None)
        if douts is None:
            continue
        douts = [d if d is not None else np.zeros(shape, dtype)
                 for d, (shape, dtype, _) in zip(douts, node.output_meta, strict=True)]
        dinputs = node.backward(*douts)
        for edge, dinput in zip(node.next_edges, dinputs if isinstance(dinputs, tuple)
                                else (dinputs,), strict=True):
            if edge is not None and dinput is not None:
                send(edge, np.asarray(dinput))


# (how the walk goes wrong, the hint), the first whose gradients are the learner's names the
# mistake (where a leaf gets one gradient, dropping its old .grad and overwriting look alike,
# so the former comes first). A teacher adds a mistake here and its patch to the test
# catalogue (tests/course/task_mistakes.py).
MISTAKES: list[tuple[dict[str, bool], str]] = [
    (dict(keep_old=False), "the .grad that a leaf held before this backward was thrown away: "
     "backward accumulates, adding to what .grad already holds (gradients of several "
     "batches add up); only a leaf whose .grad is None starts from the new gradient."),
    (dict(leaf_add=False), "a leaf used more than once kept only the last gradient it got: "
     "the gradient of a tensor is the sum over all its uses, so add what arrives to what "
     "leaf.grad holds instead of overwriting it."),
    (dict(node_add=False), "an intermediate result used more than once passed on only one of "
     "its gradients: sum everything that reaches a node's output before calling the node's "
     "backward, instead of overwriting its slot."),
    (dict(copy=False), "a gradient was added into in place (+=) in an array that other "
     "gradients share: backward outputs may be one array (add returns dout for both of its "
     "inputs), so keep a copy of the first gradient a leaf gets, or add with a + b."),
]


def _recognise(build: Callable[[Any], Graph], seed: int, got: dict[str, Any]) -> str | None:
    """The hint of the wrong walk whose gradients are the learner's, if one is."""
    for flags, hint in MISTAKES:
        graph = build(np.random.default_rng(seed))
        try:
            reference_walk(graph.root, graph.dout, **flags)
        except Exception:  # that mistake cannot run on this graph
            continue
        if all(g is not None and graph.leaves[n].grad is not None
               and close(g, graph.leaves[n].grad) for n, g in got.items()):
            return hint
    return None


# ----------------------------------------------------------------------------- a case

class _Watch:
    """Wraps every node's backward: counts the calls and checks where they come from, their
    order and the gradients they are given. A gradient that the node's backward cannot take
    fails at once; the rest is noted and judged after the walk (``problem``), the worst
    first, so that a walk that calls backward once per path is named as such rather than for
    the order it also breaks."""

    def __init__(self, root: Tensor, module_name: str):
        self.module_name = module_name
        self.nodes = graph_nodes([root.creator])
        self.users: dict[Any, list] = {node: [] for node in self.nodes}
        for node in self.nodes:
            for edge in node.next_edges:
                if isinstance(edge, tuple):
                    self.users[edge[0]].append(node)
        self.calls: dict[Any, int] = {node: 0 for node in self.nodes}
        self.foreign: str | None = None         # a caller outside the learner's file
        self.early: tuple[str, str] | None = None  # (node, a user not yet called)
        self.refused: Failed | None = None      # a gradient the backward cannot take
        for node in self.nodes:
            node.backward = self._watched(node, node.backward)

    def _watched(self, node: Any, backward: Callable) -> Callable:
        def watched(*douts: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__")
            if caller != self.module_name and self.foreign is None:
                self.foreign = f"{node.name}.backward was called from {caller}"
            self.calls[node] += 1
            early = [u.name for u in self.users[node] if not self.calls[u]]
            if early and self.early is None:
                self.early = (node.name, early[0])
            if len(douts) != len(node.output_meta):
                self._refuse(f"{node.name}.backward got {len(douts)} gradient(s) for "
                             f"{len(node.output_meta)} output(s): pass one per output.")
            for i, (d, (shape, _dtype, _)) in enumerate(zip(douts, node.output_meta, strict=True)):
                if d is None:
                    self._refuse(f"{node.name}.backward got None as the gradient of its "
                                 f"output {i}, which nothing used.", "an output nobody used "
                                 "has a gradient of zero: pass zeros of its shape and dtype "
                                 f"(node.output_meta[{i}] holds them).")
                if np.shape(d) != tuple(shape):
                    self._refuse(f"{node.name}.backward got a gradient of shape "
                                 f"{np.shape(d)} for its output {i} of shape {tuple(shape)}: a "
                                 "gradient has the shape of its tensor.")
            return backward(*douts)
        return watched

    def _refuse(self, problem: str, hint: str | None = None) -> None:
        if self.refused is None:
            self.refused = Failed(problem, hint)
        raise self.refused

    def problem(self, finished: bool = True) -> Failed | None:
        """What the walk did wrong, the worst first; None if nothing. Nodes not called count
        only for a walk that ``finished``."""
        if self.foreign:
            return Failed(f"{self.foreign}, not from your file.", "write the walk yourself "
                          "instead of calling the library's (Tensor.backward, "
                          "engine.run_backward): that is the exercise.")
        if self.refused:
            return self.refused
        twice = [(n, c) for n, c in self.calls.items() if c > 1]
        if twice:
            return Failed(f"{twice[0][0].name}.backward was called {twice[0][1]} times "
                          f"({len(twice)} of the {len(self.nodes)} nodes more than once).",
                          "a node whose output is used twice got its backward called once "
                          "for each gradient that arrived (propagating recursively, path by "
                          "path, costs exponentially many calls in deep graphs): visit the "
                          "nodes in reverse topological order, sum what reaches each output, "
                          "and call each backward once.")
        if self.early:
            return Failed(f"{self.early[0]}.backward ran before {self.early[1]}.backward, "
                          "which uses its output.", _ORDER)
        never = [node.name for node in self.nodes if not self.calls[node]]
        if never and finished:
            return Failed(f"{len(never)} of the {len(self.nodes)} nodes never had their "
                          f"backward called ({never[0]} first).", _ORDER)
        return None


_ORDER = ("a node's backward must run after that of every node using its output, so that "
          "all of its gradient has arrived: visit the nodes in reverse topological order "
          "(the post-order of a depth-first search from the root, reversed).")


def _case(build: Callable[[Any], Graph]) -> Callable[[Learner, int], None]:
    def run(learner: Learner, seed: int) -> None:
        expected = build(np.random.default_rng(seed))
        expected.root.backward(expected.dout)
        graph = build(np.random.default_rng(seed))
        watch = _Watch(graph.root, learner.module_name)
        try:
            learner.call("backward", graph.root, graph.dout.copy(), shown="backward(root, dout)")
        except Failed as exc:
            problem = watch.problem(finished=False)
            if problem is not None:
                raise problem from None
            if isinstance(exc.cause, RecursionError):
                exc.hint = ("the walk recursed deeper than Python allows (about 1000 frames): "
                            f"this graph is {len(watch.nodes)} nodes deep; find the order with "
                            "an explicit stack (a list you push and pop) instead of recursion.")
            raise
        problem = watch.problem()
        if problem is not None:
            raise problem
        _compare(graph, expected, build, seed)
    return run


def _compare(graph: Graph, expected: Graph, build: Callable[[Any], Graph], seed: int) -> None:
    got = {name: leaf.grad for name, leaf in graph.leaves.items()}
    for name, leaf in graph.leaves.items():
        right = expected.leaves[name].grad
        if leaf.grad is None:
            raise Failed(f"{name}.grad is None: no gradient reached the leaf {name}.",
                         _recognise(build, seed, got) or "a leaf's edge is the Tensor itself "
                         "(not a tuple): the gradient sent along it goes into leaf.grad.")
        if not close(leaf.grad, right):
            shape = np.shape(leaf.grad)
            if shape != right.shape:
                raise Failed(f"{name}.grad has shape {shape}, expected {right.shape}.")
            index, rel = largest_difference(leaf.grad, right)
            expected, mine = pair(right[index], np.asarray(leaf.grad)[index])
            raise Failed(f"{name}.grad is wrong: largest error at {name}.grad{at(index)}: "
                         f"expected {expected}, got {mine} (relative error {rel:.1e}).",
                         _recognise(build, seed, got))
    for name, tensor in {**graph.others, "root": graph.root}.items():
        if tensor.grad is not None:
            leaf = tensor.is_leaf
            raise Failed(f"{name} got a .grad, but it is " + (
                "a constant (its edge is None): skip None edges." if leaf else
                "an intermediate result: only leaves keep a .grad; gradients of a node's "
                "outputs stay in the walk's own bookkeeping."))


CASES = (
    TaskCase("a tensor used twice, a constant beside it",
             "x (3, 4), w (4,), c (3, 4) constant: out = (x·x + x·w)·c summed over rows",
             _case(_used_twice)),
    TaskCase("a diamond, and an add that hands both inputs one array",
             "x, y (2, 3): s = x + y; out = exp(2x)·s + tanh(s)·(y + x)", _case(_diamond)),
    TaskCase("an output nobody used",
             "x (2, 6) split into two (2, 3) halves, the second unused; w (3,)",
             _case(_unused_output)),
    TaskCase("a Linear layer whose .grad holds an earlier batch's",
             "weight (4, 5), bias (4,), x (3, 5): cross-entropy of 3 rows", _case(
                 _linear_with_grads)),
    TaskCase("a deep graph", f"x (4,) multiplied by 0.999, {CHAIN} times", _case(_chain)),
    TaskCase("a tiny Transformer's loss",
             "1 layer, d_model 8, 2 heads, vocabulary 13; src (2, 5) with padding, tgt (2, 4); "
             "label smoothing 0.1: every parameter's gradient", _case(_transformer)),
)

TASK = AlgorithmTask(
    name="autograd_engine",
    class_name="backward",
    functions=("backward",),
    summary="the backward walk: reverse topological order, gradients summed (chapter 1)",
    cases=CASES,
    verdict="every leaf's .grad is the library engine's, each backward called once, in order",
)
