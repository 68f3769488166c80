"""The backward engine: graph shapes, accumulation, freeing, no_grad, detach."""

import weakref

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.autograd import Function


def leaf(values, dtype="float64"):
    return mt.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


def test_tensor_used_twice_gets_the_sum_of_both_gradients():
    x = leaf([1.0, 2.0, 3.0])
    y = x * x + x            # dy/dx = 2x + 1
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [3.0, 5.0, 7.0])


def test_diamond_graph_sums_both_paths():
    x = leaf([0.5, -1.0])
    a = x.exp()
    b = a * 2.0
    c = a.tanh()
    (b + c).sum().backward()
    ea = np.exp([0.5, -1.0])
    np.testing.assert_allclose(x.grad, 2 * ea + (1 - np.tanh(ea) ** 2) * ea)


def test_same_tensor_as_both_inputs_of_one_op():
    x = leaf([2.0, -3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad, [4.0, -6.0])


def test_gradients_accumulate_across_backward_calls_until_zero_grad():
    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad, [6.0, 6.0])
    x.zero_grad()
    assert x.grad is None


def test_deep_chain_needs_no_recursion():
    x = leaf([1.0])
    y = x
    for _ in range(5000):
        y = y * 1.0 + 0.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [1.0])


def test_second_backward_through_a_freed_graph_raises():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad, [4.0, 8.0])


def test_backward_frees_saved_arrays():
    x = leaf([1.0, 2.0])
    y = x * x
    node = y.creator
    assert node.saved is not None
    y.sum().backward()
    assert node.saved is None and node.released


def test_no_grad_records_nothing_and_saves_nothing():
    x = leaf([1.0, 2.0])
    with mt.no_grad():
        y = x * x
    assert not y.requires_grad and y.creator is None
    assert mt.is_grad_enabled()


def test_no_grad_belongs_to_the_thread_that_entered_it():
    import threading
    entered, leave = threading.Event(), threading.Event()
    seen = {}

    def decode_elsewhere():
        with mt.no_grad():
            seen["inside"] = mt.is_grad_enabled()
            entered.set()
            leave.wait(10)

    other = threading.Thread(target=decode_elsewhere)
    other.start()
    entered.wait(10)
    x = leaf([1.0, 2.0])
    y = (x * x).sum()        # recorded here while the other thread is under no_grad
    leave.set()
    other.join()
    assert seen["inside"] is False
    assert y.requires_grad and mt.is_grad_enabled()
    y.backward()
    np.testing.assert_allclose(x.grad, [2.0, 4.0])


def test_overlapping_no_grad_blocks_on_two_threads_restore_each_their_mode():
    import threading
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    after = {}

    def first():
        with mt.no_grad():
            a_in.set()
            b_in.wait(10)
        a_out.set()
        after["first"] = mt.is_grad_enabled()

    def second():
        a_in.wait(10)
        with mt.no_grad():
            b_in.set()
            a_out.wait(10)   # leaves its block after the first thread left its own
        after["second"] = mt.is_grad_enabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert after == {"first": True, "second": True}
    assert mt.is_grad_enabled()


@pytest.mark.parametrize("grad", [True, False])
def test_work_on_the_worker_threads_runs_in_the_callers_grad_mode(grad, monkeypatch):
    from minitransformer.functional import _blocks
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    with mt.autograd.set_grad_enabled(grad):
        modes = _blocks.on_workers(lambda _: mt.is_grad_enabled(), [0, 1, 2, 3])
    assert modes == [grad] * 4


def test_detach_stops_the_gradient():
    x = leaf([1.0, 2.0])
    y = x.detach() * x      # only the second factor is differentiated
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [1.0, 2.0])
    assert not x.detach().requires_grad


def test_retain_grad_keeps_an_intermediate_gradient():
    x = leaf([1.0, 2.0])
    h = (x * 3.0).retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad, 2 * np.array([3.0, 6.0]))
    np.testing.assert_allclose(x.grad, 2 * np.array([3.0, 6.0]) * 3.0)


def test_intermediate_gradients_are_not_kept_by_default():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    (h * h).sum().backward()
    assert h.grad is None


def test_unused_output_of_a_multi_output_function_gets_zero_gradient():
    x = leaf(np.arange(6.0).reshape(2, 3))
    left, _ = mt.functional.split(x, [1], axis=1)
    left.sum().backward()
    np.testing.assert_allclose(x.grad, [[1, 0, 0], [1, 0, 0]])


def test_leaf_gradient_does_not_alias_another_leaf():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()   # add's backward returns the same dout for both inputs
    a.grad[0] = 100.0
    assert b.grad[0] == 1.0


class _WrongShape(Function):
    def forward(self, x):
        return x * 2

    def backward(self, dout):
        return dout.sum(axis=0)


class _WrongCount(Function):
    def forward(self, x):
        return x * 2

    def backward(self, dout):
        return dout, dout


def test_engine_names_a_backward_that_returns_the_wrong_shape():
    x = leaf(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"_WrongShape.backward returned a gradient of shape"):
        _WrongShape()(x).sum().backward()


def test_engine_names_a_backward_that_returns_the_wrong_number_of_gradients():
    x = leaf(np.ones(3))
    with pytest.raises(RuntimeError, match=r"_WrongCount.backward returned 2 gradients for 1"):
        _WrongCount()(x).sum().backward()


