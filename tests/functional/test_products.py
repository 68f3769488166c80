"""The layers' matrix products (functional/_products.py): split over the worker threads they give
numpy.matmul's numbers and shapes, and BLAS never runs more than one thread inside them, which
is what keeps a training step from stalling when another process holds the cores."""

import numpy as np
import pytest

from minitransformer import functional as F
from minitransformer.functional import _blocks, _products
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import clip_grad_norm

# (a shape, b shape): rows, columns, batched, broadcast batch, 2-D b under a batch, vectors
SHAPES = [((64, 48), (48, 40)), ((12, 48), (48, 90)), ((3, 2, 20, 8), (3, 2, 8, 30)),
          ((4, 20, 8), (1, 8, 30)), ((5, 20, 8), (8, 30)), ((2, 20, 8), (5, 2, 8, 30)),
          ((48,), (48, 40)), ((64, 48), (48,)), ((48,), (48,))]


@pytest.fixture
def split_everything(monkeypatch):
    """Two workers, and every product of matrices large enough to be split."""
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    blocks = []
    shared_out = _blocks.shared_out

    def counted(task, items):
        blocks.append(len(items))
        return shared_out(task, items)
    monkeypatch.setattr(_blocks, "shared_out", counted)
    return blocks


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_split_products_equal_numpy_matmul(split_everything, shapes):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s) for s in shapes)
    expected = np.matmul(a, b)
    got = _products.matmul(a, b)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    if a.ndim > 1 and b.ndim > 1:
        assert split_everything == [2], "a product of matrices was not cut into two blocks"
    else:
        assert split_everything == [], "a matrix-vector product went to the pool"


@pytest.mark.parametrize("shapes", SHAPES[:3], ids=str)
def test_split_products_write_into_out_even_a_transposed_view(split_everything, shapes):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    expected = np.matmul(a, b)
    out = np.empty(expected.shape[:-2] + expected.shape[:-3:-1], np.float32)
    out = np.swapaxes(out, -1, -2)                    # not C-contiguous
    assert _products.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_blas_runs_one_thread_inside_every_product_of_a_training_step(monkeypatch):
    """What a step asks of BLAS: each product it computes (the gradient's norm too), on the
    calling thread or a worker, with BLAS's thread count at 1 (its spinning threads stall a
    shared machine), while the count outside the library's work is left as it was."""
    controller = _blocks.blas_controller()
    if not controller.select(user_api="blas").lib_controllers:
        pytest.skip("threadpoolctl sees no BLAS library in this process")
    outside = controller.select(user_api="blas").info()[0]["num_threads"]
    seen = []
    matmul = np.matmul

    def watched(*args, **kwargs):
        seen.append(controller.select(user_api="blas").info()[0]["num_threads"])
        return matmul(*args, **kwargs)
    monkeypatch.setattr(np, "matmul", watched)
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    config = TransformerConfig.named("tiny", 50)
    model = Transformer(config)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 50, (4, 7)), rng.integers(3, 50, (4, 6))
    F.cross_entropy(model(src, tgt), tgt, label_smoothing=0.1, ignore_index=0).backward()
    clip_grad_norm(model.parameters(), 1.0)                 # the gradient's norm: g·g
    assert len(seen) > 50 and set(seen) == {1}, sorted(set(seen))
    assert controller.select(user_api="blas").info()[0]["num_threads"] == outside


def test_a_product_on_a_worker_thread_stays_on_it(monkeypatch):
    """Decoding runs shares of a batch on the workers; their products must not wait for the
    pool they occupy."""
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    rng = np.random.default_rng(2)
    pairs = [(rng.standard_normal((30, 20)), rng.standard_normal((20, 25))) for _ in range(4)]
    got = _blocks.on_workers(lambda pair: _products.matmul(*pair), pairs)
    for (a, b), product in zip(pairs, got, strict=True):
        np.testing.assert_allclose(product, a @ b, rtol=1e-12)


def test_thin_products_are_not_split_and_blocks_keep_their_rows(monkeypatch):
    """Every block of a split product has at least MIN_BLOCK_ROWS rows (or columns): each
    packs the shared operand again, which thinner blocks do not pay back."""
    split = []
    shared_out = _blocks.shared_out
    monkeypatch.setattr(_blocks, "shared_out",
                        lambda task, items: split.append(len(items)) or shared_out(task, items))
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    rng = np.random.default_rng(4)
    rows = _products.MIN_BLOCK_ROWS
    for workers, M, N, blocks in [(2, rows, 32, 0), (2, 2 * rows, 32, 2), (8, 4 * rows, 32, 4),
                                  (8, 32, 3 * rows, 3)]:
        monkeypatch.setattr(_blocks, "WORKERS", workers)
        a, b = rng.standard_normal((M, 300)), rng.standard_normal((300, N))
        split.clear()
        np.testing.assert_allclose(_products.matmul(a, b), a @ b, rtol=1e-12)
        assert split == ([blocks] if blocks else []), (workers, M, N)


