"""Exercise: write the autograd engine's backward walk.

Chapter 1 runs ``loss.backward()`` and reads the gradients it leaves on the parameters. Here
you write what happens inside: ``backward(root, dout)`` accumulates

    d(Σ root ∘ dout) / d(leaf)    into    leaf.grad

for every leaf that wants a gradient, as the library's ``engine.run_backward`` does.

What the forward pass left behind (the tape):

* ``root.creator`` is the Function node that made ``root``; ``root.output_index`` says which
  of that node's outputs ``root`` is (0 unless the Function has several, like ``split``).
* ``node.next_edges`` has one entry per input of the node, saying where that input came from:
  a tuple ``(parent, i)``: the i-th output of the Function node ``parent``;
  a Tensor: a leaf that wants a gradient (a parameter, an input made with requires_grad=True);
  ``None``: an input that wants no gradient (a constant, token ids, a mask).
* ``node.output_meta[i]`` is ``(shape, dtype, device)`` of the node's i-th output.
* ``node.backward(*douts)`` takes one gradient per output of the node (arrays of the outputs'
  shapes) and returns the gradients of its inputs: a tuple with one entry per input, or a
  single array for a node with one input; ``None`` where an input wants no gradient.

The contract:

1. Call every node's ``backward`` exactly once, and only after the ``backward`` of every node
   that uses its output: by then, all of that output's gradient has arrived. An order in
   which every node comes before the nodes that produced its inputs is a reverse topological
   order.
2. A tensor used several times gets the sum of the gradients from all its uses (the chain
   rule, summed over paths), at a node's output and at a leaf alike.
3. An output that nobody used gets a gradient of zeros of its shape and dtype.
4. A leaf's gradient goes into ``leaf.grad``: the gradient itself where ``.grad`` is None, else
   added to what it holds (gradients accumulate over backward calls, as over the micro-batches
   of a large batch). No other tensor gets a ``.grad``.
5. No recursion: a graph may be thousands of nodes deep (the grader builds one of 1,500), and
   Python stops at about 1,000 nested calls.

Hints:

* Two passes. First the order: a depth-first search from ``root.creator`` puts a node after
  all of its parents once they are done (a post-order); reversed, that is the order you need.
  Do the search with your own stack: a list of (node, the parents still to visit).
* Then the walk: keep, for each node, a list with the gradient that has reached each of its
  outputs so far (a dict keyed by the node works). Seed the root's slot with ``dout``.
* ``add``'s backward returns the same array ``dout`` for both of its inputs. If you later add
  into an array with ``+=``, make sure nobody else holds it: ``a + b`` makes a new array;
  ``grad.copy()`` gives a leaf an array of its own.
* Use NumPy only; calling the library's ``Tensor.backward`` or ``engine.run_backward`` does
  not count (the grader checks who calls each backward).

Check your answer:
    minitransformer check-exercise autograd_engine lessons/exercises/autograd_engine.py
It runs your walk on a few graphs (a tensor used twice, a diamond, a split with an unused half,
a Linear layer whose .grad already holds a gradient, a 1,500-node chain, a tiny Transformer's
loss) and compares every leaf's .grad with the library engine's.
"""

import numpy as np  # noqa: F401 - for the zeros of an unused output


def backward(root, dout):
    """Accumulate d(Σ root ∘ dout)/d(leaf) into the ``.grad`` of every leaf of ``root``."""
    # 1. every node reachable from root.creator, each before the nodes that made its inputs
    # 2. pending: node -> the gradient of each of its outputs so far; the root's slot = dout
    # 3. in that order: sum, zeros for an unused output, node.backward once, send each input's
    #    gradient on (into a parent's slot, or into a leaf's .grad)
    raise NotImplementedError("write the walk: order the nodes from root.creator without "
                              "recursion, then call each node's backward once, summing the "
                              "gradients that reach it")
