"""The autograd tape drawn: the graph of Functions behind a tensor, laid out by Graphviz.

As micrograd's ``draw_dot``, for tensors. Each node is a ``Function`` the forward pass
recorded (an orange oval), labelled with its class name and the shape of what it returned;
each edge is a tensor, from the Function that made it to the one that used it. The graph
starts at leaves, boxes marked as

    parameters   an ``nn.Parameter`` (green), named by the module that owns it
    inputs       any other leaf that requires a gradient (blue)
    constants    what takes no gradient: masks, token ids, numbers (grey, dashed)

and ends at the tensor drawn (yellow, double border). After ``backward(retain_graph=True)``,
``grads=True`` writes each leaf's gradient shape under its own: always the same, as the
engine demands. ``backward()`` without ``retain_graph`` frees the tape as it goes, so draw
before it, or keep the graph.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..autograd.engine import graph_nodes
from ..autograd.tensor import Tensor
from ..backend import to_numpy
from ..nn.module import Module, Parameter
from ._render import digraph, save_graph

FUNCTION, PARAMETER, INPUT, CONSTANT, OUTPUT = (
    "#fde5c3", "#d4ebd0", "#d6e5f5", "#efefef", "#f6f2b7")
FREED = ("draw_tape: the graph behind this tensor was freed by backward(), which releases each "
         "Function once its backward has run; draw it before backward(), or call "
         "backward(retain_graph=True) to keep it (and see the gradients with grads=True).")


def draw_tape(output: Tensor | Sequence[Tensor], names: Module | Mapping[str, Any] | None = None,
              grads: bool = False, values: bool = False, rankdir: str = "LR",
              path: str | Path | None = None) -> Any:
    """The graph that produced ``output``, as a ``graphviz.Digraph`` (a notebook shows it).

    ``names`` labels tensors: a Module names its parameters (``w_q.weight``), a mapping
    ``{"x": x, "scores": s}`` names any tensor, a leaf on its node and a result on the edge
    that carries it (a leaf's own ``.name`` is used too). ``grads`` adds the gradient shape of
    each leaf (and of intermediate tensors that ``retain_grad()``); ``values`` prints tensors
    of at most 8 numbers. ``rankdir`` is Graphviz's direction ("LR": inputs on the left,
    "TB": on top). With ``path``, the picture is also written there (``.svg``, ``.png``,
    ``.pdf``; ``.gv`` for the Graphviz source), which needs Graphviz's ``dot`` program.
    """
    roots = [output] if isinstance(output, Tensor) else list(output)
    if isinstance(names, Module):
        names = dict(names.named_parameters())
    named: dict[int, str] = {}      # id of a tensor -> its name
    results: dict[tuple, str] = {}  # (id of its creator, output index) -> name of a result
    for name, t in (names or {}).items():
        if isinstance(t, Tensor):
            named[id(t)] = name
            if t.creator is not None:
                results[(id(t.creator), t.output_index)] = name
    nodes = _functions(roots)
    graph = digraph(graph_attr={"rankdir": rankdir, "nodesep": "0.25", "ranksep": "0.35"},
                    node_attr={"fontname": "Helvetica", "fontsize": "11", "margin": "0.1,0.04"},
                    edge_attr={"fontname": "Helvetica", "fontsize": "10", "color": "#555555",
                               "arrowsize": "0.7"})
    ids = {id(node): f"f{i}" for i, node in enumerate(nodes)}
    leaves: dict[int, str] = {}
    for node in nodes:
        graph.node(ids[id(node)], _function_label(node, roots, grads, values), shape="oval",
                   style="filled", fillcolor=FUNCTION)
        for i, edge in enumerate(node.next_edges):
            if isinstance(edge, tuple):  # the output of another Function
                producer, index = edge
                label = results.get((id(producer), index), "")
                if not label and len(producer.output_meta) > 1:
                    label = f"[{index}]"
                graph.edge(ids[id(producer)], ids[id(node)], label=label)
            elif isinstance(edge, Tensor):  # a leaf that takes a gradient
                if id(edge) not in leaves:
                    leaves[id(edge)] = f"t{len(leaves)}"
                    _leaf(graph, leaves[id(edge)], edge, named.get(id(edge)), grads, values)
                graph.edge(leaves[id(edge)], ids[id(node)])
            else:  # no gradient wanted: a mask, token ids, a number
                shape, dtype = node.input_meta[i]
                constant = f"{ids[id(node)]}c{i}"
                graph.node(constant, _constant_label(shape, dtype), shape="box",
                           style="dashed,filled", fillcolor=CONSTANT, color="#888888",
                           fontcolor="#444444", fontsize="10")
                graph.edge(constant, ids[id(node)], style="dashed", color="#888888")
    for r, root in enumerate(roots):
        name = named.get(id(root)) or root.name or ("output" if len(roots) == 1 else f"output {r}")
        label = _label(name, _shape(root.shape), _extra(root, grads, values))
        graph.node(f"out{r}", label, shape="box", style="filled", fillcolor=OUTPUT,
                   peripheries="2")
        if root.creator is not None:
            graph.edge(ids[id(root.creator)], f"out{r}",
                       label="" if len(root.creator.output_meta) == 1
                       else f"[{root.output_index}]")
    return save_graph(graph, path)


def _functions(roots: list[Tensor]) -> list:
    """The Function nodes behind ``roots``, inputs first; FREED if backward released one."""
    stack, seen = [r.creator for r in roots if r.creator is not None], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.released or node.next_edges is None:
            raise RuntimeError(FREED)
        stack += [edge[0] for edge in node.next_edges if isinstance(edge, tuple)]
    return graph_nodes([r.creator for r in roots if r.creator is not None])[::-1]


def _function_label(node: Any, roots: list[Tensor], grads: bool, values: bool) -> str:
    shapes = [_shape(shape) for shape, _, _ in node.output_meta]
    if len(shapes) > 1 and len(set(shapes)) == 1:
        shapes = [f"{shapes[0]} ×{len(shapes)}"]
    lines = ["<br/>".join(shapes)]
    for ref in node.output_refs:
        result = ref()
        if result is not None and not any(result is root for root in roots):  # drawn there
            lines += _extra(result, grads, values)
    return f"<<b>{html.escape(node.name)}</b><br/>{'<br/>'.join(lines)}>"


def _leaf(graph: Any, node_id: str, leaf: Tensor, name: str | None, grads: bool,
          values: bool) -> None:
    kind, fill = ("parameter", PARAMETER) if isinstance(leaf, Parameter) else ("input", INPUT)
    label = _label(name or leaf.name or kind, f"{kind} {_shape(leaf.shape)}"
                   if name or leaf.name else _shape(leaf.shape), _extra(leaf, grads, values))
    graph.node(node_id, label, shape="box", style="filled", fillcolor=fill)


def _extra(t: Tensor, grads: bool, values: bool) -> list[str]:
    lines = []
    if values and t.size <= 8:
        lines.append(f"data {_numbers(t.data)}")
    if grads and t.grad is not None:
        lines.append(f"grad {_numbers(t.grad)}" if values and t.size <= 8
                     else f"grad {_shape(t.grad.shape)}")
    elif grads and t.is_leaf and t.requires_grad:
        lines.append("grad: none yet")
    return lines


def _label(title: str, first: str, more: list[str]) -> str:
    rows = "".join(f"<br/>{html.escape(line)}" for line in [first, *more])
    return f"<<b>{html.escape(title)}</b>{rows}>"


def _constant_label(shape: tuple, dtype: Any) -> str:
    kind = {"b": "mask", "i": "integers", "u": "integers"}.get(dtype.kind, "constant")
    return f"<{kind} {html.escape(_shape(shape))}<br/>{dtype}>"


def _shape(shape: tuple) -> str:
    return str(tuple(int(n) for n in shape))


def _numbers(array: Any) -> str:
    array = to_numpy(array)
    if array.ndim == 0:
        return f"{array.item():.4g}"
    return "[" + ", ".join(f"{v:.4g}" for v in array.ravel()) + "]"