def test_one_worker_and_small_products_never_touch_the_pool(monkeypatch):
    def refuse(task, items):
        raise AssertionError("the pool was used")
    monkeypatch.setattr(_blocks, "shared_out", refuse)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 40))
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    np.testing.assert_array_equal(_products.matmul(a, b), a @ b)   # below MIN_SPLIT_FLOPS
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_blocks, "WORKERS", 1)
    np.testing.assert_array_equal(_products.matmul(a, b), a @ b)


def test_as_one_worker_the_calling_thread_keeps_its_products_and_blocks(monkeypatch):
    """Decoding's first share, beside shares on worker processes, runs as one busy worker:
    its products and blocks on the calling thread, BLAS on one thread, all restored after."""
    def refuse(task, items):
        raise AssertionError("the pool was used")
    monkeypatch.setattr(_blocks, "shared_out", refuse)
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    controller = _blocks.blas_controller()
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4 * _products.MIN_BLOCK_ROWS, 48)), rng.standard_normal((48, 40))
    seen = []
    with _blocks.as_one_worker():
        np.testing.assert_array_equal(_products.matmul(a, b), a @ b)
        _blocks.for_blocks(seen.append, 100, _blocks.BLOCK_BYTES, np)
        assert controller.select(user_api="blas").info()[0]["num_threads"] == 1
    assert len(seen) == 100 and not getattr(_blocks._thread, "on_worker", False)
    with pytest.raises(AssertionError, match="the pool was used"):
        _products.matmul(a, b)   # outside, a product this large is split again


@pytest.mark.parametrize("workers, split_flops, M, N", [
    (2, 0, 64, 40),          # cut into blocks of rows: the passes go with each block
    (2, 0, 12, 90),          # cut into blocks of columns: passes on for_blocks' blocks
    (2, 10**12, 64, 40),     # too small to cut
    (1, 0, 64, 40)])         # one worker
def test_passes_before_and_after_a_product_cover_every_row_once(monkeypatch, workers,
                                                                split_flops, M, N):
    """matmul(a, b, out, before=, after=) is before on a's rows, the product, then after on
    the output's rows: every row prepared before it is multiplied and finished once, however
    the product is cut (ReLU's mask before, bias and ReLU after, as the linear layers use)."""
    monkeypatch.setattr(_blocks, "WORKERS", workers)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 256)   # for_blocks' blocks of a few rows
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", split_flops)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    rng = np.random.default_rng(6)
    raw, b = rng.standard_normal((M, 48)), rng.standard_normal((48, N))
    bias = rng.standard_normal(N)
    a, out = np.full_like(raw, np.nan), np.empty((M, N))
    prepared, finished = np.zeros(M, int), np.zeros(M, int)

    def before(rows):
        prepared[rows] += 1
        np.maximum(raw[rows], 0, out=a[rows])

    def after(rows):
        assert prepared[rows].all(), "rows finished before they were prepared"
        finished[rows] += 1
        out[rows] += bias
    assert _products.matmul(a, b, out, before=before, after=after) is out
    np.testing.assert_array_equal(prepared, 1)
    np.testing.assert_array_equal(finished, 1)
    np.testing.assert_allclose(out, np.maximum(raw, 0) @ b + bias, rtol=1e-12, atol=1e-12)


def test_passes_around_a_product_need_matrices():
    with pytest.raises(ValueError, match="need matrices"):
        _products.matmul(np.ones((2, 3, 4)), np.ones((4, 5)), before=lambda rows: None)


def test_passes_go_with_the_blocks_of_a_product_cut_by_rows(monkeypatch):
    """Cut by rows on two workers: ``after`` once per block of the product, on the thread that
    prepared that block's rows, and ``before`` on for_blocks' own blocks (7 rows here), the
    product's blocks beginning where those do."""
    import threading
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 48 * 8 * 7)         # for_blocks: 7 rows of a
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 40))
    calls = []

    def before(rows):
        calls.append(("before", threading.get_ident(), rows))

    def after(rows):
        calls.append(("after", threading.get_ident(), rows))
    out = _products.matmul(a, b, before=before, after=after)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    prepared = sorted((rows.start, rows.stop) for kind, _, rows in calls if kind == "before")
    assert prepared == [(start, min(start + 7, 64)) for start in range(0, 64, 7)]
    finished = [(thread, rows) for kind, thread, rows in calls if kind == "after"]
    assert sorted((rows.start, rows.stop) for _, rows in finished) == [(0, 35), (35, 64)]
    for thread, rows in finished:
        assert all(t == thread for kind, t, r in calls
                   if kind == "before" and rows.start <= r.start < rows.stop), \
            "a block's rows were prepared on another thread than the one that finished it"
