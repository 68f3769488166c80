"""The fused Functions against slow, obvious NumPy versions; dtypes, devices and clear errors."""

import math

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.standard_normal(shape)


def on(device, array, grad=False, dtype=None):
    array = np.asarray(array)
    if dtype is not None and array.dtype.kind == "f":
        array = array.astype(dtype)
    return mt.tensor(array, device=device, requires_grad=grad)


def host(x):
    return mt.to_numpy(x.data if isinstance(x, mt.Tensor) else x)


# ----------------------------------------------------------------------------- slow references

def linear_ref(x, W, b):
    rows = x.reshape(-1, x.shape[-1])
    out = np.zeros((len(rows), W.shape[0]))
    for n, row in enumerate(rows):
        for o in range(W.shape[0]):
            out[n, o] = sum(row[i] * W[o, i] for i in range(W.shape[1])) + b[o]
    return out.reshape(x.shape[:-1] + (W.shape[0],))


def softmax_row(row):
    exps = [math.exp(v) for v in row]
    return [e / sum(exps) for e in exps]


def attention_ref(q, k, v, mask):
    """One query at a time: weights over the keys it may see, then their average of values."""
    lead = q.shape[:-2]
    mask = np.broadcast_to(mask, lead + (q.shape[-2], k.shape[-2]))
    out = np.zeros(lead + (q.shape[-2], v.shape[-1]))
    weights = np.zeros(mask.shape)
    for idx in np.ndindex(*lead):
        for i in range(q.shape[-2]):
            seen = [j for j in range(k.shape[-2]) if mask[idx + (i, j)]]
            if not seen:
                continue  # nothing to attend to: zero weights, zero output
            scores = [q[idx + (i,)] @ k[idx + (j,)] / math.sqrt(q.shape[-1]) for j in seen]
            for j, p in zip(seen, softmax_row(scores), strict=True):
                weights[idx + (i, j)] = p
                out[idx + (i,)] += p * v[idx + (j,)]
    return out, weights


def cross_entropy_ref(logits, targets, eps, ignore_index=None):
    V = logits.shape[-1]
    total, n = 0.0, 0
    for row, y in zip(logits.reshape(-1, V), targets.reshape(-1), strict=True):
        if y == ignore_index:
            continue
        p = softmax_row(row)
        q = [(1 - eps) * (c == y) + eps / V for c in range(V)]
        total += -sum(qc * math.log(pc) for qc, pc in zip(q, p, strict=True))
        n += 1
    return total / n if n else 0.0


# ----------------------------------------------------------------------------- forward values

def test_linear_matches_a_loop(device):
    x, W, b = normal(2, 3, 4), normal(5, 4), normal(5)
    y = F.linear(on(device, x), on(device, W), on(device, b))
    np.testing.assert_allclose(host(y), linear_ref(x, W, b), rtol=1e-5, atol=1e-5)
    y = F.linear(on(device, x), on(device, W))
    np.testing.assert_allclose(host(y), linear_ref(x, W, np.zeros(5)), rtol=1e-5, atol=1e-5)


def test_linear_relu_is_relu_of_linear_forward_and_backward(device):
    x, W, b = normal(3, 4, 6), normal(5, 6), normal(5)
    dout = normal(3, 4, 5)
    results = []
    for fused in (True, False):
        tensors = [on(device, a, grad=True) for a in (x, W, b)]
        y = F.linear_relu(*tensors) if fused else F.relu(F.linear(*tensors))
        y.backward(on(device, dout))
        results.append([host(y)] + [host(t.grad) for t in tensors])
    assert (results[0][0] == 0).any() and (results[0][0] > 0).any()  # both sides of the kink
    for fused, plain in zip(*results, strict=True):
        np.testing.assert_allclose(fused, plain, rtol=1e-12, atol=1e-12)
    expected = np.maximum(linear_ref(x, W, b), 0)
    np.testing.assert_allclose(results[0][0], expected, rtol=1e-5, atol=1e-5)


