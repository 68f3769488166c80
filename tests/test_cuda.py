"""Real CuPy on a real GPU: skipped cleanly where there is none."""

import numpy as np
import pytest
from conftest import CUDA

import minitransformer as mt
from minitransformer.verify.function_cases import CASES, run_case

pytestmark = pytest.mark.skipif(not CUDA, reason="needs CuPy and a GPU")


def test_tensors_move_to_the_gpu_and_back():
    import cupy

    x = mt.tensor([[1.0, 2.0]], requires_grad=True).to("cuda")
    assert isinstance(x.data, cupy.ndarray) and x.device == "cuda"
    (x * x).sum().backward()
    assert isinstance(x.grad, cupy.ndarray)
    np.testing.assert_allclose(x.to("cpu").numpy(), [[1.0, 2.0]])


@pytest.mark.parametrize("case", CASES, ids=[f"{c.name}-{c.note or 'plain'}" for c in CASES])
def test_every_gradcheck_case_passes_on_the_gpu(case):
    mt.use("cuda")
    report = run_case(case)
    assert report.passed, report


# ------------------------------------------------------- fused kernels against the NumPy path

# Rows shorter than a warp (8), and longer than one with a ragged end (100): the row kernels
# give each row 32 threads, each thread every 32nd element.
@pytest.mark.parametrize("width", [8, 100])
@pytest.mark.parametrize("layer", ["layer_norm", "attention", "cross_entropy"])
def test_fused_kernels_agree_with_the_numpy_path(layer, width):
    from minitransformer import functional as F
    rng = np.random.default_rng(0)
    T = 5 if layer != "attention" else width                      # attention: S = T keys
    x = rng.standard_normal((3, T, width)).astype(np.float32)
    if layer == "layer_norm":
        gain = rng.standard_normal(width).astype(np.float32)
        bias = rng.standard_normal(width).astype(np.float32)
        def op(a, g, b):
            return F.layer_norm(a, g, b)
        inputs = (x, gain, bias)
    elif layer == "attention":
        mask = np.tril(np.ones((T, T), bool))
        mask[2] = False                                           # a fully masked row
        def op(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, mt.tensor(mask).to(q.device))
        inputs = (x, x[::-1].copy(), x * 2)
    else:
        targets = rng.integers(0, width, size=(3, T))
        targets[0, 1] = 0
        def op(z):
            return F.cross_entropy(z, mt.tensor(targets).to(z.device), 0.1, ignore_index=0)
        inputs = (x,)
    results = []
    for device in ("cpu", "cuda"):
        mt.use(device)
        tensors = [mt.tensor(a, device=device, requires_grad=True) for a in inputs]
        out = op(*tensors)
        out.sum().backward()
        results.append([mt.to_numpy(out.data)] + [mt.to_numpy(t.grad) for t in tensors])
    mt.use("cpu")
    for cpu, gpu in zip(*results, strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_fused_dropout_and_adam_agree_with_the_numpy_path():
    from minitransformer import functional as F
    from minitransformer.nn.module import Parameter
    from minitransformer.optim import Adam
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    mt.use("cuda")
    t = mt.tensor(x, device="cuda", requires_grad=True)
    y = F.dropout(t, 0.25)
    y.sum().backward()
    kept = mt.to_numpy(y.data) != 0
    np.testing.assert_allclose(mt.to_numpy(y.data)[kept], x[kept] / 0.75, rtol=1e-6)
    np.testing.assert_allclose(t.grad.get(), kept / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9
    params = {}
    for device in ("cpu", "cuda"):
        mt.use(device)
        p = Parameter(mt.tensor(x, device=device).data)
        optimizer = Adam([p], lr=1e-2)
        for _ in range(3):
            p.grad = p.data * 0.5
            optimizer.step()
        params[device] = p.data.get() if device == "cuda" else p.data
    mt.use("cpu")
    np.testing.assert_allclose(params["cuda"], params["cpu"], rtol=1e-5, atol=1e-7)


def test_memory_stats_report_the_cupy_pool():
    mt.use("cuda")
    x = mt.zeros(1024, 1024)
    stats = mt.backend.memory_stats()
    mt.use("cpu")
    assert stats["used_bytes"] >= x.data.nbytes and stats["pool_bytes"] >= stats["used_bytes"]


# ------------------------------------------------- products through cuBLAS itself (_cublas.py)

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("a_shape, b_shape, how", [
    ((7, 5), (5, 3), "contiguous"), ((2, 3, 7, 5), (5, 3), "contiguous"),
    ((2, 3, 7, 5), (2, 3, 5, 4), "b transposed"), ((2, 3, 7, 5), (1, 3, 5, 4), "a transposed"),
    ((5,), (4, 5, 3), "contiguous"), ((4, 7, 5), (5,), "contiguous"),
    ((6, 5), (5, 9), "strided"), ((3, 0, 5), (5, 2), "contiguous"),
    ((3, 4, 0), (0, 2), "contiguous"),
])
def test_cublas_products_equal_cupys(dtype, a_shape, b_shape, how):
    import cupy

    from minitransformer.functional import _cublas
    assert _cublas.library(cupy) is not None, _cublas.why_unavailable()
    rng = np.random.default_rng(0)
    a = cupy.asarray(rng.standard_normal(a_shape).astype(dtype))
    b = cupy.asarray(rng.standard_normal(b_shape).astype(dtype))
    if how == "b transposed":
        b = cupy.ascontiguousarray(cupy.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    elif how == "a transposed":
        a = cupy.ascontiguousarray(cupy.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    elif how == "strided":
        a = cupy.repeat(a, 2, axis=-1)[..., ::2]
    lib = _cublas.library(cupy)

    def direct(a, b, out=None):  # what a captured step runs
        return _cublas.product(a, b, out, cupy, lib.run)
    expected = cupy.matmul(a, b)
    got = direct(a, b)
    out = cupy.empty(expected.shape[::-1], dtype=dtype).T if expected.ndim == 2 else None
    assert got.shape == expected.shape
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(expected), rtol=tolerance,
                               atol=tolerance)
    if out is not None:
        assert direct(a, b, out) is out
        np.testing.assert_allclose(cupy.asnumpy(out), cupy.asnumpy(expected), rtol=tolerance,
                                   atol=tolerance)


def test_a_captured_product_replays_the_eager_numbers():
    """What CuPy's own matmul refuses: a product inside a CUDA graph."""
    import cupy

    from minitransformer.autograd.graphs import capture
    from minitransformer.functional import _products
    mt.use("cuda")
    rng = np.random.default_rng(0)
    a = cupy.asarray(rng.standard_normal((4, 8, 16)).astype(np.float32))
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))

    def step(a):
        return _products.matmul(a, w) * 2.0

    eager = cupy.asnumpy(step(a))
    graph = capture(step, (a,), "cuda")
    # eager products are cupy.matmul's, a replay's the direct call: equal up to rounding
    for scale in (1.0, 3.0):
        got = cupy.asnumpy(graph.replay((a * scale,)))
        np.testing.assert_allclose(got, cupy.asnumpy(step(a * scale)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(graph.replay((a,))), eager, rtol=1e-5, atol=1e-5)
