"""The compiled CPU kernels (functional/_compiled.py, Numba) against NumPy's path and against
finite differences: the same formulas, so the same numbers up to the order of rounding, and
every backward checked in float64 as the NumPy one is."""

import os
import subprocess
import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.functional import _blocks, _compiled, _products, _workspace
from minitransformer.functional.dropout import _splitmix_words, draw_levels
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.verify.function_cases import CASES, run_case
from minitransformer.verify.module_cases import MODULE_CASES, run_module_case

pytest.importorskip("numba")

COMPILED = {"layer_norm", "dropout_add_layer_norm", "embedding", "linear", "linear_relu",
            "feed_forward", "cross_entropy", "scaled_dot_product_attention"}
MODULES = {"LayerNorm", "Embedding", "PositionwiseFeedForward", "Residual", "EncoderLayer",
           "DecoderLayer", "Transformer+loss", "MultiHeadAttention"}
RNG = np.random.default_rng(0)
TOLERANCE = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=2e-5, atol=2e-6)}


@pytest.mark.parametrize("blocks", ["whole", "one row a block on two threads"])
@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.name}-{c.note or 'plain'}")
                                  for c in CASES if c.name in COMPILED])
def test_compiled_backward_passes_gradcheck(compiled, monkeypatch, case, blocks):
    if blocks != "whole":
        monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1)
        monkeypatch.setattr(_blocks, "WORKERS", 2)
        monkeypatch.setattr(_workspace, "MIN_BYTES", 0)
    report = run_case(case)
    assert report.passed and report.max_rel_error < 1e-6, str(report)


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.name}-{c.note or 'plain'}")
                                  for c in MODULE_CASES if c.name in MODULES])
def test_modules_on_compiled_kernels_pass_gradcheck(compiled, case):
    report = run_module_case(case)
    assert report.passed and report.max_rel_error < 1e-6, str(report)


def _run(function, arrays, seed=4):
    """Outputs and input gradients of ``function`` on fresh tensors, upstream gradient fixed."""
    inputs = [mt.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    mt.manual_seed(seed)
    y = function(*inputs)
    y.backward(mt.tensor(np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype)))
    return [y.numpy()] + [t.grad for t in inputs if t.requires_grad]