def test_engine_rejects_a_gradient_of_the_wrong_dtype():
    class Upcast(Function):
        def forward(self, x):
            return x * 2

        def backward(self, dout):
            return dout.astype("float64")

    x = mt.tensor([1.0, 2.0], requires_grad=True)  # float32
    with pytest.raises(RuntimeError, match="dtype float64 for input 0, which has shape"):
        Upcast()(x).sum().backward()


def test_float32_graph_gives_float32_gradients():
    x = mt.randn(3, 4, requires_grad=True)
    w = mt.randn(4, 2, requires_grad=True)
    loss = ((x @ w).tanh() * 0.5 + 1).sum() / 2
    loss.backward()
    assert loss.dtype == np.float32
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32


def test_a_0d_leaf_gets_an_array_gradient_that_clipping_can_scale():
    from minitransformer.nn import Parameter
    from minitransformer.optim import clip_grad_norm
    w = Parameter(np.array(3.0))                  # 0-d: NumPy's products of it are scalars
    v = Parameter(np.array([1.0]))
    (w * 10.0 * v).sum().backward()               # dw = 10, dv = 30
    assert isinstance(w.grad, np.ndarray) and w.grad.shape == ()
    clip_grad_norm([w, v], 1.0)
    norm = np.sqrt(10.0**2 + 30.0**2)
    np.testing.assert_allclose([w.grad, v.grad[0]], [10.0 / norm, 30.0 / norm], rtol=1e-6)


def test_a_recorded_call_tells_forward_which_inputs_want_a_gradient():
    """needs_input_grad is set before forward when the call is recorded (as PyTorch's
    ctx.needs_input_grad), and stays () when nothing is recorded."""
    seen = []

    class Peek(Function):
        def forward(self, a, b):
            seen.append(self.needs_input_grad)
            return a + b

        def backward(self, dout):
            return dout, dout

    a, b = mt.tensor(np.ones(3), requires_grad=True), mt.tensor(np.ones(3))
    Peek()(a, b)
    with mt.no_grad():
        Peek()(a, b)
    assert seen == [(True, False), ()]


# ------------------------------------------------------- gradients taken without a copy

class _Fresh(Function):
    """y = 2x; backward returns a new array, remembered only weakly (``made``)."""

    made: list = []

    def forward(self, x):
        return x * 2

    def backward(self, dout):
        grad = dout * 2
        _Fresh.made.append(weakref.ref(grad))
        return grad


class _Keeps(Function):
    """y = 2x; backward returns an array that it also keeps (``kept``)."""

    kept: list = []

    def forward(self, x):
        return x * 2

    def backward(self, dout):
        grad = dout * 2
        _Keeps.kept.append(grad)
        return grad


class _Seen(Function):
    """y = x; backward remembers (weakly) the dout the engine handed it."""

    seen: list = []

    def forward(self, x):
        return x.copy()

    def backward(self, dout):
        _Seen.seen.append(weakref.ref(dout))
        return dout.copy()


def test_a_leaf_takes_a_new_gradient_that_nothing_else_holds_as_it_is():
    _Fresh.made.clear()
    x = leaf(np.ones((3, 4)))
    _Fresh()(x).sum().backward()
    assert x.grad is _Fresh.made[0]()
    np.testing.assert_allclose(x.grad, 2.0)


def test_a_leaf_copies_a_gradient_that_its_backward_also_keeps():
    _Keeps.kept.clear()
    x = leaf(np.ones((3, 4)))
    _Keeps()(x).sum().backward()
    assert x.grad is not _Keeps.kept[0]
    x.grad += 1  # the leaf's buffer is its own: what the backward kept is untouched
    np.testing.assert_allclose(_Keeps.kept[0], 2.0)


def test_a_leaf_copies_a_gradient_that_is_a_view():
    x = leaf(np.ones((3, 4)))
    x.reshape(12).sum().backward()  # Reshape's backward: a view of the seed
    assert x.grad.base is None


def test_the_second_gradient_of_a_tensor_used_twice_is_added_into_a_new_first_one():
    """y = f(x) used by _Fresh and _Keeps: the sum reaches _Seen's backward in the first
    gradient's own array when nothing else holds it, in a new array otherwise."""
    for first, second, in_place in ((_Fresh, _Keeps, True), (_Keeps, _Fresh, False)):
        _Fresh.made.clear(), _Keeps.kept.clear(), _Seen.seen.clear()
        x = leaf(np.ones((3, 4)))
        y = _Seen()(x)
        total = second()(y).sum() + first()(y).sum() * 3.0  # first's backward runs first
        total.backward()
        np.testing.assert_allclose(x.grad, 2.0 + 6.0)
        arrived = _Seen.seen[0]()
        made_first = (_Fresh.made if first is _Fresh else _Keeps.kept)[0]
        made_first = made_first() if first is _Fresh else made_first
        assert (arrived is made_first) == in_place
        if not in_place:
            np.testing.assert_allclose(_Keeps.kept[0], 6.0)  # the kept array is untouched


def test_where_reference_counts_may_leave_holders_out_every_gradient_is_copied(monkeypatch):
    """On an interpreter whose counts are not exact (CPython 3.14's borrowed references, a
    free-threaded build) nothing is taken as it is."""
    from minitransformer.autograd import engine
    monkeypatch.setattr(engine, "_EXACT_REFCOUNTS", False)
    _Fresh.made.clear()
    x = leaf(np.ones((3, 4)))
    _Fresh()(x).sum().backward()
    assert x.grad is not _Fresh.made[0]()
    np.testing.assert_allclose(x.grad, 2.0)
