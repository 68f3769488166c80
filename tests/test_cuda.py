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