def test_softmax_and_log_softmax_match_math(device):
    x = normal(3, 5)
    ref = np.array([softmax_row(row) for row in x])
    np.testing.assert_allclose(host(F.softmax(on(device, x))), ref, rtol=1e-5)
    np.testing.assert_allclose(host(F.log_softmax(on(device, x))), np.log(ref), rtol=1e-5)
    ref0 = np.array([softmax_row(col) for col in x.T]).T
    np.testing.assert_allclose(host(F.softmax(on(device, x), axis=0)), ref0, rtol=1e-5)


def test_layer_norm_matches_numpy(device):
    x, g, b = normal(2, 3, 6), normal(6), normal(6)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * g + b
    y = F.layer_norm(on(device, x), on(device, g), on(device, b))
    np.testing.assert_allclose(host(y), ref, rtol=1e-4, atol=1e-5)


def test_embedding_matches_a_loop_and_accepts_lists_arrays_and_tensors(device):
    W = normal(7, 3)
    ids = [[1, 6, 1], [0, 3, 3]]
    ref = np.array([[W[i] for i in row] for row in ids])
    for given in (ids, np.array(ids), on("cpu", np.array(ids)), on(device, np.array(ids))):
        y = F.embedding(given, on(device, W))
        assert y.device == device
        np.testing.assert_allclose(host(y), ref, rtol=1e-6)


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "random with empty row"])
def test_attention_matches_a_loop_over_queries(device, mask_kind):
    q, k, v = normal(2, 3, 4, 5), normal(2, 3, 6, 5), normal(2, 3, 6, 2)
    masks = {
        "none": np.ones((4, 6), dtype=bool),
        "padding": np.arange(6)[None, None, None, :] < np.array([6, 3])[:, None, None, None],
        "causal": np.tril(np.ones((4, 6), dtype=bool)),
        "random with empty row": np.array(RNG.random((3, 4, 6)) < 0.6),
    }
    mask = masks[mask_kind]
    if mask_kind == "random with empty row":
        mask[1, 2] = False
    given = None if mask_kind == "none" else on(device, mask)
    out, weights = F.scaled_dot_product_attention(on(device, q), on(device, k), on(device, v),
                                                  given, return_weights=True)
    ref_out, ref_weights = attention_ref(q, k, v, mask)
    np.testing.assert_allclose(host(out), ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(weights), ref_weights, rtol=1e-4, atol=1e-6)
    assert not weights.requires_grad and weights.shape == (2, 3, 4, 6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # NumPy's on inf - inf
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_attention_rows_with_a_nan_or_infinite_score_give_nan_on_every_device(device, bad):
    """An overflow in Q Kᵀ must stay visible as nan (as in PyTorch), never turn into zero
    weights that the training loop's finiteness checks cannot see; rows without the bad
    key, and fully masked rows, are unaffected."""
    q, k, v = normal(1, 1, 3, 4), normal(1, 1, 5, 4), normal(1, 1, 5, 2)
    q[0, 0, 0] = bad                                   # query 0 scores nan or ±inf
    mask = np.ones((3, 5), dtype=bool)
    mask[2] = False                                    # query 2 sees no key
    out, weights = F.scaled_dot_product_attention(on(device, q), on(device, k), on(device, v),
                                                  on(device, mask), return_weights=True)
    assert np.isnan(host(weights)[0, 0, 0]).all() and np.isnan(host(out)[0, 0, 0]).all()
    assert np.isfinite(host(out)[0, 0, 1]).all()
    assert not host(weights)[0, 0, 2].any() and not host(out)[0, 0, 2].any()


def test_causal_mask_is_lower_triangular_on_the_device(device):
    mask = F.causal_mask(4)
    assert mask.device == device and mask.dtype == np.bool_
    np.testing.assert_array_equal(host(mask), np.tril(np.ones((4, 4), dtype=bool)))
    assert F.causal_mask(3, device="cpu").device == "cpu"


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_cross_entropy_matches_a_loop(device, eps, ignore_index):
    logits, targets = normal(2, 3, 5), RNG.integers(0, 5, size=(2, 3))
    targets[0, 0] = 2
    loss = F.cross_entropy(on(device, logits), targets, eps, ignore_index)
    assert loss.shape == ()
    ref = cross_entropy_ref(logits, targets, eps, ignore_index)
    np.testing.assert_allclose(loss.item(), ref, rtol=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("normalizer", [1, 7, 2.5])
def test_cross_entropy_with_a_normalizer_divides_the_sum_by_it(device, eps, normalizer):
    """A batch's share of a step's mean: the summed loss of its real tokens over the number
    given, and its gradient the plain mean's times (real tokens / normalizer)."""
    logits, targets = normal(2, 3, 5), RNG.integers(1, 5, size=(2, 3))
    targets[1, 2] = 0                                                   # 5 real tokens
    mean_z, share_z = on(device, logits, grad=True), on(device, logits, grad=True)
    mean = F.cross_entropy(mean_z, targets, eps, ignore_index=0)
    share = F.cross_entropy(share_z, targets, eps, ignore_index=0, normalizer=normalizer)
    np.testing.assert_allclose(share.item(), mean.item() * 5 / normalizer, rtol=1e-6)
    mean.backward()
    share.backward()
    np.testing.assert_allclose(host(share_z.grad), host(mean_z.grad) * 5 / normalizer,
                               rtol=1e-5, atol=1e-7)
    assert not host(share_z.grad)[1, 2].any()                           # ignored: no gradient


def test_cross_entropy_takes_its_normalizer_as_a_number_or_a_0d_array(device):
    """Python and NumPy numbers, a 0-d NumPy array (checked as a number) and a 0-d float array
    on the logits' device (a captured step's count, used unread) divide alike."""
    logits, targets = normal(3, 5), np.array([1, 2, 4])
    device_count = mt.tensor(np.array(6.0), device=device).data
    losses = [F.cross_entropy(on(device, logits), targets, normalizer=n).item()
              for n in (6, 6.0, np.int64(6), np.float32(6), np.array(6), device_count)]
    np.testing.assert_allclose(losses, losses[0], rtol=1e-7)
    np.testing.assert_allclose(losses[0], F.cross_entropy(logits, targets).item() / 2,
                               rtol=1e-7)
    with pytest.raises(ValueError, match="normalizer must be a positive number"):
        F.cross_entropy(on(device, logits), targets, normalizer=np.array(0))


def test_cross_entropy_refuses_a_normalizer_its_dtype_cannot_hold():
    logits = mt.tensor(normal(3, 5).astype(np.float16))
    with pytest.raises(ValueError, match=r"normalizer 100000 is outside the range of the "
                                         r"logits' float16 \(6.10352e-05 to 65504\)"):
        F.cross_entropy(logits, [1, 2, 4], normalizer=100_000)
    with pytest.raises(ValueError, match=r"normalizer 1e-50 is outside the range of the "
                                         r"logits' float32"):
        F.cross_entropy(mt.tensor(normal(3, 5).astype(np.float32)), [1, 2, 4], normalizer=1e-50)


def test_a_captured_loss_takes_its_normalizer_from_the_device_not_the_host(device,
                                                                          monkeypatch):
    """A number would be fixed in the graph (CUDA copies it once, at capture): refused."""
    import minitransformer.functional.loss as loss_module
    monkeypatch.setattr(loss_module, "is_capturing", lambda: True)
    logits = on(device, normal(3, 5))
    with pytest.raises(ValueError, match=r"captured step needs its normalizer as a 0-d array"):
        F.cross_entropy(logits, np.array([1, 2, 4]), normalizer=6)
    if device != "cpu":  # a device's 0-d array: used unread, on the logits' device only
        count = mt.tensor(np.array(6.0), device=device).data
        targets = mt.tensor(np.array([1, 2, 4]), device=device)
        F.cross_entropy(logits, targets, normalizer=count)
        with pytest.raises(ValueError, match=rf"normalizer array lies on {device}, the "
                                             r"logits on cpu; give it on the logits' device"):
            F.cross_entropy(on("cpu", normal(3, 5)), np.array([1, 2, 4]), normalizer=count)


def test_cross_entropy_ignored_rows_with_infinite_logits_count_for_nothing(device):
    """A logit of -inf on the padding id (forbidding it) must not turn the loss into nan."""
    logits, targets = normal(4, 5), np.array([2, 3, 0, 0])
    logits[:, 0] = -np.inf
    z = on(device, logits, grad=True)
    loss = F.cross_entropy(z, targets, 0.0, ignore_index=0)
    expected = cross_entropy_ref(logits[:2, 1:], targets[:2] - 1, 0.0)
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-6)
    loss.backward()
    dz = host(z.grad)
    assert np.isfinite(dz).all() and not dz[2:].any()


def test_cross_entropy_ignored_rows_with_nan_logits_get_zero_gradient(device):
    """Padding rows are left out of the loss, so whatever their logits hold (nan from a
    broken upstream value that only padding touched), their gradient is 0, not 0 · nan."""
    logits, targets = normal(4, 5), np.array([2, 3, 0, 0])
    logits[2:] = np.nan
    z = on(device, logits, grad=True)
    loss = F.cross_entropy(z, targets, 0.1, ignore_index=0)
    np.testing.assert_allclose(loss.item(), cross_entropy_ref(logits[:2], targets[:2], 0.1),
                               rtol=1e-6)
    loss.backward()
    dz = host(z.grad)
    assert np.isfinite(dz).all() and not dz[2:].any() and dz[:2].any()


# ----------------------------------------------------------------------------- dtypes, devices

def _ops():
    """name -> (function of Tensors, its inputs as NumPy arrays: floats get gradients)."""
    ids = np.array([[1, 0, 3], [3, 2, 0]])
    return {
        "linear": (F.linear, [normal(2, 3, 4), normal(5, 4), normal(5)]),
        "softmax": (F.softmax, [normal(3, 5)]),
        "log_softmax": (lambda x: F.log_softmax(x, axis=0), [normal(3, 5)]),
        "linear_relu": (F.linear_relu, [normal(2, 3, 4), normal(5, 4), normal(5)]),
        "layer_norm": (F.layer_norm, [normal(2, 3, 6), normal(6), normal(6)]),
        "dropout": (lambda x: F.dropout(x, 0.3), [normal(4, 5)]),
        "embedding": (lambda W, i: F.embedding(i, W, padding_idx=0), [normal(4, 3), ids]),
        "attention": (F.scaled_dot_product_attention,
                      [normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3),
                       np.array(RNG.random((3, 5)) < 0.7)]),
        "cross_entropy": (lambda z, t: F.cross_entropy(z, t, 0.1, ignore_index=0),
                          [normal(2, 3, 4), ids]),
    }