def _both_ways(function, arrays, monkeypatch):
    """(NumPy's results, the compiled kernels' results), many blocks of rows."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)
    results = []
    for on in (False, True):
        mt.set_compiled_kernels(on)
        results.append(_run(function, arrays))
    return results


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layer", ["dropout_add_layer_norm", "layer_norm"])
def test_compiled_layer_norms_give_numpys_numbers(compiled, monkeypatch, layer, dtype):
    """Forward and every gradient equal NumPy's up to rounding (the dropout mask is the
    same draw), over 100 blocks of rows."""
    shape, C = (3, 700, 48), 48
    x, h = (RNG.standard_normal(shape).astype(dtype) * 3 + 1 for _ in range(2))
    gain, bias = (RNG.standard_normal(C).astype(dtype) for _ in range(2))
    if layer == "layer_norm":
        function, arrays = F.layer_norm, (x, gain, bias)
    else:
        def function(*a):
            return F.dropout_add_layer_norm(*a, p=0.2)
        arrays = (x, h, gain, bias)
    numpy_results, compiled_results = _both_ways(function, arrays, monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        assert actual.dtype == expected.dtype
        np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layer", [F.linear_relu, F.linear], ids=["linear_relu", "linear"])
def test_compiled_linear_layers_give_numpys_numbers(compiled, monkeypatch, dtype, layer):
    """The bias (and ReLU) in place, and dz = dout ∘ [y > 0] with db, as NumPy's: the same
    output, the same zeros, the same gradients up to rounding. The product is cut into
    blocks of rows on two workers, so the passes run with its blocks (``_products``)."""
    monkeypatch.setattr(_blocks, "WORKERS", 2)
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    x = RNG.standard_normal((4, 300, 24)).astype(dtype)
    weight = RNG.standard_normal((40, 24)).astype(dtype)
    bias = RNG.standard_normal(40).astype(dtype)
    numpy_results, compiled_results = _both_ways(layer, (x, weight, bias), monkeypatch)
    np.testing.assert_array_equal(compiled_results[0] == 0, numpy_results[0] == 0)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])


def test_compiled_linear_relu_without_an_input_gradient_masks_on_its_own_pass(compiled,
                                                                              monkeypatch):
    """An input that needs no gradient: no dx product to mask before, so the mask and db run
    on for_blocks' blocks; dW and db as NumPy's."""
    x = RNG.standard_normal((300, 24)).astype(np.float32)
    weight, bias = RNG.standard_normal((40, 24)), RNG.standard_normal(40)
    results = []
    for on in (False, True):
        mt.set_compiled_kernels(on)
        w = mt.tensor(weight.astype(np.float32), requires_grad=True)
        b = mt.tensor(bias.astype(np.float32), requires_grad=True)
        y = F.linear_relu(mt.tensor(x), w, b)
        y.backward(mt.tensor(np.random.default_rng(1).standard_normal(y.shape)
                             .astype(np.float32)))
        results.append((y.numpy(), w.grad, b.grad))
    for expected, actual in zip(*results, strict=True):
        np.testing.assert_allclose(actual, expected, **TOLERANCE["float32"])


@pytest.mark.parametrize("kernels", ["numpy", "compiled"])
def test_linear_relu_bias_gradient_is_the_same_bits_on_one_worker_or_two(monkeypatch, kernels):
    """The ReLU's db is summed on for_blocks' blocks of rows whether dx's product is cut
    over two workers or not (the product's blocks begin where those blocks do): the same
    numbers, bit for bit, whatever the thread count."""
    if kernels == "compiled" and not _compiled.available():
        pytest.skip("needs Numba")
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 40 * 4 * 7)       # blocks of 7 rows
    monkeypatch.setattr(_products, "MIN_SPLIT_FLOPS", 0)
    monkeypatch.setattr(_products, "MIN_BLOCK_ROWS", 1)
    x = RNG.standard_normal((301, 24)).astype(np.float32)
    weight = RNG.standard_normal((40, 24)).astype(np.float32)
    bias = RNG.standard_normal(40).astype(np.float32)
    results = []
    try:
        mt.set_compiled_kernels(kernels == "compiled")
        for workers in (1, 2, 3):
            monkeypatch.setattr(_blocks, "WORKERS", workers)
            results.append(_run(F.linear_relu, (x, weight, bias)))
    finally:
        mt.set_compiled_kernels(False)
    for other in results[1:]:
        np.testing.assert_array_equal(other[3], results[0][3])  # db


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("eps, ignore_index", [(0.0, None), (0.1, 0), (0.2, 3)])
def test_compiled_cross_entropy_gives_numpys_numbers(compiled, monkeypatch, dtype, eps,
                                                     ignore_index):
    """The loss and dz (made in forward, scaled by a dout that is not 1 in backward) as
    NumPy's, over many blocks of rows, ignored rows 0."""
    logits = (RNG.standard_normal((5, 60, 37)) * 4).astype(dtype)
    targets = RNG.integers(0, 37, (5, 60))
    targets[0, :10] = 0 if ignore_index is None else ignore_index

    def loss(z):
        return F.cross_entropy(z, targets, label_smoothing=eps, ignore_index=ignore_index)
    numpy_results, compiled_results = _both_ways(loss, (logits,), monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])
    if ignore_index is not None:
        assert (compiled_results[1][0, :10] == 0).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mask", ["none", "padding (B,1,1,S)", "causal (T,S)",
                                  "fully masked rows (B,H,T,S)"])
