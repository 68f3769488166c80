"""The backward engine: walk the graph from the outputs back to the leaves.

The graph is made of Function nodes. Each node knows, per input, where that input came from
(``next_edges``): another node and which of its outputs, a leaf Tensor that accumulates
``.grad``, or ``None`` when no gradient is wanted. Backward is reverse-mode differentiation:

1. order the nodes so that every node comes before the nodes that produced its inputs
   (a topological order, found with an explicit stack: no recursion limit on deep graphs);
2. seed the outputs with their upstream gradients;
3. visit the nodes in that order: sum the gradients that reached each output (a tensor used
   twice gets the sum of both uses), check that no input was updated in place since the
   forward pass (``Tensor._version``), call ``backward``, pass each input gradient on;
4. free what the node saved, unless ``retain_graph`` asks to keep it for another backward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import backend


def run_backward(roots: Sequence[Any], grads: Sequence[Any], retain_graph: bool = False,
                 sum_gradients: Callable[..., Any] | None = None) -> None:
    """Accumulate d(sum_i <roots[i], grads[i]>)/d(leaf) into every leaf's ``.grad``.

    The gradients that reach one output of a node (a tensor used twice) are summed by
    ``sum_gradients(a, b, out=None)`` (it must take ``out``): into ``a`` itself (``out=a``)
    when nothing else refers to it, else a new array (backward outputs may alias each other);
    a + b by default.
    ``Tensor.backward`` passes functional's, which adds large arrays on the worker threads."""
    sum_gradients = sum_gradients or _added
    pending: dict[Any, list] = {}  # node -> gradient arriving at each of its outputs
    for root, grad in zip(roots, grads, strict=True):
        _send(root.grad_edge(), grad, pending)

    nodes = graph_nodes([r.creator for r in roots if r.creator is not None])
    for node in nodes:  # all of them first: a refused backward leaves no .grad half-written
        _check_versions(node)
    for node in nodes:
        douts = pending.pop(node, None)
        if douts is None:  # no gradient flows through this node (its users returned None)
            continue
        if any(d is None for d in douts):  # an output nobody used: its gradient is zero
            douts = [
                d if d is not None else backend.get_backend(device).xp.zeros(shape, dtype)
                for d, (shape, dtype, device) in zip(douts, node.output_meta, strict=True)
            ]
        for ref, dout in zip(node.output_refs, douts, strict=True):
            output = ref()
            if output is not None and output.retains_grad:
                output.grad = dout.copy() if output.grad is None else output.grad + dout

        dinputs = node.backward(*douts)
        dinputs = list(dinputs) if isinstance(dinputs, tuple) else [dinputs]
        if len(dinputs) != len(node.next_edges):
            raise RuntimeError(
                f"{node.name}.backward returned {len(dinputs)} gradients for "
                f"{len(node.next_edges)} inputs; return one per input (None where not needed)."
            )
        for i, edge in enumerate(node.next_edges):
            dinput, dinputs[i] = dinputs[i], None  # held here alone, unless held elsewhere
            if edge is None or dinput is None:
                continue
            shape, dtype = node.input_meta[i]
            if dinput.shape != shape or dinput.dtype != dtype:
                raise RuntimeError(
                    f"{node.name}.backward returned a gradient of shape {tuple(dinput.shape)} "
                    f"and dtype {dinput.dtype} for input {i}, which has shape {tuple(shape)} "
                    f"and dtype {dtype}; gradients must match their inputs."
                )
            # NumPy gives a 0-d result as a scalar (numpy.float64): make it an array, which
            # the leaf's .grad must be for updates in place (clip_grad_norm's g *= scale)
            dinput = backend.array_result(dinput)
            owned = _sole_owner(dinput, held_by=1)  # before the call puts it on the stack
            _send(edge, dinput, pending, sum_gradients, owned)
        if not retain_graph:
            node.release()