OPS = _ops()


def _run(name, device, dtype):
    fn, arrays = OPS[name]
    mt.manual_seed(0)
    tensors = [on(device, a, grad=a.dtype.kind == "f", dtype=dtype) for a in arrays]
    out = fn(*tensors)
    dout = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(on(device, dout, dtype=dtype))
    return out, [t for t in tensors if t.requires_grad]


@pytest.mark.parametrize("name", sorted(OPS))
def test_float32_in_float32_out_and_float32_gradients(device, name):
    out, leaves = _run(name, device, "float32")
    assert out.dtype == np.float32 and out.device == device
    for leaf in leaves:
        assert leaf.grad.dtype == np.float32 and leaf.grad.shape == leaf.shape
        assert np.isfinite(host(leaf.grad)).all()


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_device_agrees_with_numpy_in_float64(device, name):
    if name == "dropout" and device == "cuda":
        pytest.skip("CuPy draws other random numbers than NumPy")
    out, leaves = _run(name, device, "float64")
    ref_out, ref_leaves = _run(name, "cpu", "float64")
    np.testing.assert_allclose(host(out), host(ref_out), rtol=1e-10, atol=1e-12)
    for leaf, ref in zip(leaves, ref_leaves, strict=True):
        np.testing.assert_allclose(host(leaf.grad), host(ref.grad), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- clear errors

def test_linear_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(5, 4\)"):
        F.linear(mt.tensor(normal(2, 3)), mt.tensor(normal(5, 4)))
    with pytest.raises(ValueError, match=r"bias of shape \(4,\).*\(5, 4\)"):
        F.linear(mt.tensor(normal(2, 4)), mt.tensor(normal(5, 4)), mt.tensor(normal(4)))


def test_layer_norm_names_the_parameter_shape():
    x = mt.tensor(normal(2, 6))
    with pytest.raises(ValueError, match=r"gain of shape \(5,\).*\(2, 6\)"):
        F.layer_norm(x, mt.tensor(normal(5)), mt.tensor(normal(6)))
    with pytest.raises(ValueError, match=r"bias of shape \(1, 6\)"):
        F.layer_norm(x, mt.tensor(normal(6)), mt.tensor(normal(1, 6)))


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, float("nan")])
def test_dropout_names_a_bad_p(p):
    with pytest.raises(ValueError, match=r"0 <= p < 1.*p="):
        F.dropout(mt.tensor(normal(3)), p)
    with pytest.raises(ValueError, match=r"p="):
        F.dropout(mt.tensor(normal(3)), p, training=False)