def test_compiled_attention_gives_numpys_numbers(compiled, monkeypatch, dtype, mask):
    """The softmax (scale, mask, max, shift; exp; sum, division) and its backward (the row's
    dot product, dS, the 1/√D folded in) as NumPy's, over many blocks of the batch; a query
    whose keys are all masked gets zero weights, output and gradient either way."""
    B, H, T, S, D = 6, 2, 5, 7, 4
    q, k, v = (RNG.standard_normal(shape).astype(dtype)
               for shape in ((B, H, T, D), (B, H, S, D), (B, H, S, D)))
    masks = {"none": None, "padding (B,1,1,S)": RNG.random((B, 1, 1, S)) < 0.7,
             "causal (T,S)": np.tril(np.ones((T, S), bool)),
             "fully masked rows (B,H,T,S)": RNG.random((B, H, T, S)) < 0.5}
    chosen = masks[mask]
    if chosen is not None and chosen.ndim == 4:
        chosen[:, :, 0] = False                          # every key of query 0 masked
    arrays = (q, k, v) if chosen is None else (q, k, v, chosen)
    numpy_results, compiled_results = _both_ways(F.scaled_dot_product_attention, arrays,
                                                 monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])
    if chosen is not None and chosen.ndim == 4:
        out, dq = compiled_results[0], compiled_results[1]
        assert not out[:, :, 0].any() and not dq[:, :, 0].any()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_compiled_attention_lets_nan_and_inf_through(compiled, bad):
    """A non-finite score makes its query's row non-finite, as NumPy's max and exp do, and
    leaves the other rows alone."""
    q = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    k, v = (RNG.standard_normal((1, 1, 5, 4)).astype(np.float32) for _ in range(2))
    q[0, 0, 1, 0] = bad
    k[0, 0, :, 0] = 1.0                                   # so the bad q meets every key
    out = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v)).numpy()
    assert np.isfinite(out[0, 0, [0, 2]]).all() and not np.isfinite(out[0, 0, 1]).all()


def test_compiled_cross_entropy_gives_ignored_rows_zero_gradient_whatever_they_hold(compiled):
    """Padding rows are left out: NaN logits there (a broken value only padding touched)
    change neither the loss nor the other rows' gradient, and their own is 0, not 0 · NaN."""
    logits = RNG.standard_normal((4, 5)).astype(np.float32)
    logits[2:] = np.nan
    z = mt.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(z, np.array([2, 3, 0, 0]), label_smoothing=0.1, ignore_index=0)
    assert np.isfinite(loss.item())
    loss.backward()
    assert np.isfinite(z.grad).all() and not z.grad[2:].any() and z.grad[:2].any()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_compiled_cross_entropy_lets_nan_and_inf_through(compiled, bad):
    """A non-finite logit makes the loss non-finite (not the maximum, yet still summed)."""
    logits = RNG.standard_normal((4, 9)).astype(np.float32)
    logits[2, 4] = bad
    z = mt.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(z, np.arange(4), label_smoothing=0.1)
    assert not np.isfinite(loss.item())
    loss.backward()
    assert np.isfinite(z.grad[[0, 1, 3]]).all()


def test_compiled_relu_lets_nan_through_forward_and_backward(compiled):
    """max(0, NaN) is NaN as np.maximum gives, and dz = dout ∘ [y > 0] keeps NaN · 0 = NaN."""
    zeros = np.zeros((1, 3), np.float32)
    bias = mt.tensor(np.array([1.0, -1.0, np.nan], np.float32), requires_grad=True)
    y = F.linear_relu(mt.tensor(zeros), mt.tensor(np.zeros((3, 3), np.float32)), bias)
    assert y.numpy()[0, 0] == 1 and y.numpy()[0, 1] == 0 and np.isnan(y.numpy()[0, 2])
    y.backward(mt.tensor(np.array([[np.nan, np.nan, 1.0]], np.float32)))
    assert np.isnan(bias.grad[:2]).all() and bias.grad[2] == 0


def test_compiled_residual_keeps_the_same_dropout_mask(compiled, monkeypatch):
    """The dropped entries (where dh is 0) are NumPy's: one draw of the generator, one mask."""
    x, h = (RNG.standard_normal((50, 16)) for _ in range(2))
    gain, bias = np.ones(16), np.zeros(16)
    numpy_results, compiled_results = _both_ways(
        lambda *a: F.dropout_add_layer_norm(*a, p=0.5), (x, h, gain, bias), monkeypatch)
    dropped = numpy_results[2] == 0
    assert 0.3 < dropped.mean() < 0.7
    np.testing.assert_array_equal(compiled_results[2] == 0, dropped)


