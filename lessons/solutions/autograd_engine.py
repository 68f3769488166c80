"""Solution: the autograd engine's backward walk.

Reverse-mode differentiation (chapter 1) computes d(Σ root ∘ dout)/d(leaf) for every leaf in
one walk from the root back to the leaves. The graph is the tape of Function nodes recorded in
the forward pass; each node knows, per input, where that input came from (``node.next_edges``):

    (parent, i)   the i-th output of the Function ``parent``
    a Tensor      a leaf that wants a gradient (a parameter, an input with requires_grad)
    None          an input that wants no gradient (a constant, token ids, a mask)

A node's backward needs the whole gradient of each of its outputs, which is the sum over every
use of that output (the multivariate chain rule: ∂L/∂y = Σ_users ∂L/∂y through that user). So
the walk is:

1. order the nodes so that every node comes before the nodes that produced its inputs (a
   reverse topological order), with an explicit stack: a deep graph (a thousand layers, or a
   long recurrence) would pass Python's recursion limit;
2. seed the root's slot with ``dout``;
3. visit the nodes in that order: the gradients that reached each output are summed by now;
   an output nobody used gets zeros; call ``backward`` once; send each input's gradient on:
   into the parent's slot (summed with what is there) or into the leaf's ``.grad`` (added to
   what it holds: gradients accumulate over backward calls, as over the micro-batches of a
   large batch).

Backward outputs may be the same array (``add`` returns ``dout`` for both inputs), so a
gradient is never added into in place unless the engine made that array itself: ``a + b``
makes a new one, and a leaf keeps a copy of the first gradient it gets.

Check it:  minitransformer check-exercise autograd_engine lessons/solutions/autograd_engine.py
"""

import numpy as np


def parents(node):
    """The Function nodes that produced ``node``'s inputs (leaves and constants are not)."""
    return [edge[0] for edge in node.next_edges if isinstance(edge, tuple)]


def topological_order(root_node):
    """Every node reachable from ``root_node``, each before the nodes that made its inputs."""
    post_order, visited = [], {root_node}
    stack = [(root_node, iter(parents(root_node)))]
    while stack:
        node, todo = stack[-1]
        for parent in todo:
            if parent not in visited:  # first visit: go deeper before finishing ``node``
                visited.add(parent)
                stack.append((parent, iter(parents(parent))))
                break
        else:  # every parent finished: so is the node
            stack.pop()
            post_order.append(node)
    return post_order[::-1]  # the root first, the nodes nearest the leaves last


def send(edge, grad, pending):
    """Deliver ``grad`` along ``edge``: into a node's pending slot, or a leaf's ``.grad``."""
    if isinstance(edge, tuple):
        node, index = edge
        slots = pending.setdefault(node, [None] * len(node.output_meta))
        slots[index] = grad if slots[index] is None else slots[index] + grad
    else:  # a leaf: the first gradient copied (it may be another's too), the next ones added
        edge.grad = grad.copy() if edge.grad is None else edge.grad + grad


def backward(root, dout):
    """Accumulate d(Σ root ∘ dout)/d(leaf) into the ``.grad`` of every leaf of ``root``."""
    pending = {}  # node -> the gradient that reached each of its outputs so far
    send((root.creator, root.output_index), dout, pending)
    for node in topological_order(root.creator):
        douts = pending.pop(node, None)
        if douts is None:  # no gradient reached it
            continue
        douts = [d if d is not None else np.zeros(shape, dtype)  # an output nobody used
                 for d, (shape, dtype, _device) in zip(douts, node.output_meta, strict=True)]
        dinputs = node.backward(*douts)
        if not isinstance(dinputs, tuple):
            dinputs = (dinputs,)
        for edge, dinput in zip(node.next_edges, dinputs, strict=True):
            if edge is not None and dinput is not None:
                send(edge, np.asarray(dinput), pending)