def test_embedding_names_bad_ids_and_the_vocabulary():
    W = mt.tensor(normal(32, 4))
    with pytest.raises(ValueError, match=r"token id 40 is outside the vocabulary of 32 entries "
                                         r"\(valid ids 0..31\)"):
        F.embedding([3, 40, 7, 35], W)
    with pytest.raises(ValueError, match=r"token id -1 is outside"):
        F.embedding([-1, 4], W)
    with pytest.raises(ValueError, match=r"token ids -2 and 33 are outside"):
        F.embedding([-2, 33], W)
    with pytest.raises(TypeError, match="integers"):
        F.embedding([1.0, 2.0], W)


def test_attention_names_the_shapes_that_disagree():
    q, k, v = mt.tensor(normal(2, 3, 4)), mt.tensor(normal(2, 5, 4)), mt.tensor(normal(2, 5, 6))
    attend = F.scaled_dot_product_attention
    with pytest.raises(ValueError, match=r"head size D.*q \(2, 3, 4\), k \(2, 5, 3\)"):
        attend(q, mt.tensor(normal(2, 5, 3)), v)
    with pytest.raises(ValueError, match=r"number of keys S.*v \(2, 4, 6\)"):
        attend(q, k, mt.tensor(normal(2, 4, 6)))
    with pytest.raises(ValueError, match=r"leading axes.*k \(1, 5, 4\)"):
        attend(q, mt.tensor(normal(1, 5, 4)), v)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\).*scores' shape \(2, 3, 5\)"):
        attend(q, k, v, np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 3, 5\)"):
        attend(q, k, v, np.ones((4, 3, 5), dtype=bool))
    with pytest.raises(TypeError, match="boolean"):
        attend(q, k, v, np.ones((3, 5)))