def test_compiled_embedding_gradient_is_numpys_bit_for_bit(compiled, monkeypatch):
    """The scatter-add adds every row in NumPy's order: repeated ids sum to the same bits."""
    W = RNG.standard_normal((30, 8)).astype(np.float32)
    ids = RNG.integers(0, 30, size=(40, 25))
    numpy_results, compiled_results = _both_ways(
        lambda w: F.embedding(ids, w, padding_idx=3), (W,), monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_array_equal(actual, expected)
    assert not compiled_results[1][3].any()


def test_compiled_layer_norm_of_a_constant_row_is_the_bias(compiled):
    """μ from a float64 sum is the row's value exactly, so x̂ = 0 and y = bias, as NumPy's
    path gives: no rounding left for 1/√eps to blow up."""
    x = np.full((4, 256), 1234.567, dtype=np.float32)
    bias = RNG.standard_normal(256).astype(np.float32)
    y = F.layer_norm(mt.tensor(x), mt.tensor(np.ones(256, np.float32)), mt.tensor(bias))
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(bias, x.shape))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_layer_norm_takes_out_the_rounding_of_a_large_mean(dtype):
    """Rows near 1000 with a spread near √eps: μ rounded to float32 is off by up to half an
    ulp of 1000, which 1/√(σ² + eps) would blow up to an x̂ 0.02 off. NumPy's path takes the
    mean of x - μ out as well (the shift), the compiled kernels centre in float64: both land
    within rounding of the float64 truth (x̂ of such rows is ill-conditioned: its float64
    truth itself is good to about 1e-10)."""
    x = (1000.0 + 1e-3 * np.random.default_rng(5).standard_normal((64, 256))).astype(dtype)
    x[:, 0] += np.float64(3e-3).astype(dtype)  # rows whose rounding of μ is not symmetric
    ones, zeros = np.ones(256, dtype), np.zeros(256, dtype)
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(axis=-1, keepdims=True)
    truth = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + 1e-6)

    def outputs():
        plain = F.layer_norm(mt.tensor(x), mt.tensor(ones), mt.tensor(zeros)).numpy()
        fused = F.dropout_add_layer_norm(mt.tensor(x), mt.tensor(np.zeros_like(x)),
                                         mt.tensor(ones), mt.tensor(zeros), p=0.1).numpy()
        return plain, fused

    numpy_paths = outputs()
    _compiled.set_compiled_kernels(True)
    try:
        compiled_paths = outputs()
    finally:
        _compiled.set_compiled_kernels(False)
    limit = 5e-6 if dtype == "float32" else 5e-9
    for reference, got in zip(numpy_paths, compiled_paths, strict=True):
        assert np.abs(reference - truth).max() < limit
        assert np.abs(got - truth).max() < limit


def test_compiled_kernels_let_nan_and_inf_through(compiled):
    """fastmath stops at reassociation: a non-finite input still gives a non-finite output,
    so a diverging step is seen by the loss check, not hidden."""
    x = RNG.standard_normal((3, 32)).astype(np.float32)
    x[1, 5] = np.nan
    x[2, 7] = np.inf
    gain, bias = np.ones(32, np.float32), np.zeros(32, np.float32)
    y = F.dropout_add_layer_norm(mt.tensor(x), mt.tensor(np.zeros_like(x)), mt.tensor(gain),
                                 mt.tensor(bias), p=0.1).numpy()
    assert np.isfinite(y[0]).all()
    assert np.isnan(y[1]).all() and not np.isfinite(y[2]).any()
    w = mt.tensor(np.ones(4, np.float32), requires_grad=True)
    w.grad = np.array([0.1, np.nan, -0.2, np.inf], np.float32)
    Adam([w], lr=0.1).step()
    assert np.isfinite(w.data[[0, 2]]).all() and not np.isfinite(w.data[[1, 3]]).any()


