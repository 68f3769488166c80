"""The CPU machinery under the fused layers: row blocks run on worker threads give the same
numbers as one call on all rows, and reused buffers are handed out only when nobody holds
them."""

import time

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.functional import _blocks, _workspace
from minitransformer.verify.function_cases import CASES, run_case

# the Functions whose CPU kernels run in blocks of rows (for_blocks, for_element_blocks)
BLOCKED = {"layer_norm", "cross_entropy", "dropout", "linear_relu", "relu",
           "scaled_dot_product_attention"}
# attention on one (T, D) matrix has no leading axis to cut: one call, no blocks
ONE_BLOCK = {("scaled_dot_product_attention", "one matrix (T, D), mask (T, S)")}


def _loss_and_grad(logits, targets):
    x = mt.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(x, targets, label_smoothing=0.1, ignore_index=0)
    loss.backward()
    return loss.item(), x.grad.copy()


def test_cross_entropy_in_many_blocks_equals_one_block(monkeypatch):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((37, 11)).astype(np.float32)
    targets = rng.integers(0, 11, size=37)
    one_loss, one_grad = _loss_and_grad(logits, targets)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 3 * 11 * 4)   # 3 rows a block: 13 blocks
    many_loss, many_grad = _loss_and_grad(logits, targets)
    assert many_loss == one_loss
    np.testing.assert_array_equal(many_grad, one_grad)


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.name}-{c.note or 'plain'}")
                                  for c in CASES])
def test_gradcheck_in_blocks_of_one_row_on_worker_threads(monkeypatch, case):
    """The block loops themselves, by finite differences in float64: every row its own block,
    blocks on two worker threads, and every array taken from the reused workspace."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1)
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_workspace, "MIN_BYTES", 0)
    blocks = []
    shared_out = _blocks.shared_out

    def counted(task, items):
        blocks.extend(items)
        return shared_out(task, items)
    monkeypatch.setattr(_blocks, "shared_out", counted)
    report = run_case(case)
    assert report.passed and report.max_rel_error < 1e-6, str(report)
    if case.name in BLOCKED and (case.name, case.note) not in ONE_BLOCK:
        assert len(blocks) > 1, f"{case.name}: its kernels never ran in blocks"


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.name}-{c.note or 'plain'}")
                                  for c in CASES if c.name in BLOCKED])
def test_gradcheck_in_blocks_of_one_row_on_one_worker(monkeypatch, case):
    """The blocks in turn on the calling thread, as on a one-core machine or inside a worker
    that is already decoding a share of a batch."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1)
    monkeypatch.setattr(_blocks, "WORKERS", 1)
    report = run_case(case)
    assert report.passed and report.max_rel_error < 1e-6, str(report)


def test_for_blocks_covers_every_row_once():
    seen = np.zeros(1000, dtype=int)

    def kernel(rows):
        seen[rows] += 1
    _blocks.for_blocks(kernel, 1000, _blocks.BLOCK_BYTES // 7, np)
    assert (seen == 1).all()


def test_for_blocks_reraises_a_kernel_error():
    def kernel(rows):
        raise ValueError("bad block")
    with pytest.raises(ValueError, match="bad block"):
        _blocks.for_blocks(kernel, 10**6, 1024, np)


def test_workspace_reuses_a_buffer_only_when_nobody_holds_it():
    shape = (_workspace.MIN_BYTES // 4 // 64 + 1, 64)         # just above the threshold
    a = _workspace.empty(shape, "float32", np)
    b = _workspace.empty(shape, "float32", np)
    assert not np.shares_memory(a, b)                          # a is held: b is new
    a[:] = 1.0
    view = a[:5]
    del a
    c = _workspace.empty(shape, "float32", np)
    assert not np.shares_memory(c, view)                       # a view keeps a's block busy
    del view, b
    d = _workspace.empty(shape, "float32", np)
    assert d.shape == shape and d.dtype == np.float32 and d.flags.c_contiguous
    assert any(np.shares_memory(d, block) for block in _workspace._blocks)
    small = _workspace.empty((4, 4), "float32", np)            # below MIN_BYTES: plain empty
    assert not any(np.shares_memory(small, block) for block in _workspace._blocks)


def test_workspace_never_gives_one_free_buffer_to_two_threads(monkeypatch):
    """Threads decoding shares of a batch ask for buffers at once: each gets its own, even
    when a thread is interrupted between finding a block free and taking it."""
    unused = _workspace._unused
    def slow_unused(i):
        free = unused(i)
        time.sleep(0.01)  # another thread runs here
        return free
    monkeypatch.setattr(_workspace, "_unused", slow_unused)
    shape = (_workspace.MIN_BYTES // 4 // 64 + 1, 64)
    for _ in range(3):  # free blocks from earlier rounds are there to be fought over
        held = _blocks.on_workers(lambda i: _workspace.empty(shape, "float32", np),
                                  list(range(2 * _blocks.WORKERS)))
        assert not any(np.shares_memory(a, b)
                       for i, a in enumerate(held) for b in held[i + 1:])
        del held


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_sum_last_equals_numpy_sum_for_stacked_matrices(layout):
    """sum_last flattens a contiguous (..., T, S) array into one matrix-vector product and
    falls back to the stacked product otherwise: both are the sum over the last axis."""
    from minitransformer.functional._reduce import sum_last
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5, 7))
    if layout == "strided":
        x = x.transpose(1, 0, 2, 3)                   # (4, 3, 5, 7), not C-contiguous
        assert not x.flags.c_contiguous
    total = sum_last(x)
    assert total.shape == x.shape[:-1]
    np.testing.assert_allclose(total, x.sum(axis=-1), rtol=1e-12, atol=1e-12)


def test_the_engines_sum_of_large_gradients_is_a_new_array_on_blocks(monkeypatch):
    """Gradients that reach one tensor are summed on the worker threads when large, into a
    new array: neither term is written (Add hands the same dout to both of its inputs)."""
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((600, 512)).astype(np.float32) for _ in range(2))
    a_before, b_before = a.copy(), b.copy()
    total = _blocks.added(a, b)
    assert a.nbytes >= _blocks.MIN_SUM_BYTES and total is not a and total is not b
    np.testing.assert_array_equal(total, a_before + b_before)
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)
    np.testing.assert_array_equal(_blocks.added(a.T, b.T), a.T + b.T)   # not C order: a + b
    sums, added = [], _blocks.added

    def counted(a, b):
        sums.append(a.nbytes)
        return added(a, b)
    monkeypatch.setattr(_blocks, "added", counted)
    x = mt.tensor(a, requires_grad=True)
    h = x * 1.0                            # not a leaf: its two gradients meet in the engine
    y = F.add(h, h) * 3.0                  # Add hands one dout to both of its inputs
    dout = rng.standard_normal(a.shape).astype(np.float32)
    y.backward(mt.tensor(dout))
    assert sums == [a.nbytes]
    np.testing.assert_allclose(x.grad, 6.0 * dout, rtol=1e-6)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_split_backward_on_blocks_is_the_concatenation(monkeypatch, axis):
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1)
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    rng = np.random.default_rng(1)
    a = mt.tensor(rng.standard_normal((5, 6, 9)), requires_grad=True)
    parts = F.split(a, 3, axis=axis)
    douts = [rng.standard_normal(p.shape) for p in parts]
    sum((p * mt.tensor(d)).sum() for p, d in zip(parts, douts, strict=True)).backward()
    np.testing.assert_array_equal(a.grad, np.concatenate(douts, axis=axis))
