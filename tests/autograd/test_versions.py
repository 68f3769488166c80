"""Updates in place after the forward pass: backward refuses instead of a wrong gradient.

An optimizer step writes the new weights into the parameters' own arrays, which the Functions
of a recorded graph may have saved. Without the version count, ``optimizer.step()`` before
``loss.backward()`` silently gave the gradient at the new weights.
"""

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import Function, backend
from minitransformer.nn import Linear
from minitransformer.optim import Adam


def linear_with_gradients():
    mt.manual_seed(0)
    layer = Linear(3, 2)
    for p in layer.parameters():
        p.grad = p.xp.ones_like(p.data)     # any gradient: the step needs one to update
    return layer, Adam(layer.parameters(), lr=0.5)


def test_a_step_between_forward_and_backward_is_refused_naming_the_input(device):
    layer, optimizer = linear_with_gradients()
    x = mt.randn(4, 3, requires_grad=True)
    loss = layer(x).sum()
    optimizer.step()
    with pytest.raises(RuntimeError, match=r"Linear: input 1 \(shape \(2, 3\), dtype float32\) "
                                           r"was updated in place .*\(version 0 then, 1 now\).*"
                                           r"backward\(\) before optimizer.step\(\)"):
        loss.backward()
    assert x.grad is None


def test_the_step_counts_one_version_per_updated_parameter():
    layer, optimizer = linear_with_gradients()
    layer.bias.grad = None                  # no gradient: Adam leaves it alone
    optimizer.step()
    optimizer.step()
    assert (layer.weight._version, layer.bias._version) == (2, 0)


def test_backward_then_step_then_a_new_forward_trains_as_before():
    layer, optimizer = linear_with_gradients()
    x = mt.randn(4, 3)
    for _ in range(3):
        optimizer.zero_grad()
        (layer(x) ** 2).sum().backward()
        optimizer.step()
    # a graph recorded after the last step runs, against the weights its forward used
    x_leaf = mt.tensor(x.data, requires_grad=True)
    y = layer(x_leaf)
    (y ** 2).sum().backward()
    assert layer.weight._version == 3
    np.testing.assert_allclose(x_leaf.grad, (2 * y.data) @ layer.weight.data, rtol=1e-5)


def test_a_retained_graph_is_refused_after_a_step():
    layer, optimizer = linear_with_gradients()
    loss = layer(mt.randn(4, 3)).sum()
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)        # twice before the step: fine
    optimizer.step()
    with pytest.raises(RuntimeError, match="updated in place"):
        loss.backward()


@pytest.mark.parametrize("view", [
    lambda w: w.T,
    lambda w: w.reshape(3, 2),
    lambda w: w[:, :2],
    lambda w: w.swapaxes(0, 1),
    lambda w: F.split(w, 3, axis=1)[0],
    lambda w: w.astype(w.dtype),
    lambda w: w.detach(),
    lambda w: mt.Tensor(w),
    lambda w: F.sum_to(w, w.shape),
], ids=["transpose", "reshape", "slice", "swapaxes", "split", "astype-same", "detach", "Tensor",
        "sum_to-same"])
def test_an_update_is_seen_through_a_view_of_the_parameter(view, device):
    layer, optimizer = linear_with_gradients()
    w = view(layer.weight)
    x = mt.randn(4, w.shape[0], requires_grad=True)
    loss = (x @ w).sum()                    # matmul saved the view, which shares w's memory
    optimizer.step()
    with pytest.raises(RuntimeError, match="updated in place"):
        loss.backward()


def test_a_copy_of_the_parameter_keeps_its_own_version(device):
    layer, optimizer = linear_with_gradients()
    gathered = layer.weight[layer.weight.xp.asarray([1, 0])]   # integer indices: a copy
    x = mt.randn(4, 2, requires_grad=True)
    loss = (x @ gathered).sum()
    optimizer.step()
    loss.backward()                                 # the copy still holds what forward used
    row = backend.to_numpy(gathered.data).sum(axis=1)
    np.testing.assert_allclose(backend.to_numpy(x.grad), np.broadcast_to(row, (4, 2)),
                               rtol=1e-6)



class KeepsNested(Function):
    """y = a * b, keeping its factors in a nested tuple, with an unrelated None."""

    def forward(self, a, b):
        self.saved = ((a, b), None)
        return a * b

    def backward(self, dout):
        (a, b), _ = self.saved
        return dout * b, dout * a


def test_arrays_saved_in_nested_tuples_are_tracked():
    layer, optimizer = linear_with_gradients()
    x = mt.randn(2, 3, requires_grad=True)
    loss = KeepsNested()(x, layer.weight).sum()
    optimizer.step()
    with pytest.raises(RuntimeError, match="KeepsNested: input 1"):
        loss.backward()


def test_a_refused_backward_writes_no_gradient_anywhere():
    """Nodes nearer the loss than the stepped parameter would have run first: the check covers
    the whole graph before any backward does."""
    mt.manual_seed(0)
    first, second = Linear(3, 3), Linear(3, 2)
    x = mt.randn(4, 3)
    loss = second(F.relu(first(x))).sum()
    first.weight.grad = first.weight.xp.ones_like(first.weight.data)
    Adam([first.weight], lr=0.1).step()
    first.weight.grad = None
    with pytest.raises(RuntimeError, match="updated in place"):
        loss.backward()
    assert all(p.grad is None for p in [*first.parameters(), *second.parameters()])