def test_compiled_residual_keeps_a_dropped_nan_visible(compiled):
    """NumPy drops by a product, h ∘ keep, so a NaN or inf that dropout drops still makes its
    row NaN (a diverging sub-layer is not hidden); the compiled kernel multiplies as well."""
    x = np.zeros((40, 16), np.float32)
    h = RNG.standard_normal((40, 16)).astype(np.float32)
    h[:, 0] = np.nan                       # dropped in about half the rows
    gain, bias = np.ones(16, np.float32), np.zeros(16, np.float32)
    mt.manual_seed(3)
    y = F.dropout_add_layer_norm(*(mt.tensor(a) for a in (x, h, gain, bias)), p=0.5).numpy()
    assert np.isnan(y).all()
    x_t, h_t = mt.tensor(x, requires_grad=True), mt.tensor(np.ones_like(x), requires_grad=True)
    mt.manual_seed(3)
    out = F.dropout_add_layer_norm(x_t, h_t, mt.tensor(gain), mt.tensor(bias), p=0.5)
    out.backward(mt.tensor(np.full(x.shape, np.nan, np.float32)))
    assert np.isnan(h_t.grad).all()        # dropped entries too: NaN · 0 is NaN


@pytest.mark.parametrize("layer", ["layer_norm", "dropout_add_layer_norm", "linear_relu",
                                   "embedding"])
def test_float16_takes_numpys_path(compiled, monkeypatch, layer):
    """Numba compiles no float16: such arrays run NumPy's code, and give its numbers."""
    C = 8
    x, h = (RNG.standard_normal((5, C)).astype(np.float16) for _ in range(2))
    gain, bias = np.ones(C, np.float16), np.zeros(C, np.float16)
    function, arrays = {
        "layer_norm": (F.layer_norm, (x, gain, bias)),
        "dropout_add_layer_norm": (lambda *a: F.dropout_add_layer_norm(*a, p=0.2),
                                   (x, h, gain, bias)),
        "linear_relu": (F.linear_relu, (x, RNG.standard_normal((6, C)).astype(np.float16),
                                        np.zeros(6, np.float16))),
        "embedding": (lambda w: F.embedding(np.array([[1, 2, 1]]), w), (x,)),
    }[layer]
    assert not _compiled.enabled(np, x)
    numpy_results, compiled_results = _both_ways(function, arrays, monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("frozen", ["input", "sub-layer output"])
def test_compiled_backward_leaves_out_the_gradients_not_asked_for(compiled, monkeypatch,
                                                                   frozen):
    """A frozen input gets no gradient, and the others are those computed with it asked."""
    x, h = (RNG.standard_normal((30, 12)) for _ in range(2))
    gain, bias = RNG.standard_normal(12), RNG.standard_normal(12)
    if frozen == "input":
        def function(g, b):
            return F.layer_norm(mt.tensor(x), g, b)
    else:
        def function(x_, g, b):
            return F.dropout_add_layer_norm(x_, mt.tensor(h), g, b, p=0.3)
    arrays = (gain, bias) if frozen == "input" else (x, gain, bias)
    numpy_results, compiled_results = _both_ways(function, arrays, monkeypatch)
    for expected, actual in zip(numpy_results, compiled_results, strict=True):
        np.testing.assert_allclose(actual, expected, **TOLERANCE["float64"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_adam_is_numpys_update(compiled, dtype):
    """Five steps of Adam on a vector and two matrices (the larger in several blocks on the
    workers): the same parameters and moments as NumPy's path, up to rounding."""
    results = []
    for on in (False, True):
        mt.set_compiled_kernels(on)
        rng = np.random.default_rng(3)
        params = [mt.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
                  for shape in ((7,), (300, 40), (700, 500))]
        optimizer = Adam(params, lr=0.01)
        for _ in range(5):
            for p in params:
                p.grad = rng.standard_normal(p.shape).astype(dtype)
            optimizer.step()
        results.append([p.data for p in params] + optimizer.m + optimizer.v)
    for expected, actual in zip(*results, strict=True):
        np.testing.assert_allclose(actual, expected, **{"float32": dict(rtol=1e-5, atol=1e-7),
                                                        "float64": dict(rtol=1e-13,
                                                                        atol=1e-15)}[dtype])


def test_a_model_on_compiled_kernels_has_numpys_loss_and_gradients(compiled):
    """A Transformer's label-smoothed loss and every parameter's gradient, the same up to
    float32 rounding (absolute: the keys' biases have gradients of rounding size only, being
    0 in exact arithmetic, as softmax does not see a shift of all its scores)."""
    outcomes = []
    for on in (False, True):
        mt.set_compiled_kernels(on)
        mt.manual_seed(0)
        model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40,
                                              n_layers=2, d_model=32, d_ff=64, n_heads=4))
        rng = np.random.default_rng(0)
        src, tgt = rng.integers(1, 40, size=(6, 9)), rng.integers(1, 40, size=(6, 10))
        mt.manual_seed(5)
        loss = F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], label_smoothing=0.1,
                               ignore_index=0)
        loss.backward()
        outcomes.append((loss.item(), [p.grad for p in model.parameters()]))
    assert outcomes[1][0] == pytest.approx(outcomes[0][0], rel=1e-6)
    for expected, actual in zip(outcomes[0][1], outcomes[1][1], strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-7)