def test_cross_entropy_names_bad_targets_shapes_and_smoothing():
    logits = mt.tensor(normal(2, 3, 5))
    with pytest.raises(ValueError, match=r"target id 7 is outside the V = 5 classes"):
        F.cross_entropy(logits, [[0, 1, 2], [7, 4, 0]])
    with pytest.raises(ValueError, match=r"target id -1 is outside"):
        F.cross_entropy(logits, [[0, 1, 2], [-1, 4, 0]], ignore_index=-100)
    F.cross_entropy(logits, [[0, 1, 2], [-100, 4, 0]], ignore_index=-100)  # ignored: fine
    with pytest.raises(ValueError, match=r"targets of shape \(2, 2\).*logits of shape \(2, 3, 5\)"):
        F.cross_entropy(logits, [[0, 1], [2, 3]])
    for eps in (1.0, -0.1):
        with pytest.raises(ValueError, match="label_smoothing"):
            F.cross_entropy(logits, [[0, 1, 2], [3, 4, 0]], label_smoothing=eps)
    for normalizer in (0, -3, float("nan"), float("inf"), True, "12", 10**400,
                       np.array(None, dtype=object), np.array(True), np.ones(2)):
        with pytest.raises(ValueError, match=r"normalizer must be a positive number"):
            F.cross_entropy(logits, [[0, 1, 2], [3, 4, 0]], normalizer=normalizer)