def _check_versions(node: Any) -> None:
    """Refuse to run ``node.backward`` when an input was updated in place after the forward
    pass (its version count moved on): what the node saved may be that input's own array, now
    holding other values, and the gradient would be silently wrong."""
    for i, counter, seen in node.input_versions:
        if counter[0] != seen:
            shape, dtype = node.input_meta[i]
            raise RuntimeError(
                f"{node.name}: input {i} (shape {tuple(shape)}, dtype {dtype}) was updated in "
                f"place after the forward pass that used it (version {seen} then, "
                f"{counter[0]} now), so its backward would read the new values; call "
                "backward() before optimizer.step(), or run the forward pass again after "
                "the update.")


def _added(a: Any, b: Any, out: Any = None) -> Any:
    """a + b, a new array (into ``out`` when given)."""
    return a + b if out is None else backend.get_array_module(a).add(a, b, out=out)


def _send(edge: Any, grad: Any, pending: dict, sum_gradients: Callable = _added,
          owned: bool = False) -> None:
    """Deliver ``grad`` along ``edge``: into a node's pending slot or a leaf's ``.grad``.
    ``owned``: nothing but the caller refers to ``grad`` (``_sole_owner``)."""
    if isinstance(edge, tuple):
        node, index = edge
        slots = pending.setdefault(node, [None] * len(node.output_meta))
        if slots[index] is None:
            slots[index] = grad
        # The second use adds into the first gradient where nothing else refers to it (a
        # backward's new array), else into a new array: backward outputs may alias each
        # other (add returns dout for both inputs) and may be kept (a node's saved values)
        elif _sole_owner(slots[index], held_by=1):  # the slot list alone
            sum_gradients(slots[index], grad, out=slots[index])
        else:
            slots[index] = sum_gradients(slots[index], grad)
    else:  # a leaf tensor: it owns its gradient buffer
        leaf = edge
        if leaf.grad is None:
            leaf.grad = grad if owned else grad.copy()
        else:
            leaf.grad += grad


# Reference counts that count every holder: CPython with its global lock, before 3.14 (3.14
# may pass a local to a call without counting it, and a free-threaded build counts apart)
_EXACT_REFCOUNTS = (sys.implementation.name == "cpython" and sys.version_info < (3, 14)
                    and getattr(sys, "_is_gil_enabled", lambda: True)())


def _sole_owner(a: Any, held_by: int) -> bool:
    """True if ``a`` is a NumPy array that owns its memory (no view of another array), is
    writable and C-contiguous, and has no references but the ``held_by`` its caller knows
    of: nobody else can see it change or be kept. Such a gradient is taken as it is, where
    another would be copied (PyTorch's AccumulateGrad and InputBuffer decide by a reference
    count in the same way). ``getrefcount`` counts its own argument and this function's.
    Always False where reference counts may leave holders out (``_EXACT_REFCOUNTS``)."""
    numpy = backend.get_backend("cpu").xp
    return (_EXACT_REFCOUNTS and type(a) is numpy.ndarray and a.base is None
            and a.flags.writeable and a.flags.c_contiguous
            and sys.getrefcount(a) <= held_by + 2)


def graph_nodes(roots: list) -> list:
    """Function nodes reachable from ``roots``, each before every node that produced its
    inputs (a topological order of the graph, outputs first)."""
    post_order: list = []
    visited: set[int] = set()
    for root in roots:
        if id(root) in visited:
            continue
        visited.add(id(root))
        stack = [(root, iter(_parents(root)))]
        while stack:
            node, parents = stack[-1]
            for parent in parents:
                if id(parent) not in visited:
                    visited.add(id(parent))
                    stack.append((parent, iter(_parents(parent))))
                    break
            else:  # all parents done: the node itself is finished
                stack.pop()
                post_order.append(node)
    return post_order[::-1]


def _parents(node: Any) -> list:
    if node.released:
        raise RuntimeError(
            f"backward reached {node.name}, whose saved values were already freed by an "
            "earlier backward; pass retain_graph=True to the first backward to go through "
            "the graph twice."
        )
    return [edge[0] for edge in node.next_edges if isinstance(edge, tuple)]