def test_the_switch(monkeypatch):
    assert not mt.get_compiled_kernels()          # the tests' default: NumPy's path
    mt.set_compiled_kernels(True)
    assert mt.get_compiled_kernels() and _compiled.enabled(np)
    backend.use("strict")                         # the simulated GPU keeps its own path
    assert not _compiled.enabled(backend.get_array_module(mt.zeros(1).data))
    with pytest.raises(TypeError, match="True or False"):
        mt.set_compiled_kernels("yes")
    monkeypatch.setattr(_compiled, "available", lambda: False)
    assert not mt.get_compiled_kernels()
    with pytest.raises(ImportError, match=r"pip install 'minitransformer\[fast\]'"):
        mt.set_compiled_kernels(True)


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False), ("1", True),
                                                 (None, True)])
def test_the_environment_variable_switches_them_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("MINITRANSFORMER_COMPILED", raising=False)
    else:
        monkeypatch.setenv("MINITRANSFORMER_COMPILED", value)
    out = subprocess.run([sys.executable, "-c", "import minitransformer as mt; "
                          "print(mt.get_compiled_kernels())"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(expected)


# Every kernel that calls a helper (exp32, a row's layer norm or its gradient), in float32.
_HELPED_KERNELS = """
import numpy as np
import minitransformer as mt
from minitransformer import functional as F
assert mt.get_compiled_kernels()
rng = np.random.default_rng(0)
x, h = (mt.tensor(rng.standard_normal((6, 8)).astype("float32"), requires_grad=True)
        for _ in range(2))
gain, bias = mt.ones(8, requires_grad=True), mt.zeros(8, requires_grad=True)
F.dropout_add_layer_norm(x, h, gain, bias, p=0.1).sum().backward()
F.layer_norm(x, gain, bias).sum().backward()
q = mt.tensor(rng.standard_normal((2, 2, 3, 4)).astype("float32"), requires_grad=True)
F.scaled_dot_product_attention(q, q, q).sum().backward()
F.cross_entropy(x, rng.integers(0, 8, 6)).backward()
"""


def test_a_second_process_finds_every_kernel_in_the_disk_cache(tmp_path):
    """Numba caches the kernels on disk, keyed on the compiled code and on the contents of the
    function's closure. A helper held in a closure pickles differently in every process, so
    each process missed the cache and added another entry to it, without end (thousands of
    files in the package's __pycache__); as module globals, a second process adds nothing."""
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "MINITRANSFORMER_COMPILED": "1"}

    def run_and_list():
        subprocess.run([sys.executable, "-c", _HELPED_KERNELS], env=env, check=True)
        return {p.name: p.stat().st_size for p in cache.rglob("*") if p.is_file()}
    first = run_and_list()
    assert any(name.endswith(".nbc") for name in first), "nothing was cached"
    assert run_and_list() == first


@pytest.mark.parametrize("blocks", [None, 64])
def test_dropout_words_are_splitmix64_on_either_path(compiled, monkeypatch, blocks):
    """The same bits compiled or in NumPy, whatever the blocks and threads: SplitMix64's
    published first word for the state 1234567, and one seed's mask everywhere."""
    words = np.empty(3, np.uint64)
    _compiled.kernels().splitmix_words(np.uint64(1234567), 0, words)
    assert words[0] == 6457827717110365317
    reference = np.empty(3, np.uint64)
    _splitmix_words(np.array([1234567], np.uint64), 0, reference, np)
    np.testing.assert_array_equal(words, reference)
    masks = []
    for on in (True, False):
        if blocks:
            monkeypatch.setattr(_blocks, "BLOCK_BYTES", blocks)
            monkeypatch.setattr(_blocks, "WORKERS", 2)
        mt.set_compiled_kernels(on)
        mt.manual_seed(5)
        masks.append(draw_levels("cpu", (37, 50), np))
    np.testing.assert_array_equal(masks[0], masks[1])
    assert masks[0].dtype == np.uint16 and abs(masks[0].mean() / 65536 - 0.5) < 0.02


def test_compiled_gather_append_is_numpys_gather_then_concatenation(compiled):
    """Beam search's kept keys and values and the new positions, copied once: the same
    array as kept[index] then concatenate, negative rows and a strided new included."""
    from minitransformer.nn.attention import _gather_append
    kept = RNG.standard_normal((5, 2, 3, 4)).astype(np.float32)
    new = RNG.standard_normal((4, 1, 2, 4)).astype(np.float32).transpose(0, 2, 1, 3)
    index = np.array([4, 0, -1, 2])
    np.testing.assert_array_equal(_gather_append(kept, index, new),
                                  np.concatenate([kept[index], new], axis=2))


def test_compiled_gather_append_leaves_what_does_not_fit_to_numpy(compiled):
    """A new part of other rows, heads or features, or an index that is not rows (a mask),
    goes to NumPy's gather and concatenation, which refuse it or do what NumPy does; the
    kernel never reads outside its arrays."""
    from minitransformer.nn.attention import _gather_append
    kept = RNG.standard_normal((5, 2, 3, 4)).astype(np.float32)
    with pytest.raises(ValueError):
        _gather_append(kept, np.array([0, 1, 2]), np.zeros((2, 2, 1, 4), np.float32))
    with pytest.raises(ValueError):
        _gather_append(kept, np.array([0, 1]), np.zeros((2, 2, 1, 3), np.float32))
    with pytest.raises(IndexError):
        _gather_append(kept, np.array([0, 5]), np.zeros((2, 2, 1, 4), np.float32))
    mask = np.array([True, False, True, False, False])
    new = RNG.standard_normal((2, 2, 1, 4)).astype(np.float32)
    np.testing.assert_array_equal(_gather_append(kept, mask, new),
                                  np.concatenate([kept[mask], new], axis=2))


def test_compiled_float32_exp_is_within_about_one_ulp_of_the_exact_value():
    """exp32 (the loss's and attention's exp in float32) against e^x in float64, rounded to
    float32's spacing: within 1.02 ulp on [-110, 95] (subnormal results included, in units of
    their own spacing), exact at 0, and NumPy's specials: NaN, inf, 0 for -inf and below
    e^-104, inf above float32's largest."""
    x = np.linspace(-110, 95, 2_000_001, dtype=np.float32)
    exact = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        finite = np.isfinite(exact.astype(np.float32))
    got = np.empty_like(x)[None]
    _compiled.kernels().exp_shifted(x[None], np.zeros(1, np.float32), got)
    got = got[0]
    spacing = np.spacing(exact[finite].astype(np.float32)).astype(np.float64)
    ulps = np.abs(got[finite].astype(np.float64) - exact[finite]) / spacing
    assert ulps.max() <= 1.02, f"{ulps.max():.3f} ulp at x = {x[finite][ulps.argmax()]}"
    assert np.isinf(got[~finite]).all() and (x[~finite] > 88).all()
    low, high = np.float32(-103.97208), np.float32(88.72284)        # exp32's clamps
    edges = [np.nextafter(low, -np.inf), low, np.nextafter(low, np.inf),
             np.nextafter(high, -np.inf), high, np.nextafter(high, np.inf)]
    special = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 88.8, -104.0, -103.2, *edges]],
                       np.float32)
    out = np.empty_like(special)
    _compiled.kernels().exp_shifted(special, np.zeros(1, np.float32), out)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.exp(special))
    scores = np.zeros((1, 2, 3, 2 * special.size), np.float32)[:, ::-1, 1:2, ::2]
    scores[...] = special                                   # a strided view, not contiguous
    _compiled.kernels().exp_scores(scores)                  # the same arithmetic, in place
    np.testing.assert_array_equal(scores[0, 0], out)
    np.testing.assert_array_equal(scores[0, 1], out)
